"""The facts and cells of a loaded version are made when first reached (`memforest.store.loaded_facts`,
`memforest.store.loaded_cells`): an open makes none, yet every fact, normalised text, exact duplicate
and cell reads as an open that makes them all; and a version held while this process commits keeps
its own."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import make_sessions

from memforest.resident.lazy_map import LazyMap
from memforest.resident.ondemand import BulkRows


@pytest.fixture
def large(monkeypatch):
    """Tables past their exact bound (lowered here), so a closed store caches its fact table's rows."""
    monkeypatch.setattr("memforest.resident.vector_table.EXACT_ROWS", 12)
    monkeypatch.setattr("memforest.index.forest_index.ROOTS_EXACT_ROWS", 4)


def _facts(state) -> dict:
    return {fid: (f.norm, f.text, f.event_start, f.entities, list(f.occurrences))
            for fid, f in state.facts.items()}


def _cells(state) -> tuple[dict, dict]:
    cells = {cid: (c.session_id, c.index, c.turn_lo, c.turn_hi, c.time, c.text)
             for cid, c in state.cells.items()}
    return cells, {sid: list(ids) for sid, ids in state.session_cells.items()}


def _eager(scripted_forest, store: Path, copy: Path):
    """The store's state as an open without caches makes it (every fact read at the open)."""
    shutil.copytree(store, copy)
    shutil.rmtree(copy / "users/u/cache")
    forest = scripted_forest(path=copy)
    state = forest.snapshot("u").state
    assert not isinstance(state.facts, LazyMap)
    return forest, state


def _kept_and_reopened(scripted_forest, tmp_path: Path, sessions: list[dict]):
    """The same sessions in a memory kept in memory and in one closed and opened again."""
    kept = scripted_forest(path=tmp_path / "kept")
    kept.ingest_sessions("u", sessions)
    closed = scripted_forest(path=tmp_path / "closed")
    closed.ingest_sessions("u", sessions)
    closed.close()
    return kept, scripted_forest(path=tmp_path / "closed")


def _repeating(sessions: list[dict], prefix: str) -> list[dict]:
    """The same sessions under other ids, a day later: every fact an exact duplicate."""
    return [{**s, "session_id": f"{prefix}{s['session_id']}", "timestamp": s["timestamp"][:-8] + "11:00:00"}
            for s in sessions]


def test_an_open_makes_no_fact_and_reads_as_an_open_that_makes_them_all(scripted_forest, tmp_path,
                                                                         large) -> None:
    forest = scripted_forest(path=tmp_path / "store")
    forest.ingest_sessions("u", make_sessions(8, 4))
    _ = forest.snapshot("u").lexical  # (built, so the close caches it)
    forest.close()
    reopened = scripted_forest(path=tmp_path / "store")
    state = reopened.snapshot("u").state
    loaded = state.tree_source.loaded_facts
    assert isinstance(state.facts, LazyMap) and loaded is not None and loaded.made == {}
    assert isinstance(state.cells, LazyMap) and isinstance(state.session_cells, LazyMap)
    assert state.cells._base == {} and state.session_cells._base == {}  # (nothing made)
    # the cached keys stay packed in their maps: the fact table's, the placements' and the lexical index's
    table_keys = state.fact_table.key_rows()
    assert isinstance(table_keys, LazyMap) and table_keys._base == {} and len(table_keys) == len(state.facts)
    assert isinstance(state.placements, LazyMap) and state.placements._base == {}
    packed = state.facts.packed_keys()  # (whose CRC-32s the lexical cache's documents are compared with)
    assert packed is not None and sorted(packed) == sorted(state.facts) and state.cells.packed_keys() is None
    lexical = reopened.snapshot("u").lexical
    assert isinstance(lexical.live, LazyMap) and lexical.live._base == {}
    assert len(lexical) == len(state.facts) + len(state.cells)
    edited = state.facts.fork()
    del edited[next(iter(packed))]
    assert edited.packed_keys() is None and state.facts.packed_keys() is packed
    _, eager = _eager(scripted_forest, tmp_path / "store", tmp_path / "eager")
    fid = sorted(eager.facts)[3]
    assert fid in state.facts and state.facts[fid].norm == eager.facts[fid].norm and len(loaded.made) == 1
    assert "no such fact" not in state.facts and state.facts.get("no such fact") is None
    assert state.norms.get(eager.facts[fid].norm) == fid and state.norms.get("no such text") is None
    assert sorted(state.facts) == sorted(eager.facts) and len(state.facts) == len(eager.facts)
    assert _facts(state) == _facts(eager)
    assert dict(state.norms.items()) == dict(eager.norms.items())
    assert len(state.cells) == len(eager.cells) and _cells(state) == _cells(eager)


def test_exact_duplicates_are_found_through_the_store_as_in_memory(scripted_forest, tmp_path, large) -> None:
    """The same writes on a reopened store (texts looked up in the store) and on the process that
    wrote it (every fact in memory) leave the same facts."""
    sessions = make_sessions(8, 4)
    kept, reopened = _kept_and_reopened(scripted_forest, tmp_path, sessions)
    for forest in (kept, reopened):
        forest.ingest_sessions("u", _repeating(sessions[:3], "again-"))
        forest.delete_session("u", "s004")
    after = reopened.snapshot("u").state
    assert isinstance(after.facts, LazyMap)
    assert _facts(after) == _facts(kept.snapshot("u").state)
    assert any(len(f[4]) > 1 for f in _facts(after).values())  # duplicates merged into their facts


def test_a_version_held_across_commits_keeps_its_facts_and_texts(scripted_forest, tmp_path, large) -> None:
    """A loaded version held while the process deletes, corrects and ingests duplicates (each commit
    moving the read snapshot past it) still reads its own facts and finds its own texts only."""
    sessions = make_sessions(8, 4)
    forest = scripted_forest(path=tmp_path / "store")
    forest.ingest_sessions("u", sessions)
    forest.close()
    _, eager = _eager(scripted_forest, tmp_path / "store", tmp_path / "eager")
    expected, texts, cells = _facts(eager), dict(eager.norms.items()), _cells(eager)
    reopened = scripted_forest(path=tmp_path / "store")
    held = reopened.snapshot("u")
    assert isinstance(held.state.facts, LazyMap)
    reopened.delete_session("u", "s002")
    changed = {**sessions[5], "turns": [{"role": "user", "content": "I moved to Lisbon and sold item5x0."}]}
    reopened.correct_session("u", changed)
    reopened.ingest_sessions("u", _repeating(sessions[:4], "again-"))
    now = reopened.snapshot("u").state
    assert set(now.facts) != set(expected)
    assert _facts(held.state) == expected and _cells(held.state) == cells
    assert _cells(now) != cells
    assert {n: held.state.norms.get(n) for n in texts} == texts
    new_texts = {now.facts[f].norm for f in now.facts if f not in expected}
    assert new_texts and all(held.state.norms.get(n) is None for n in new_texts - set(texts))
    _, eager_now = _eager(scripted_forest, tmp_path / "store", tmp_path / "eager-now")
    assert _facts(now) == _facts(eager_now) and _cells(now) == _cells(eager_now)


class _Rows:
    """A source over rows the test changes, as a read snapshot moved to a later version shows them."""

    def __init__(self, rows: dict[str, tuple[str, float | None]]) -> None:
        import threading

        from memforest.resident.ondemand import Waiting
        self.rows, self.lock, self.waiting, self.reads = dict(rows), threading.RLock(), Waiting(), 0

    def read(self, kind: str, key: str):
        assert kind == "fact_key"
        self.reads += 1
        return self.rows[key]

    def fact_keys(self):
        return [(f, *row) for f, row in self.rows.items()]

    def facts_with_norm(self, norm: str) -> list[str]:
        self.reads += 1
        return [f for f, (n, _) in self.rows.items() if n == norm]


def test_remembered_facts_keep_their_texts_when_the_store_moves_on() -> None:
    """Before a commit rewrites b (to a's text) and drops c (whose text a new fact d takes), the loaded
    version remembers both: afterwards it still finds each text's own fact, never b or d."""
    from memforest.resident.cow import _MISSING
    from memforest.store.loaded_facts import LoadedFacts
    rows = _Rows({"a": ("alpha", 1.0), "b": ("beta", None), "c": ("gamma", 3.0)})
    loaded = LoadedFacts({"a": 0, "b": 1, "c": 2}, rows)  # type: ignore[arg-type]
    loaded.remember(["b", "c", "d"])  # ("d": not the loaded version's: left alone)
    assert loaded.changed == {"b", "c"} and loaded.norms.made == {"beta": "b", "gamma": "c"}
    rows.rows.update({"b": ("alpha", 2.0), "d": ("gamma", 4.0)})  # the store at the commit's version
    del rows.rows["c"]
    assert loaded.norms.make("alpha") == "a" and loaded.norms.make("gamma") == "c"
    assert loaded.norms.make("beta") == "b" and loaded.make("b").norm == "beta"
    assert loaded.make("c").event_start == 3.0
    assert not loaded.holds("d") and loaded.make("d") is _MISSING and loaded.norms.make("delta") is _MISSING
    reads = rows.reads
    assert loaded.norms.make("alpha") == "a" and loaded.norms.make("delta") is _MISSING
    assert rows.reads == reads  # (each kept)


def test_the_cell_index_from_the_cache_arrays_is_the_one_made_leaf_by_leaf(scripted_forest, tmp_path, large,
                                                                           monkeypatch) -> None:
    """A reopened memory builds its cell index from the tree rows cache's arrays (every session tree
    unread): the same keys in the same order, the same cell ids and vectors as from each tree's leaves."""
    from memforest.index import forest_index, tree_rows_cache
    forest = scripted_forest(path=tmp_path / "store")
    forest.ingest_sessions("u", make_sessions(8, 4))
    forest.close()
    reopened = scripted_forest(path=tmp_path / "store")
    state = reopened.snapshot("u").state
    stamp = reopened._resident.caches_of("u", reopened._open_db("u", False)).db.stamp(state.version)
    bulk = tree_rows_cache.read_tree_rows(reopened.user_dir("u") / "cache" / tree_rows_cache.FILE_NAME, stamp,
                                          state.dim)  # (the rows the open took, released since)
    assert isinstance(bulk, BulkRows) and bulk.cells is not None and state.tree_source.bulk is None
    found = forest_index._cells_of_rows(state, bulk.cells)
    assert found is not None
    keys: LazyMap[int, tuple] = LazyMap(forest_index._CellKeys(found))
    uids: LazyMap[str, int] = LazyMap(forest_index._CellUids(found))
    vecs = bulk.cells.vecs[found.take]
    made, stacked = {}, []
    for t, info in state.trees.items():
        if info.family == "session":
            for nid, cell, vec in bulk.cell_leaves.get(t, []):
                made[forest_index.node_uid(info.rowid, nid)] = (t, nid, cell)
                stacked.append(vec)
    assert list(keys.items()) == list(made.items()) and len(keys) == len(state.cells)
    assert dict(uids.items()) == {c: u for u, (_, _, c) in made.items()} and len(uids) == len(made)
    assert list(uids) == [c for _, _, c in made.values()]
    assert (vecs == np.stack(stacked)).all()
    index = reopened.snapshot("u").index  # (the open's: keys found when first asked for, as made here)
    assert isinstance(index.cell_key, LazyMap) and dict(index.cell_key.items()) == made
    assert -1 not in index.cell_key and "no such cell" not in index.cell_uid


def test_a_merge_into_a_reopened_memory_leaves_the_facts_a_memory_in_memory_would(scripted_forest, tmp_path,
                                                                                   large) -> None:
    sessions = make_sessions(8, 4)
    other = _repeating(sessions[2:5], "v-") + _repeating(make_sessions(3, 4, 15), "w-")  # (some duplicates)
    kept = scripted_forest(path=tmp_path / "kept")
    closed = scripted_forest(path=tmp_path / "closed")
    for forest in (kept, closed):
        forest.ingest_sessions("u", sessions)
        forest.ingest_sessions("v", other)
    closed.close()
    reopened = scripted_forest(path=tmp_path / "closed")
    assert isinstance(reopened.snapshot("u").state.facts, LazyMap)
    for forest in (kept, reopened):
        forest.merge(["v"], "u")
    assert _facts(reopened.snapshot("u").state) == _facts(kept.snapshot("u").state)


def test_the_cells_ids_are_read_joined_and_row_by_row_where_an_id_holds_the_separator() -> None:
    import sqlite3

    from memforest.store.load import _cell_ids
    con = sqlite3.connect(":memory:")
    con.execute("CREATE TABLE cells (cell_id TEXT PRIMARY KEY)")
    assert _cell_ids(con) == []
    con.executemany("INSERT INTO cells VALUES (?)", [("s1#0",), ("s1#1",), ("s2#0",)])
    assert _cell_ids(con) == ["s1#0", "s1#1", "s2#0"]
    con.execute("INSERT INTO cells VALUES (?)", ("odd\0id",))
    assert sorted(_cell_ids(con)) == ["odd\0id", "s1#0", "s1#1", "s2#0"]


def _scenes(state) -> dict:
    return {sid: (s.size, s.t_last, s.total.round(5).tolist()) for sid, s in state.scenes.items()}


def test_a_scene_recomputed_in_a_reopened_memory_takes_its_members_times_without_reading_them(
        scripted_forest, tmp_path, large) -> None:
    """Deleting a session recomputes the scenes that lose its facts: their last times come from the
    fact table's meta for facts nothing read (no fact made for it), and equal a memory in memory's."""
    kept, reopened = _kept_and_reopened(scripted_forest, tmp_path, make_sessions(8, 4))
    state = reopened.snapshot("u").state
    loaded = state.tree_source.loaded_facts
    ids = sorted(kept.snapshot("u").state.facts)
    assert state.fact_times(ids) == [kept.snapshot("u").state.facts[f].time for f in ids]
    assert loaded.made == {}  # (their times from the table's meta: nothing made)
    for forest in (kept, reopened):
        forest.delete_session("u", "s003")
    assert _scenes(reopened.snapshot("u").state) == _scenes(kept.snapshot("u").state) != {}
    with pytest.raises(KeyError):
        state.fact_times(["no such fact"])


def test_the_sessions_times_table_is_never_partitioned(scripted_forest, tmp_path, large) -> None:
    """Past the exact bound (lowered here) the sessions' times table stays unpartitioned, written and
    loaded: only its rows' meta is read, so no partitions are trained on its zero vectors."""
    forest = scripted_forest(path=tmp_path / "store")
    forest.ingest_sessions("u", make_sessions(16, 2))
    state = forest.snapshot("u").state
    assert len(state.session_times) == 16 and state.session_times._parts is None
    forest.close()
    reopened = scripted_forest(path=tmp_path / "store").snapshot("u").state
    assert reopened.session_times._parts is None and len(reopened.session_times) == 16
    assert reopened.latest_session_time() == max(s.time for s in reopened.sessions.values())
