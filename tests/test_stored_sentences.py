"""The sentence vectors of long cells, embedded and stored by the write: a query embeds only its
question and ranks exactly as when it embeds the sentences itself; deleting or correcting a session
drops or replaces its cells' rows; a store without them (written before) answers the same."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_hybrid_ranking import CountingEmbedder

from memforest.api import MemForest
from memforest.config import MemForestConfig, TreeConfig
from memforest.llm.testing import HashEmbedder
from memforest.retrieval.query import retrieve
from memforest.sentences import user_sentences
from memforest.types import Turn

QUESTIONS = ["should I go to the debate team high school reunion?", "what did I pay for insurance?",
             "which trip did the budget cover?", "where did I leave my blue school bag?",
             "what about the garden tomatoes?"]


def _long_session(sid: str, day: int, topic: str, answer: str) -> dict:
    said = " ".join([*(f"Budget line {i} covers our {topic}, rent, fuel and phone bills." for i in range(7)),
                     answer, *(f"Line {i} is for the {topic} trip with the team." for i in range(7, 11))])
    return {"session_id": sid, "timestamp": f"2024-01-{day:02d}T10:00:00", "turns": [
        {"role": "user", "content": said},
        {"role": "assistant", "content": f"Glad to help with the {topic}. It sounds fun."},
        {"role": "user", "content": f"Thanks! I also paid the {topic} insurance. Hi."},
        {"role": "assistant", "content": "Noted."}]}


def _sessions() -> list[dict]:
    long = [_long_session("school", 3, "school", "I loved the debate team at my high school reunion."),
            _long_session("garden", 4, "garden", "The garden tomatoes came in red and early this year."),
            _long_session("travel", 5, "travel", "I left my blue school bag at the Lisbon hostel.")]
    short = [{"session_id": f"near{i}", "timestamp": f"2024-01-0{6 + i}T10:00:00", "turns": [
        {"role": "user", "content": f"my old school bag {i} was blue"},
        {"role": "assistant", "content": "a bag debate"}]} for i in range(3)]
    return long + short


def _forest(path: Path, embedder: HashEmbedder | None = None, **query: Any) -> MemForest:
    cfg = MemForestConfig(tree=TreeConfig(summary_mode="extractive"))
    cfg = replace(cfg, query=replace(cfg.query, **query))
    return MemForest(path, cfg, embedder=embedder or HashEmbedder(256), generate=False)


def _ranked(mf: MemForest, question: str, stored: bool) -> list[tuple]:
    snap = mf.snapshot("u")
    evidence, _, beyond = retrieve(snap, question, "2024-02-01T00:00", mf.config.query, mf.embedder, None, {},
                                   mf.config.tree.leaf_words, stored_sentences=stored)
    return [(e.kind, e.id, round(e.score, 6)) for e in [*evidence, *beyond]]


def _rows(mf: MemForest) -> dict[str, tuple[int, bytes | None]]:
    with sqlite3.connect(mf.user_dir("u") / "memory.sqlite") as con:
        return {cid: (words, blob) for cid, words, blob in con.execute("SELECT * FROM cell_sentences")}


def test_stored_sentences_rank_as_sentences_embedded_at_query_time(tmp_path: Path) -> None:
    embedder = CountingEmbedder()
    mf = _forest(tmp_path, embedder, final_units=3, rank_sessions=6)
    mf.ingest_sessions("u", _sessions())
    for question in QUESTIONS:
        embedder.batches.clear()
        stored = _ranked(mf, question, stored=True)
        assert embedder.batches == [[question]]  # the question alone
        embedder.batches.clear()
        embedded = _ranked(mf, question, stored=False)
        assert len(embedder.batches) == 2  # the question, then the sentences of the long cells
        assert stored == embedded and stored
    embedder.batches.clear()
    assert mf.query("u", QUESTIONS[0], answer=False).evidence[0].session_ids == ["school"]
    assert embedder.batches == [[QUESTIONS[0]]]


def test_the_write_stores_the_sentences_a_query_would_embed(tmp_path: Path) -> None:
    embedder = HashEmbedder(256)
    mf = _forest(tmp_path, embedder)
    mf.ingest_sessions("u", _sessions())
    rows = _rows(mf)
    state = mf.snapshot("u").state
    assert set(rows) == set(state.cells)  # a row for every cell: its length, vectors if long
    for cid, (words, blob) in rows.items():
        cell = state.cells[cid]
        turns = state.sessions[cell.session_id].turns[cell.turn_lo : cell.turn_hi + 1]
        assert words == sum(len(t.content.split()) for t in turns)
        if words <= mf.config.tree.leaf_words:
            assert blob is None
            continue
        assert blob is not None
        sentences = user_sentences(turns)
        assert len(sentences) == 8 and not any(s.startswith("Line") for s in sentences)  # the first 8
        assert np.frombuffer(blob, np.float32).tobytes() == embedder.embed(sentences, "passage").tobytes()


def test_deleting_or_correcting_a_session_drops_or_replaces_its_rows(tmp_path: Path) -> None:
    embedder = HashEmbedder(256)
    mf = _forest(tmp_path, embedder)
    mf.ingest_sessions("u", _sessions())
    before = _rows(mf)
    mf.delete_session("u", "garden")
    after = _rows(mf)
    assert any(c.startswith("garden#") for c in before) and not any(c.startswith("garden#") for c in after)
    assert after == {c: r for c, r in before.items() if not c.startswith("garden#")}

    corrected = _long_session("school", 3, "music", "I sang in the choir at my high school reunion.")
    mf.correct_session("u", corrected)
    rows = _rows(mf)
    assert {c for c in rows if c.startswith("school#")} == {c for c in before if c.startswith("school#")}
    (cid,) = [c for c in rows if c.startswith("school#") and rows[c][1] is not None]
    assert rows[cid] != before[cid]
    choir = user_sentences([Turn(t["role"], t["content"], 0.0) for t in corrected["turns"]])
    assert rows[cid][1] == embedder.embed(choir, "passage").tobytes()
    assert {c: r for c, r in rows.items() if not c.startswith("school#")} == {
        c: r for c, r in after.items() if not c.startswith("school#")}
    question = "who sang in the choir at the reunion?"
    assert _ranked(mf, question, stored=True) == _ranked(mf, question, stored=False)
    assert mf.check("u")["ok"]


V3_LAYOUT = "DROP TABLE cell_sentences; UPDATE meta SET value = '3' WHERE key = 'schema_version';"


@pytest.mark.parametrize("layout", ["schema 3", "rows lost"])
def test_a_store_without_sentence_vectors_answers_the_same(tmp_path: Path, layout: str) -> None:
    mf = _forest(tmp_path, final_units=3, rank_sessions=6)
    mf.ingest_sessions("u", _sessions())
    before = {q: _ranked(mf, q, stored=True) for q in QUESTIONS}
    answers = {q: [(e.kind, e.id) for e in mf.query("u", q, answer=False).evidence] for q in QUESTIONS}
    mf.close()
    with sqlite3.connect(tmp_path / "users" / "u" / "memory.sqlite") as con:
        con.executescript(V3_LAYOUT if layout == "schema 3" else "DELETE FROM cell_sentences;")
    embedder = CountingEmbedder()
    old = _forest(tmp_path, embedder, final_units=3, rank_sessions=6)
    for question in QUESTIONS:
        embedder.batches.clear()
        assert _ranked(old, question, stored=True) == before[question]
        assert [(e.kind, e.id) for e in old.query("u", question, answer=False).evidence] == answers[question]
        assert len(embedder.batches) > 2  # the sentences are embedded at query time
    assert _rows(old) == {}  # (migrated: the table is there, empty)
    old.ingest_sessions("u", [_long_session("later", 20, "music", "I sang in the choir at the reunion.")])
    assert {c.split("#")[0] for c in _rows(old)} == {"later"}  # new cells get their rows
    assert old.check("u")["ok"]


def test_a_merge_carries_the_sources_sentence_vectors(tmp_path: Path) -> None:
    mf = _forest(tmp_path)
    mf.ingest_sessions("a", _sessions()[:2])
    mf.ingest_sessions("b", _sessions()[2:])
    mf.merge(["a", "b"], "u")
    with sqlite3.connect(mf.user_dir("a") / "memory.sqlite") as con:
        a = dict((c, (w, v)) for c, w, v in con.execute("SELECT * FROM cell_sentences"))
    rows = _rows(mf)
    assert set(rows) == set(mf.snapshot("u").state.cells) and all(rows[c] == a[c] for c in a)
    reopened = _forest(tmp_path)
    assert _ranked(reopened, QUESTIONS[0], stored=True) == _ranked(reopened, QUESTIONS[0], stored=False)


def test_a_damaged_sentence_matrix_is_found_and_not_used(tmp_path: Path) -> None:
    mf = _forest(tmp_path, final_units=3)
    mf.ingest_sessions("u", _sessions())
    before = _ranked(mf, QUESTIONS[0], stored=False)
    mf.close()
    with sqlite3.connect(tmp_path / "users" / "u" / "memory.sqlite") as con:
        con.execute("UPDATE cell_sentences SET vectors = substr(vectors, 1, 10) WHERE vectors IS NOT NULL")
    reopened = _forest(tmp_path, final_units=3)
    assert any("cell_sentences.vectors" in p for p in reopened.check("u")["problems"])
    assert _ranked(reopened, QUESTIONS[0], stored=True) == before  # embedded at query time instead
