"""Hybrid unit ranking on the generator-free path: dense plus lexical scores, the date a question
names, and diversity across sessions, with unit scores that rank the evidence."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memforest.api import MemForest
from memforest.config import MemForestConfig, TreeConfig
from memforest.errors import InputError
from memforest.llm.testing import HashEmbedder
from memforest.refresh import cell_embed_text
from memforest.resident.cow import CowMap
from memforest.retrieval.hybrid import candidate_items, lexical_scores, rank_units
from memforest.retrieval.temporal import question_window
from memforest.timeutil import parse_time


def session(sid: str, day: str, lines: list[str]) -> dict:
    turns = []
    for i, line in enumerate(lines):
        turns += [{"role": "user", "content": line},
                  {"role": "assistant", "content": f"Noted, point {i} of {sid}."}]
    return {"session_id": sid, "timestamp": f"{day}T10:00:00", "turns": turns}


def forest(tmp_path: Path, **query: Any) -> MemForest:
    cfg = MemForestConfig(tree=TreeConfig(summary_mode="extractive"))
    cfg = replace(cfg, query=replace(cfg.query, **query))
    return MemForest(tmp_path, cfg, embedder=HashEmbedder(256), generate=False)


SESSIONS = [
    session("garden", "2024-03-01", [f"the tomato seedlings need water, note {i}" for i in range(6)]),
    session("pets", "2024-03-05", ["we adopted a whippet from the rescue and called her Maple",
                                   "the tomato seedlings are on the windowsill"]),
    session("travel", "2024-03-09",
            ["my flight to Lisbon leaves early", "the tomato salad in Lisbon was great"]),
    session("music", "2024-03-12", ["cello lessons start on Thursday", "tomato soup after the lesson"]),
]


def test_units_spread_over_sessions_and_scores_rank_them(tmp_path: Path) -> None:
    mf = forest(tmp_path, repeat_penalty=1.0)
    mf.ingest_sessions("u", SESSIONS)
    evidence = mf.query("u", "what about the tomato seedlings?", answer=False).evidence
    ranked = sorted(evidence, key=lambda e: -e.score)
    first_sessions = [e.session_ids[0] for e in ranked[:4]]
    assert sorted(first_sessions) == ["garden", "music", "pets", "travel"]
    assert len(evidence) == 10 and all(a.score >= b.score for a, b in zip(ranked, ranked[1:]))

    greedy = forest(tmp_path / "greedy", repeat_penalty=0.0)
    greedy.ingest_sessions("u", SESSIONS)
    top = sorted(greedy.query("u", "what about the tomato seedlings?", answer=False).evidence,
                 key=lambda e: -e.score)
    # without the penalty one session fills the top
    assert [e.session_ids[0] for e in top[:4]].count("garden") >= 3


def test_lexical_matches_join_the_dense_candidates(tmp_path: Path) -> None:
    mf = forest(tmp_path)
    mf.ingest_sessions("u", SESSIONS)
    snap = mf.snapshot("u")
    question = "what did we call the whippet?"
    qvec = mf.embedder.embed([question], "query")[0]
    items, lexical = candidate_items(snap, question, qvec, k=1)
    (best,) = lexical.top(1)
    assert snap.state.cells[best].session_id == "pets" and lexical.get(best) == 1.0 and best in items
    assert len(items) <= 2


def test_the_date_a_question_names_breaks_a_tie(tmp_path: Path) -> None:
    same = ["I went to a concert by the Lanterns"]
    mf = forest(tmp_path)
    mf.ingest_sessions("u", [session("early", "2024-01-10", same), session("late", "2024-02-14", same)])
    snap = mf.snapshot("u")
    ref = parse_time("2024-02-28")
    for question, expected in (("Which band did I see about two weeks ago?", "late"),
                               ("Which band did I see about seven weeks ago?", "early")):
        qvec = mf.embedder.embed([question], "query")[0]
        items, lexical = candidate_items(snap, question, qvec, k=10)
        window = question_window(question, ref)
        hits = rank_units(snap, items, qvec, lexical, window, mf.config.query, budget=2)
        first = snap.state.trees[hits[0].key[0]].label
        assert first == expected and hits[0].score > hits[1].score
    assert question_window("What should I cook tonight?", ref) is None  # only past dates count


def test_rank_units_respects_the_budget_and_empty_input(tmp_path: Path) -> None:
    mf = forest(tmp_path)
    mf.ingest_sessions("u", SESSIONS)
    snap = mf.snapshot("u")
    qvec = np.zeros(256, np.float32)
    none = lexical_scores(snap, "qqqq")  # no item shares a term
    assert len(none) == 0 and rank_units(snap, [], qvec, none, None, mf.config.query, budget=5) == []
    items = list(snap.state.cells)
    hits = rank_units(snap, items, qvec, none, None, mf.config.query, budget=3)
    assert len(hits) == 3 and len({h.key for h in hits}) == 3


def test_cells_ranked_from_their_index_rows_rank_as_from_their_objects(tmp_path: Path) -> None:
    mf = forest(tmp_path, repeat_penalty=0.3)
    mf.ingest_sessions("u", SESSIONS)
    mf.delete_session("u", "travel")  # a version whose rows were removed and rewritten
    mf.correct_session("u", {**SESSIONS[0], "turns": SESSIONS[0]["turns"][:6]})
    snap = mf.snapshot("u")
    assert snap.index.rows_match(snap.state)
    question = "what about the tomato seedlings?"
    qvec = mf.embedder.embed([question], "query")[0]
    items = list(snap.state.cells) + list(snap.state.facts)  # none of them is a dense candidate
    lexical = lexical_scores(snap, question)
    by_rows = rank_units(snap, items, qvec, lexical, None, mf.config.query, budget=6)
    snap.index.cell_uid = CowMap()  # every cell read from its objects instead
    by_objects = rank_units(snap, items, qvec, lexical, None, mf.config.query, budget=6)
    assert [h.key for h in by_rows] == [h.key for h in by_objects] and len(by_rows) == 6
    assert np.allclose([h.score for h in by_rows], [h.score for h in by_objects], atol=1e-6)


def test_a_leaf_vector_sees_the_users_words_first(tmp_path: Path) -> None:
    mf = forest(tmp_path)
    long_reply = " ".join(f"word{i}" for i in range(300))
    mf.ingest_sessions("u", [{"session_id": "s", "timestamp": "2024-03-01T10:00:00", "turns": [
        {"role": "assistant", "content": long_reply},
        {"role": "user", "content": "my whippet is called Maple"}]}])
    state = mf.snapshot("u").state
    (cell,) = state.cells.values()
    view = cell_embed_text(state, cell, 8)
    assert view == "assistant: word0 word1 word2\nuser: my whippet is called Maple"
    assert cell_embed_text(state, cell, 0) == cell.text and len(cell.text.split()) > 300
    assert mf.snapshot("u").lexical.scores("word299")  # the lexical index reads the whole cell


def _more_sessions() -> list[dict]:
    topics = ["tomato seedlings", "tomato salad", "tomato soup", "tomato sauce", "tomato jam", "tomato pie"]
    return [session(f"s{i}", f"2024-04-{i + 1:02d}", [f"the {t} again, note {j}" for j in range(4)])
            for i, t in enumerate(topics * 2)]


def test_ranking_past_the_budget_keeps_the_served_evidence_and_names_more_sessions(tmp_path: Path) -> None:
    mf = forest(tmp_path, final_units=3)
    mf.ingest_sessions("u", _more_sessions())
    question = "what about the tomato?"
    plain = mf.query("u", question, answer=False)
    ranked = mf.query("u", question, answer=False, rank_sessions=10)
    assert plain.ranked_beyond == []
    # the served evidence is the same: the greedy order makes the first `final_units` independent of it
    def units(evidence: list) -> list:
        return [(e.kind, e.id, e.score) for e in evidence]

    assert units(ranked.evidence) == units(plain.evidence)
    served = {(e.kind, e.id) for e in ranked.evidence}
    assert ranked.ranked_beyond and not served & {(e.kind, e.id) for e in ranked.ranked_beyond}
    assert all(e.via == "ranking" for e in ranked.ranked_beyond)
    beyond_scores = [e.score for e in ranked.ranked_beyond]
    assert beyond_scores == sorted(beyond_scores, reverse=True)
    sessions = {s for e in [*ranked.evidence, *ranked.ranked_beyond] for s in e.session_ids}
    assert len(sessions) == 10
    # it stops once the sessions are named: without the last unit fewer than 10 remain
    assert len({s for e in [*ranked.evidence, *ranked.ranked_beyond[:-1]] for s in e.session_ids}) < 10


def test_ranking_past_the_budget_ends_with_the_memory(tmp_path: Path) -> None:
    mf = forest(tmp_path, final_units=2)
    mf.ingest_sessions("u", SESSIONS)
    result = mf.query("u", "what about the tomato seedlings?", answer=False, rank_sessions=50)
    assert {s for e in [*result.evidence, *result.ranked_beyond] for s in e.session_ids} == {
        "garden", "pets", "travel", "music"}


def test_rank_sessions_is_checked(tmp_path: Path) -> None:
    mf = forest(tmp_path)
    mf.ingest_sessions("u", SESSIONS)
    for bad in (-1, 2.5, True, "3"):
        with pytest.raises(InputError, match="rank_sessions"):
            mf.query("u", "tomato?", answer=False, rank_sessions=bad)  # type: ignore[arg-type]


class CountingEmbedder(HashEmbedder):
    """The hashing embedder, recording every batch it is asked to embed."""

    def __init__(self) -> None:
        super().__init__(256)
        self.batches: list[list[str]] = []

    def embed(self, texts: Any, kind: Any = "passage") -> np.ndarray:
        self.batches.append(list(texts))
        return super().embed(texts, kind)


def _diluted_sessions() -> list[dict]:
    # the answer is the 8th sentence of a long user turn about something else, past the 80 words its
    # leaf vector encodes; the other sessions share a few of the question's words
    filler = [f"Budget line {i} covers our rent, groceries, fuel, insurance, water and phone bills."
              for i in range(7)]
    tail = [f"Budget line {i} is for the high school reunion debate team trip." for i in range(7, 12)]
    said = " ".join([*filler, "I loved the debate team at my high school reunion.", *tail])
    answer = {"session_id": "school", "timestamp": "2024-01-03T10:00:00", "turns": [
        {"role": "user", "content": said},
        {"role": "assistant", "content": "Glad to help. The high school reunion sounds fun."}]}
    others = [session(f"near{i}", f"2024-01-0{4 + i}", [f"my old school bag {i} was blue", "a bag debate"])
              for i in range(3)]
    return [answer, *others]


def test_a_cell_is_found_by_its_closest_user_sentence(tmp_path: Path) -> None:
    question = "should I go to the debate team high school reunion?"
    plain = forest(tmp_path / "plain", sentence_rerank=0, final_units=1, lexical_weight=0.0)
    plain.ingest_sessions("u", _diluted_sessions())
    assert plain.query("u", question, answer=False).evidence[0].session_ids != ["school"]

    embedder = CountingEmbedder()
    cfg = MemForestConfig(tree=TreeConfig(summary_mode="extractive"))
    cfg = replace(cfg, query=replace(cfg.query, final_units=1, lexical_weight=0.0))
    closer = MemForest(tmp_path / "closer", cfg, embedder=embedder, generate=False)
    closer.ingest_sessions("u", _diluted_sessions())
    # the write embeds the long cells' sentences in the batch of the cells' vectors, after them
    (batch,) = [b for b in embedder.batches if any(s.startswith("I loved") for s in b)]
    sentences = [s for s in batch if not s.startswith(("user:", "assistant:"))]
    embedder.batches.clear()
    evidence = closer.query("u", question, answer=False).evidence
    assert evidence[0].session_ids == ["school"]
    assert embedder.batches == [[question]]  # the question alone: the sentences' vectors are stored
    school = [s for s in sentences if s.startswith("Budget line") or s.startswith("I loved")]
    assert len(school) == 8 and school[-1] == "I loved the debate team at my high school reunion."
    assert all(len(s.split()) >= 4 for s in sentences)
    assert not any("sounds fun" in s for s in sentences)  # the user's sentences only


def test_cells_their_vector_reads_whole_are_not_rescored(tmp_path: Path) -> None:
    embedder = CountingEmbedder()
    cfg = MemForestConfig(tree=TreeConfig(summary_mode="extractive", leaf_words=80))
    mf = MemForest(tmp_path / "short", cfg, embedder=embedder, generate=False)
    mf.ingest_sessions("u", [session(f"s{i}", f"2024-01-0{i + 1}", [f"my old school bag {i} was blue today",
                                                                     "a fine bag debate it was"])
                             for i in range(4)])
    embedder.batches.clear()
    mf.query("u", "what colour was my school bag?", answer=False)
    assert embedder.batches == [["what colour was my school bag?"]]  # the question alone

    whole = MemForest(tmp_path / "whole", replace(cfg, tree=replace(cfg.tree, leaf_words=0)),
                      embedder=embedder, generate=False)  # the vector reads up to the encoder's window
    embedder.batches.clear()
    whole.ingest_sessions("u", _diluted_sessions())
    (batch,) = [b for b in embedder.batches if any(s.startswith("I loved") for s in b)]
    assert len([s for s in batch if not s.startswith(("user:", "assistant:"))]) > 8
    embedder.batches.clear()
    whole.query("u", "should I go to the debate team high school reunion?", answer=False)
    assert embedder.batches == [["should I go to the debate team high school reunion?"]]
