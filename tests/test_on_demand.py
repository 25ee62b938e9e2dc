"""Reading a loaded version when first needed (`memforest.resident.ondemand.OnDemand`): each record
reads what it was loaded without once, by kind and key, from its source; fields read together fill
each other (setting one reads the others first); a record read on demand equals, pickles and prints
as one made whole; and a commit reads in what it replaces whether or not its caller did."""

from __future__ import annotations

import pickle
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import make_sessions
from test_resident_versions import fingerprint

from memforest.api import MemForest
from memforest.config import MemForestConfig
from memforest.errors import StoreError
from memforest.llm.testing import HashEmbedder, ScriptedChatModel
from memforest.resident.cow import CowMap, CowSet
from memforest.resident.ondemand import NOT_READ, TreeInfo, Waiting
from memforest.state import ChangeSet
from memforest.store.db import UserDB
from memforest.trees.memtree import MemTree
from memforest.types import FACT_DETAIL, Cell, EntityStat, Fact, Occurrence, Session, Turn


class _Rows:
    """A `Source` over fixed values by (kind, key), recording each read."""

    def __init__(self, values: dict[tuple[str, Any], Any]) -> None:
        self.lock = threading.RLock()
        self.waiting = Waiting()
        self.values = values
        self.reads: list[tuple[str, Any]] = []

    def read(self, kind: str, key: Any) -> Any:
        self.reads.append((kind, key))
        return self.values[(kind, key)]


class _Meanwhile:
    """A lock under which `then` runs first: what another reader did while this one waited for it."""

    def __init__(self, then: Any) -> None:
        self._lock, self._then = threading.RLock(), then

    def __enter__(self) -> None:
        self._lock.acquire()
        self._then()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


def _fact(fid: str = "f1") -> Fact:
    return Fact(fid, "Ana moved to Davis", "ana moved to davis", "user", "event", ["Ana"], ["ana"], ["home"],
                "in May", 1.0e9, None, "residence", "personal", "facts",
                [Occurrence("s1", "s1#0", 0, 1, 2.0e9), Occurrence("s2", "s2#1", 2, 3, 1.5e9)])


def _unread(fact: Fact) -> tuple[Fact, _Rows]:
    """`fact` as a loaded version holds it before anything reads it, and its source."""
    source = _Rows({("fact", fact.id): tuple(getattr(fact, name) for name in FACT_DETAIL),
                    ("occurrences", fact.id): list(fact.occurrences)})
    return Fact.unread(fact.id, fact.norm, fact.event_start, source), source


def test_a_session_and_a_cell_read_once_and_then_equal_pickle_and_print_as_made() -> None:
    turns = [Turn("user", "I moved to Davis.", 1.0), Turn("assistant", "Nice.", 2.0)]
    source = _Rows({("turns", "s1"): turns, ("text", "s1#0"): "user: I moved to Davis."})
    session, cell = Session("s1", 1.0, source=source), Cell("s1#0", "s1", 0, 0, 1, 1.0, source=source)
    assert not session.is_read and not cell.is_read and not source.reads
    assert "turns not read" in repr(session) and "text not read" in repr(cell)
    assert session.turns == turns and session.turns is session.turns
    assert cell.text == "user: I moved to Davis." and cell.text is cell.text
    assert source.reads == [("turns", "s1"), ("text", "s1#0")]  # once each
    made = Session("s1", 1.0, turns), Cell("s1#0", "s1", 0, 0, 1, 1.0, "user: I moved to Davis.")
    assert (session, cell) == made and pickle.loads(pickle.dumps((session, cell))) == made
    assert (repr(session), repr(cell)) == tuple(map(repr, made)) and hash(cell) == hash(made[1])
    with pytest.raises(AttributeError, match="immutable"):
        cell.text = "changed"


def test_a_fact_reads_its_fields_in_one_read_and_its_occurrences_in_another() -> None:
    whole = _fact()
    fact, source = _unread(whole)
    assert not fact.is_read and "not read" in repr(fact)
    assert fact.time == whole.event_start and not source.reads  # (known at the open)
    assert fact.domain == "personal" and source.reads == [("fact", "f1")]
    assert all(getattr(fact, name) == getattr(whole, name) for name in FACT_DETAIL)
    assert source.reads == [("fact", "f1")] and not fact.is_read  # every field in one read, not occurrences
    assert "occurrences not read" in repr(fact)
    assert fact.occurrences == whole.occurrences and fact.first == whole.first
    assert source.reads == [("fact", "f1"), ("occurrences", "f1")] and fact.is_read
    assert fact == whole and repr(fact) == repr(whole)
    assert pickle.loads(pickle.dumps(fact)) == whole and fact.copy_for_write() == whole
    assert not any(value is NOT_READ for value in fact.copy_for_write()._fields())


def test_setting_a_field_read_with_others_reads_them_first_and_what_is_set_stays() -> None:
    fact, source = _unread(_fact())
    fact.occurrences = []  # a field read alone: set, nothing read
    assert source.reads == [] and fact.occurrences == []
    fact.topics = ["mine"]  # read with the other fields: they are read first
    assert source.reads == [("fact", "f1")] and fact.is_read
    assert fact.text == "Ana moved to Davis" and fact.topics == ["mine"] and source.reads == [("fact", "f1")]
    Fact.text.take(fact, tuple(f"other {name}" for name in FACT_DETAIL))  # a bulk reader comes later
    assert fact.text == "Ana moved to Davis" and fact.topics == ["mine"]  # what is read or set stays
    members = _Rows({("members", "ana"): (CowSet.over({"f1": None}), CowMap.over({"s1": 1}))})
    stat = EntityStat("ana", tree_id="entity:ana", source=members)
    assert not stat.is_read and "members not read" in repr(stat)
    stat.sessions = CowMap.over({"s9": 4})
    assert members.reads == [("members", "ana")] and stat.is_read  # facts and session counts in one read
    assert set(stat.facts) == {"f1"} and dict(stat.sessions) == {"s9": 4}


def test_an_entity_label_reads_its_facts_and_session_counts_together() -> None:
    source = _Rows({("members", "ana"): (CowSet.over({"f1": None, "f2": None}), CowMap.over({"s1": 2}))})
    stat = EntityStat("ana", tree_id="entity:ana", source=source)
    assert dict(stat.sessions) == {"s1": 2} and set(stat.facts) == {"f1", "f2"}
    assert source.reads == [("members", "ana")]
    made = EntityStat("ana", CowSet.over({"f1": None, "f2": None}), CowMap.over({"s1": 2}), "entity:ana")
    assert stat == made and repr(stat) == repr(made)
    assert pickle.loads(pickle.dumps(stat)) == made  # (read, it holds no source: a lock pickles not)
    copy = stat.copy()
    copy.add_fact("f3")
    assert "f3" not in stat.facts and copy.edited == ({"f3"}, set())


def test_a_tree_is_read_once_and_a_read_made_while_waiting_for_the_lock_is_kept() -> None:
    source = _Rows({("tree", "entity:ana"): MemTree("entity:ana", 4)})
    info = TreeInfo("entity:ana", "entity", "ana", 1, source=source, root=None)
    assert not info.is_read and not info.has_root and "read=False" in repr(info)
    tree = info.tree
    assert info.tree is tree and info.is_read and source.reads == [("tree", "entity:ana")]
    assert pickle.loads(pickle.dumps(info)).tree.tree_id == "entity:ana"  # (read: its source forgotten)

    racing, other = _Rows({}), MemTree("entity:bo", 4)
    late = TreeInfo("entity:bo", "entity", "bo", 2, source=racing)
    racing.lock = _Meanwhile(lambda: setattr(late, "tree", other))
    assert late.tree is other and racing.reads == []  # looked at again under the lock: not read twice
    with pytest.raises(ValueError, match="neither nodes nor a source"):
        TreeInfo("entity:cy", "entity", "cy", 3)


def _forest(path: Path, lazy: bool = True) -> MemForest:
    cfg = MemForestConfig(lazy_trees=lazy, warm_tree_leaves=0, release_check_s=0)
    return MemForest(path, cfg, llm=ScriptedChatModel(), embedder=HashEmbedder())


def _store_and_copy(tmp_path: Path) -> tuple[Path, Path]:
    root, copy = tmp_path / "store", tmp_path / "copy"
    with _forest(root) as forest:
        forest.ingest_sessions("u", make_sessions(6, 4))
    shutil.copytree(root, copy)
    return root, copy


def test_a_commit_reads_what_it_replaces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No caller reads before a commit: the commit reads into the version it was forked from what it
    replaces, so an older version still reads what it was opened with."""
    monkeypatch.setattr("memforest.resident.vector_table.EXACT_ROWS", 12)  # facts read on demand too
    monkeypatch.setattr("memforest.index.forest_index.ROOTS_EXACT_ROWS", 4)
    root, copy = _store_and_copy(tmp_path)
    with _forest(root) as forest:
        old = forest.snapshot("u")
        state = old.state
        assert not any(f.is_read for f in state.facts.values()) and not state.sessions["s003"].is_read
        forest.correct_session("u", {**make_sessions(9, 4, start_day=20)[7], "session_id": "s002"})
        forest.delete_session("u", "s003")
        assert state.tree_source.version == old.version + 2  # moved on: it reads the newest rows now
        for sid in ("s002", "s003"):
            assert state.sessions[sid].is_read
            assert all(state.cells[c].is_read for c in state.session_cells[sid])
        dropped = set(state.facts) - set(forest.snapshot("u").state.facts)
        assert dropped and all(state.facts[f].is_read for f in dropped)
        with _forest(copy, lazy=False) as eager:
            assert fingerprint(old) == fingerprint(eager.snapshot("u"))
            assert dict(state.facts) == dict(eager.snapshot("u").state.facts)
        assert forest.check("u")["ok"]


def test_a_commit_that_cannot_read_what_it_replaces_fails_and_writes_nothing(tmp_path: Path) -> None:
    root, _ = _store_and_copy(tmp_path)
    db = UserDB(root / "users" / "u" / "memory.sqlite")
    base = db.load("u", lazy=True)
    state, ch = base.fork(), ChangeSet()
    state.remove_session("s003")
    ch.deleted_sessions.add("s003")
    base.tree_source.close()  # what `base` has not read can no longer be read
    with pytest.raises(StoreError, match="can no longer be read"):
        db.commit(state, ch, expected_version=base.version, base=base)
    assert db.version() == base.version
    with _forest(root) as forest:
        assert "s003" in forest.snapshot("u").state.sessions and forest.check("u")["ok"]
