"""A loaded fact said again is written without reading its occurrences (`memforest.types.Appended`):
the writes read none of them, yet every version, held or current, reopened or not, reads the
occurrences, times and first sessions an open that reads them all does; and what deletes or rewrites
a fact's rows reads them first."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import pytest
from conftest import make_sessions

from memforest.resident.lazy_map import LazyMap


@pytest.fixture
def large(monkeypatch):
    """Tables past their exact bound (lowered here), so a closed store caches its fact table's rows."""
    monkeypatch.setattr("memforest.resident.vector_table.EXACT_ROWS", 12)
    monkeypatch.setattr("memforest.index.forest_index.ROOTS_EXACT_ROWS", 4)


def _again(sessions: list[dict], prefix: str, day: str) -> list[dict]:
    """The same sessions under other ids on `day` (an ISO date): every fact an exact duplicate."""
    return [{**s, "session_id": f"{prefix}{s['session_id']}", "timestamp": f"{day}T10:00:00"}
            for s in sessions]


def _facts(state) -> dict:
    return {fid: (f.norm, f.text, list(f.occurrences)) for fid, f in state.facts.items()}


def _labels(state) -> dict:
    return {label: (sorted(e.facts), dict(e.sessions)) for label, e in state.entities.items()}


def _meta(state) -> dict:
    return {fid: tuple(state.fact_table.meta(fid)) for fid in state.facts}


def _eager(scripted_forest, store: Path, copy: Path):
    """The store as an open without caches reads it (every fact and its meta read at the open)."""
    shutil.copytree(store, copy)
    shutil.rmtree(copy / "users/u/cache")
    state = scripted_forest(path=copy).snapshot("u").state
    assert not isinstance(state.facts, LazyMap)
    return state


class _Counted:
    """Counts the occurrence reads of a loaded version's source (each a read of one fact's rows)."""

    def __init__(self, source) -> None:
        self.facts: list[str] = []
        read = source._readers["occurrences"]

        def counted(fact_id: str):
            self.facts.append(fact_id)
            return read(fact_id)
        source._readers["occurrences"] = counted


def _reopened(scripted_forest, path: Path, sessions: list[dict]):
    forest = scripted_forest(path=path)
    forest.ingest_sessions("u", sessions)
    forest.close()
    forest = scripted_forest(path=path)
    assert isinstance(forest.snapshot("u").state.facts, LazyMap)
    return forest


def test_a_fact_said_again_is_written_without_reading_its_occurrences(scripted_forest, tmp_path,
                                                                      large) -> None:
    sessions = make_sessions(8, 4)
    forest = _reopened(scripted_forest, tmp_path / "store", sessions)
    held = forest.snapshot("u")  # (a version held across the commits below)
    before = _eager(scripted_forest, tmp_path / "store", tmp_path / "before")
    reads = _Counted(held.state.tree_source)
    forest.ingest_sessions("u", _again(sessions[:3], "a-", "2023-03-01"))
    forest.ingest_sessions("u", _again(sessions[:2], "b-", "2023-03-02"))
    now = forest.snapshot("u").state
    said = [f for f in now.facts.values() if f.appended is not None]
    assert len(said) >= 2 and reads.facts == []  # (said again twice, never read)
    assert any([o.session_id[:2] for o in f.appended.tail] == ["a-", "b-"] for f in said)
    after = _eager(scripted_forest, tmp_path / "store", tmp_path / "after")
    assert _meta(now) == _meta(after)  # (each kept its first session's meta: none read)
    assert _labels(now) == _labels(after)  # (the sessions each fact gained, found by probes)
    assert reads.facts == []
    assert _facts(now) == _facts(after) and reads.facts  # (read now: the root's rows, then the tail)
    assert _facts(held.state) == _facts(before)  # the held version: its own rows, none appended since
    assert forest.check("u")["ok"]


def test_an_earlier_restatement_moves_the_first_session_without_a_read_and_a_tie_reads(
        scripted_forest, tmp_path, large) -> None:
    sessions = make_sessions(8, 4)
    forest = _reopened(scripted_forest, tmp_path / "store", sessions)
    reads = _Counted(forest.snapshot("u").state.tree_source)
    forest.ingest_sessions("u", _again(sessions[:1], "early-", "2022-06-01"))  # before every session
    assert reads.facts == []
    # as early as the first occurrences of the facts of s001 and s002: ties, read (the earlier id first)
    forest.ingest_sessions("u", [{**sessions[1], "session_id": "0-tie"},
                                 {**sessions[2], "session_id": "z-tie"}])
    after = _eager(scripted_forest, tmp_path / "store", tmp_path / "after")
    now = forest.snapshot("u").state
    assert _meta(now) == _meta(after) and _facts(now) == _facts(after)
    for first in ("early-s000", "0-tie", "s002"):
        facts = [f for f in after.facts.values() if f.first is not None and f.first.session_id == first]
        assert facts and all(now.facts[f.id].first == f.first for f in facts)


def test_deletes_and_corrections_after_appends_read_the_rows_first(scripted_forest, tmp_path, large) -> None:
    """Each version held along appends, a deletion of a session the roots were said in, a correction
    and a deletion of a session only appended: each reads its own occurrences, and a reopened store
    reads the ones the process holds."""
    sessions = make_sessions(6, 4)
    forest = _reopened(scripted_forest, tmp_path / "store", sessions)
    expected, held = [], []

    def keep() -> None:
        snap = forest.snapshot("u")
        held.append(snap)
        expected.append(_facts(_eager(scripted_forest, tmp_path / "store", tmp_path / f"v{len(held)}")))

    keep()
    forest.ingest_sessions("u", _again(sessions[:3], "a-", "2023-03-01"))
    keep()
    forest.ingest_sessions("u", _again(sessions[:3], "b-", "2023-03-02"))
    keep()
    forest.delete_session("u", "s001")  # (said before: the roots' rows go)
    keep()
    forest.correct_session("u", {**sessions[2], "session_id": "a-s002", "timestamp": "2023-03-05T10:00:00"})
    keep()
    forest.ingest_sessions("u", _again(sessions[:1], "c-", "2023-03-06"))
    forest.delete_session("u", "c-s000")  # (said only in the tail)
    keep()
    for snap, facts in zip(held, expected):
        assert _facts(snap.state) == facts
    forest.close()
    assert _facts(scripted_forest(path=tmp_path / "store").snapshot("u").state) == expected[-1]


def test_a_held_version_drained_in_one_pass_reads_its_own_rows(scripted_forest, tmp_path, large) -> None:
    """Reading every fact in one pass over the store's rows (`read_all`) takes a root's rows up to
    its bound and an appended copy's through its root."""
    sessions = make_sessions(6, 4)
    forest = _reopened(scripted_forest, tmp_path / "store", sessions)
    held = forest.snapshot("u")
    before = _eager(scripted_forest, tmp_path / "store", tmp_path / "before")
    forest.ingest_sessions("u", _again(sessions[:4], "a-", "2023-03-01"))
    middle = forest.snapshot("u")
    forest.ingest_sessions("u", _again(sessions[:4], "b-", "2023-03-02"))
    assert held.state.tree_source.last_seqs
    held.state.read_all()
    assert _facts(held.state) == _facts(before)
    middle.state.read_all()
    assert all(f.appended is None for f in middle.state.facts.values())
    now = forest.snapshot("u").state
    assert _facts(now) == _facts(_eager(scripted_forest, tmp_path / "store", tmp_path / "after"))


def test_an_appended_fact_pickles_and_compares_as_the_fact_read_whole(scripted_forest, tmp_path,
                                                                      large) -> None:
    sessions = make_sessions(8, 4)
    forest = _reopened(scripted_forest, tmp_path / "store", sessions)
    forest.ingest_sessions("u", _again(sessions[:1], "a-", "2023-03-01"))
    state = forest.snapshot("u").state
    fact = next(f for f in state.facts.values() if f.appended is not None)
    copy = fact.copy_for_write()
    assert copy.appended is not None and copy.appended.tail is not fact.appended.tail
    copy.add_occurrence(fact.appended.tail[0]._replace(session_id="x"))
    assert fact.said_in("a-s000") and not fact.said_in("x") and copy.said_in("x")
    assert fact.said_in(fact.appended.root.occurrences[0].session_id)
    whole = pickle.loads(pickle.dumps(fact))
    assert whole.appended is None and whole == fact and whole.occurrences == fact.occurrences
    assert len(copy.occurrences) == len(fact.occurrences) + 1 and copy != fact
