"""Trees read on demand (`MemForestConfig.lazy_trees`): an opened memory reads a tree's nodes when
something first reaches it, always as the version it was opened at, whatever was committed since by
this process or another; damage found on the way is a one-line StoreError."""

from __future__ import annotations

import random
import shutil
import sqlite3
import threading
from pathlib import Path

import numpy as np
import pytest
from conftest import make_sessions
from test_resident_versions import fingerprint
from test_store_caches import DAMAGE as CACHE_DAMAGE

from memforest.api import MemForest
from memforest.config import MemForestConfig
from memforest.errors import StoreError
from memforest.index import tree_rows_cache
from memforest.llm.testing import HashEmbedder, ScriptedChatModel
from memforest.resident.cache_file import CacheMiss
from memforest.resident.cow import FOLD_AT
from memforest.resident.ondemand import LazyNodeMap, NodeData, Waiting
from memforest.state import FactVectors
from memforest.trees.node import NO_CHILDREN


def _forest(path: Path, lazy: bool = True, warm: bool = False, share: float = 1.0) -> MemForest:
    """`warm=False` (most tests): no tree is read ahead, so every read here is one an operation made;
    `warm=True`: the entity and scene trees holding `share` of their leaves, largest first."""
    cfg = MemForestConfig(lazy_trees=lazy, warm_tree_leaves=1 if warm else 0, warm_tree_share=share,
                          release_check_s=0)
    return MemForest(path, cfg, llm=ScriptedChatModel(), embedder=HashEmbedder())


def _built_and_copied(tmp_path: Path) -> tuple[Path, Path]:
    """A built store and a copy of it as it is now (read eagerly later, as the version it holds)."""
    root = _built(tmp_path)
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    return root, copy


def _built(tmp_path: Path, n: int = 6) -> Path:
    root = tmp_path / "store"
    with _forest(root) as forest:
        forest.ingest_sessions("u", make_sessions(n, 4))
    return root


def test_an_open_reads_no_tree_and_a_query_reads_few(tmp_path: Path) -> None:
    root = _built(tmp_path)
    with _forest(root) as forest:
        snap = forest.snapshot("u")
        infos = list(snap.state.trees.values())
        assert infos and not any(i.is_read for i in infos)
        assert len(snap.state.nodes) == sum(1 for _ in snap.state.nodes.items()) > 0  # counted, then all read
    with _forest(root) as forest, _forest(root, lazy=False) as eager:
        lazy_hits = forest.query("u", "Where do I live now?", answer=False)
        read = [i for i in forest.snapshot("u").state.trees.values() if i.is_read]
        assert 0 < len(read) < len(infos)
        assert lazy_hits.evidence == eager.query("u", "Where do I live now?", answer=False).evidence
        assert fingerprint(forest.snapshot("u")) == fingerprint(eager.snapshot("u"))


def test_an_open_reads_no_turns_cell_text_or_members_and_a_query_reads_what_it_needs(tmp_path: Path) -> None:
    root = _built(tmp_path)
    with _forest(root) as forest, _forest(root, lazy=False) as eager:
        state = forest.snapshot("u").state
        assert state.sessions and not any(s.is_read for s in state.sessions.values())
        assert state.cells and not any(c.is_read for c in state.cells.values())
        assert state.entities and not any(e.is_read for e in state.entities.values())
        hits = forest.query("u", "Where do I live now?", answer=False)
        assert hits.evidence == eager.query("u", "Where do I live now?", answer=False).evidence
        read = {c for c, cell in state.cells.items() if cell.is_read}
        assert {e.id for e in hits.evidence if e.kind == "cell"} <= read  # (the lexical index reads all here)
        assert all(s.is_read for s in eager.snapshot("u").state.sessions.values())


def test_an_old_version_reads_the_turns_it_was_opened_with_after_a_correction(tmp_path: Path) -> None:
    root, copy = _built_and_copied(tmp_path)
    with _forest(root) as forest:
        old = forest.snapshot("u")
        forest.correct_session("u", {**make_sessions(9, 4, start_day=20)[7], "session_id": "s002"})
        forest.delete_session("u", "s003")
        assert old.state.tree_source.version == old.version + 2
        new = forest.snapshot("u").state
        assert new.sessions["s002"].turns != old.state.sessions["s002"].turns
        with _forest(copy, lazy=False) as eager:
            was = eager.snapshot("u").state
            for sid in ("s002", "s003", "s004"):
                assert old.state.sessions[sid] == was.sessions[sid]
                assert all(old.state.cells[c] == was.cells[c] for c in was.session_cells[sid])
        assert old.state.sessions["s005"] == was.sessions["s005"]  # read after the eager copy closed


def test_facts_read_their_fields_and_occurrences_on_demand_and_an_old_version_keeps_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the exact bound (lowered here) a reopened memory takes the fact table's rows from the
    cache and reads of its facts only their ids, normalised texts and event starts at the open;
    after writes that change and drop facts, the version opened first still reads the fields and
    occurrences it was opened with."""
    monkeypatch.setattr("memforest.resident.vector_table.EXACT_ROWS", 12)
    monkeypatch.setattr("memforest.index.forest_index.ROOTS_EXACT_ROWS", 4)
    root, copy = _built_and_copied(tmp_path)
    with _forest(root) as forest:
        old = forest.snapshot("u")
        facts = old.state.facts
        unread = {f for f, fact in facts.items() if not fact.is_read}
        assert facts and unread == set(facts)
        more = make_sessions(9, 4, start_day=20)[6:]
        forest.correct_session("u", {**more[0], "session_id": "s002"})
        forest.delete_session("u", "s003")
        forest.ingest_sessions("u", [more[1]])
        new = forest.snapshot("u").state
        changed = {f for f in unread if new.facts.get(f) is not facts[f]}
        assert changed & unread and any(f not in new.facts for f in changed)  # changed and dropped
        with _forest(copy, lazy=False) as eager:
            assert fingerprint(old) == fingerprint(eager.snapshot("u"))
            assert dict(old.state.facts) == dict(eager.snapshot("u").state.facts)  # every field
        assert forest.check("u")["ok"]
    shutil.rmtree(copy)
    shutil.copytree(root, copy)
    with _forest(root) as forest, _forest(copy, lazy=False) as eager:
        facts = forest.snapshot("u").state.facts
        assert not any(f.is_read for f in facts.values())
        first = next(iter(facts.values()))
        assert "not read" in repr(first) and first.occurrences and not first.is_read  # its fields not yet
        assert first.text and first.is_read and first == eager.snapshot("u").state.facts[first.id]
        assert (forest.query("u", "Where do I live now?", answer=False).evidence
                == eager.query("u", "Where do I live now?", answer=False).evidence)
        assert fingerprint(forest.snapshot("u")) == fingerprint(eager.snapshot("u"))


def test_entity_and_scene_trees_are_read_ahead_after_the_open(tmp_path: Path) -> None:
    root, copy = _built_and_copied(tmp_path)
    with _forest(root, warm=True) as forest, _forest(copy, lazy=False) as eager:
        snap = forest.snapshot("u")
        assert forest.wait_settled(30)
        read = {i.family for i in snap.state.trees.values() if i.is_read}
        assert "entity" in read and "session" not in read
        assert all(i.is_read for i in snap.state.trees.values() if i.family != "session")
        forest.ingest_sessions("u", make_sessions(8, 4, start_day=20)[6:])
        eager.ingest_sessions("u", make_sessions(8, 4, start_day=20)[6:])
        assert fingerprint(forest.snapshot("u")) == fingerprint(eager.snapshot("u"))


def test_the_read_ahead_reads_the_largest_trees_up_to_its_share_of_the_leaves(tmp_path: Path) -> None:
    root = _built(tmp_path, n=16)
    for share in (0.0, 0.3, 0.6):
        with _forest(root, warm=True, share=share) as forest:
            snap = forest.snapshot("u")
            assert forest.wait_settled(30)
            read = {t for t, i in snap.state.trees.items() if i.is_read}
            assert not {t for t in read if snap.state.trees[t].family == "session"}
            sizes = {t: len(i.tree) for t, i in snap.state.trees.items() if i.family != "session"}  # all read
            held = sum(sizes[t] for t in read)
            assert held <= share * sum(sizes.values())
            if read:  # the largest first: none left unread is larger than one read
                assert max(sizes[t] for t in sizes.keys() - read) <= min(sizes[t] for t in read)
            assert (share == 0.0) == (not read)
            if share == 0.6:  # and no further: the next largest would pass the share
                nxt = max(sizes[t] for t in sizes.keys() - read)
                assert held + nxt > share * sum(sizes.values())


def test_a_tree_read_ahead_shares_its_repeated_fields_and_a_write_reads_it_in_one_statement(
        tmp_path: Path) -> None:
    root = _built(tmp_path, n=16)  # places named in 4 sessions each: entity trees of their own
    with _forest(root, warm=True) as forest:
        snap = forest.snapshot("u")
        assert forest.wait_settled(30)
        source = snap.state.tree_source
        ids = {k: k for k in snap.state.fact_vecs}
        warmed = [i for i in snap.state.trees.values() if i.family == "entity" and i.is_read]
        assert warmed
        for info in warmed:
            tree = info.tree
            for node in tree.nodes.values():
                if node.level == 0:  # one key for both ends, the fact's own id string, no lists
                    assert node.key_lo is node.key_hi and node.children is NO_CHILDREN
                    assert node.item is not None and node.item is ids[node.item]
                    assert node.key_lo[1] is node.item
                else:
                    kids = [tree.nodes[c] for c in node.children]
                    assert node.key_lo is kids[0].key_lo and node.key_hi is kids[-1].key_hi
                    assert all(k.parent is node.id for k in kids)
                    assert all(c is k.id for c, k in zip(node.children, kids))
        statements: dict[str, int] = {}
        fetch = source._fetch

        def counted(kind: str, key: str, sql: str, args: tuple) -> list[tuple]:
            statements[key] = statements.get(key, 0) + 1
            return fetch(kind, key, sql, args)
        source._fetch = counted
        forest.ingest_sessions("u", make_sessions(18, 4, start_day=20)[16:])
        read_ahead = {i.tree_id for i in warmed}
        assert {t: n for t, n in statements.items() if t in read_ahead and n > 1} == {}
        labels = {i.label for i in warmed}  # their members were read ahead with them
        assert labels and not labels & set(statements)


def test_an_old_version_reads_its_own_trees_after_this_process_writes(tmp_path: Path) -> None:
    root, copy = _built_and_copied(tmp_path)
    with _forest(root) as forest:
        old = forest.snapshot("u")
        more = make_sessions(9, 4, start_day=20)[6:]
        forest.ingest_sessions("u", [more[0]])
        forest.delete_session("u", "s001")
        forest.correct_session("u", {**more[1], "session_id": "s002"})
        source = forest.snapshot("u").state.tree_source
        assert source is old.state.tree_source and source.version == old.version + 3  # moved on, not pinned
        with _forest(copy, lazy=False) as eager:
            assert fingerprint(old) == fingerprint(eager.snapshot("u"))
        assert forest.check("u")["ok"]


def test_a_long_lived_memory_lets_the_write_ahead_log_restart(tmp_path: Path, monkeypatch) -> None:
    """The source's snapshot is begun on the database file alone every few commits, so the log is
    restarted instead of growing with every commit; the oldest version still reads its own trees.
    The checkpoint runs inside the commit that is due (no background thread to wait for)."""
    monkeypatch.setattr("memforest.store.read_snapshot.RELEASE_LOG_EVERY", 3)
    monkeypatch.setattr("memforest.store.read_snapshot.RELEASE_LOG_IN_BACKGROUND", False)
    root, copy = _built_and_copied(tmp_path)
    wal = root / "users" / "u" / "memory.sqlite-wal"
    with _forest(root) as forest:
        old = forest.snapshot("u")
        more = make_sessions(30, 2, start_day=20)[6:]
        forest.ingest_sessions("u", more[:3])
        forest.delete_session("u", more[0]["session_id"])
        forest.ingest_sessions("u", [more[0]])
        after_three = wal.stat().st_size
        for session in more[3:]:
            forest.ingest_sessions("u", [session])
        assert wal.stat().st_size < 3 * after_three  # 21 more commits: the log was restarted
        assert forest.snapshot("u").state.tree_source is old.state.tree_source
        with _forest(copy, lazy=False) as eager:
            assert fingerprint(old) == fingerprint(eager.snapshot("u"))
        assert forest.check("u")["ok"]


def test_a_closed_memory_holds_no_snapshot_of_the_store(tmp_path: Path) -> None:
    """Closing a memory ends its source's read transaction even while the memory object and a version
    it served are still referenced: the log can be checkpointed to nothing, and what was unread can
    no longer be read (a one-line StoreError)."""
    root = _built(tmp_path)
    forest = _forest(root)
    old = forest.snapshot("u")
    forest.ingest_sessions("u", make_sessions(8, 4, start_day=20)[6:7])
    forest.close()
    con = sqlite3.connect(root / "users" / "u" / "memory.sqlite")
    try:
        busy, _, _ = con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    finally:
        con.close()
    wal = root / "users" / "u" / "memory.sqlite-wal"
    assert busy == 0 and (not wal.exists() or wal.stat().st_size == 0)
    unread = [info for info in old.state.trees.values() if not info.is_read]
    assert unread
    with pytest.raises(StoreError, match="can no longer be read"):
        _ = unread[0].tree
    assert forest.snapshot("u").version == old.version + 1  # a closed memory opens the store again


def test_an_old_version_keeps_its_snapshot_when_another_process_writes(tmp_path: Path) -> None:
    root, copy = _built_and_copied(tmp_path)
    with _forest(root) as reader:
        old = reader.snapshot("u")
        with _forest(root) as writer:  # another process's commits, as far as `reader` knows
            writer.ingest_sessions("u", make_sessions(8, 4, start_day=20)[6:])
            writer.delete_session("u", "s003")
        assert old.state.tree_source.version == old.version
        with _forest(copy, lazy=False) as eager:
            assert fingerprint(old) == fingerprint(eager.snapshot("u"))
        assert reader.snapshot("u").version == old.version + 2


def test_readers_on_threads_read_each_tree_once(tmp_path: Path) -> None:
    root = _built(tmp_path)
    with _forest(root) as forest:
        snap = forest.snapshot("u")
        infos = list(snap.state.trees.values())
        trees: dict[int, list] = {}

        def read(k: int) -> None:
            trees[k] = [i.tree for i in infos]

        threads = [threading.Thread(target=read, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all(a is b for got in trees.values() for a, b in zip(got, trees[0]))


@pytest.mark.parametrize("damage", [
    "DELETE FROM nodes WHERE tree_id = ? AND level = 0",
    "UPDATE nodes SET children = '[1, \"x\"]' WHERE tree_id = ? AND level > 0",
    "UPDATE nodes SET children = '[999999]' WHERE tree_id = ? AND level > 0",
    "UPDATE nodes SET children = '{}' WHERE tree_id = ? AND level > 0",
], ids=["missing-leaves", "child-not-an-id", "missing-child", "children-not-a-list"])
def test_a_tree_with_damaged_rows_is_a_one_line_store_error_when_reached(tmp_path: Path, damage: str) -> None:
    root = _built(tmp_path)
    db = root / "users" / "u" / "memory.sqlite"
    con = sqlite3.connect(db)
    (tid,) = con.execute("SELECT tree_id FROM nodes WHERE level > 0 AND tree_id LIKE 'entity:%' LIMIT 1"
                         ).fetchone()
    assert con.execute(damage, (tid,)).rowcount > 0
    con.commit()
    con.close()
    with _forest(root) as forest:
        snap = forest.snapshot("u")
        with pytest.raises(StoreError, match="is damaged") as e:
            _ = snap.state.trees[tid].tree
        assert tid in str(e.value) and "\n" not in str(e.value)
        assert not forest.check("u")["ok"]


class _Source:
    """A `NodeSource` over fixed per-tree node data (what a store's trees would read), read five
    nodes at a time as a store's are a node's siblings at a time."""

    def __init__(self, trees: dict[str, dict[int, NodeData]]) -> None:
        self.lock = threading.RLock()
        self.data: dict = {}
        self.partial: set[str] = set()
        self.total_nodes = sum(len(t) for t in trees.values())
        self.bulk = None
        self.waiting = Waiting()
        self._trees = trees
        self.reads: list[str] = []

    def read(self, kind: str, key: tuple[str, int]) -> NodeData | None:
        assert kind == "node"
        tid, nid = key
        if tid not in self._trees:
            return None
        if tid not in self.reads:
            self.reads.append(tid)
            self.partial.add(tid)
        if tid in self.partial:
            group = range(nid - nid % 5, nid - nid % 5 + 5)
            self.data.update({(tid, n): self._trees[tid][n] for n in group
                              if n in self._trees[tid] and (tid, n) not in self.data})
        return self.data.get(key)

    def read_ahead(self, keys) -> None:
        for tid, nid in keys:
            if tid in self.reads and tid in self.partial and nid in self._trees[tid]:
                self.data.setdefault((tid, nid), self._trees[tid][nid])

    def read_data(self, tree_id: str) -> None:
        if tree_id not in self.reads:
            self.reads.append(tree_id)
        self.data.update({(tree_id, n): d for n, d in self._trees[tree_id].items()
                          if (tree_id, n) not in self.data})
        self.partial.discard(tree_id)

    def ensure_all(self) -> None:
        for tid in self._trees:
            self.read_data(tid)


def _data(i: int) -> NodeData:
    return NodeData(f"n{i}", "leaf", np.full(2, i, np.float32))


def test_lazy_node_maps_agree_with_plain_dicts_across_forks_and_folds() -> None:
    rng = random.Random(7)
    trees = {f"t{t}": {n: _data(100 * t + n) for n in range(rng.randrange(1, 40))} for t in range(200)}
    source = _Source(trees)
    model = {(t, n): d for t, nodes in trees.items() for n, d in nodes.items()}
    versions = [(LazyNodeMap(source), dict(model))]
    for step in range(40):
        lazy, plain = versions[-1]
        lazy, plain = lazy.fork(), dict(plain)
        for _ in range(rng.choice([5, 50, FOLD_AT // 4])):  # some steps pass the fold bound
            t = rng.randrange(110)  # trees t0..t99 and new ones t200..t209: t100..t199 are never reached
            key = (f"t{t if t < 100 else t + 100}", rng.randrange(45))
            if key in plain and rng.random() < 0.4:
                del lazy[key], plain[key]
            elif rng.random() < 0.1:  # (reading ahead changes nothing a version reads)
                lazy.read_ahead([key, (key[0], key[1] + 1)])
            else:
                lazy[key] = plain[key] = _data(step)
        assert len(lazy) == len(plain)
        versions.append((lazy, plain))
    assert len(source.reads) == 100  # nothing iterated yet: only the trees reached were read
    assert source.partial  # (and of some, not every node)
    for lazy, plain in versions:  # every version still reads as it was made
        probe = [(f"t{t}", n) for t in range(0, 100, 7) for n in range(0, 45, 5)]
        assert [lazy.get(k) for k in probe] == [plain.get(k) for k in probe]
        assert dict(lazy.items()) == plain and len(lazy) == len(plain)


# ---------------------------------------------------------------- the tree rows cache


def _refuse_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(con: object, dim: int) -> None:
        raise AssertionError("the tree rows were read from the store although the cache serves this version")
    monkeypatch.setattr("memforest.store.load.read_bulk", refuse)


def _rows_file(root: Path) -> Path:
    return root / "users" / "u" / "cache" / tree_rows_cache.FILE_NAME


def test_a_reopened_memory_takes_the_rows_of_unread_trees_from_the_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _built(tmp_path)
    with _forest(root) as forest:  # written at the close of a version whose trees were read on demand
        forest.ingest_sessions("u", make_sessions(8, 4, start_day=20)[6:])
    assert _rows_file(root).exists()
    with _forest(root, lazy=False) as eager:
        expected = fingerprint(eager.snapshot("u"))
        answer = eager.query("u", "Where do I live now?", answer=False).evidence
    _refuse_scan(monkeypatch)
    with _forest(root) as forest:
        assert forest.query("u", "Where do I live now?", answer=False).evidence == answer
        state = forest.snapshot("u").state
        assert fingerprint(forest.snapshot("u")) == expected
        assert len(state.nodes) == sum(len(t.tree.nodes) for t in state.trees.values())  # (the cache's count)
        assert forest.check("u")["cache"] == []


@pytest.mark.parametrize("damage", sorted(CACHE_DAMAGE))
def test_a_damaged_or_stale_tree_rows_cache_is_read_around_and_rebuilt_by_check(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str) -> None:
    root = _built(tmp_path)
    with _forest(root) as forest:
        forest.query("u", "Where do I live now?", answer=False)
    with _forest(root, lazy=False) as eager:
        expected = fingerprint(eager.snapshot("u"))
    CACHE_DAMAGE[damage](_rows_file(root))
    with _forest(root) as forest:
        assert fingerprint(forest.snapshot("u")) == expected  # read from the store instead
        report = forest.check("u")
        assert report["ok"] and report["caches_rebuilt"]
        assert any(c.startswith("tree rows cache") for c in report["cache"]), report
        assert forest.check("u")["cache"] == []
    _refuse_scan(monkeypatch)
    with _forest(root) as forest:
        assert fingerprint(forest.snapshot("u")) == expected


@pytest.mark.parametrize("wrong", ["root vector", "node count"])
def test_check_finds_a_tree_rows_cache_whose_rows_are_not_the_stores(tmp_path: Path, wrong: str) -> None:
    root = _built(tmp_path)
    with _forest(root) as forest:
        snap = forest.snapshot("u")
        stamp = forest._resident.caches_of("u", forest._open_db("u", False)).db.stamp(snap.version)
    rows = tree_rows_cache.read_tree_rows(_rows_file(root), stamp, snap.state.dim)
    assert not isinstance(rows, CacheMiss) and rows.node_count
    tid = sorted(rows.roots)[0]
    if wrong == "root vector":
        rows.roots[tid] = -rows.roots[tid]  # a whole, checksummed file holding another vector
    else:
        rows.node_count += 1
    rows.leaf_items = dict(rows.leaf_items)
    tree_rows_cache.write_tree_rows(_rows_file(root), stamp, rows, snap.state.dim)
    with _forest(root) as forest:
        if wrong == "node count":
            assert len(forest.snapshot("u").state.nodes) == rows.node_count  # (taken from the cache)
        report = forest.check("u")
        expected = "root vectors are not the store's" if wrong == "root vector" else "nodes, the store holds"
        assert any(expected in c for c in report["cache"]), report
        assert forest.check("u")["cache"] == []


def test_a_facts_leaf_shares_the_facts_vector_read_eagerly_or_on_demand(tmp_path: Path) -> None:
    root = _built(tmp_path)
    for lazy in (False, True):
        with _forest(root, lazy=lazy) as forest:
            state = forest.snapshot("u").state
            leaves = [(key, data) for key, data in state.nodes.items() if data.mode == "leaf"]
            items = {key: state.trees[key[0]].tree.nodes[key[1]].item or "" for key, _ in leaves}
            shared = [np.shares_memory(data.embedding, state.fact_vecs[items[key]]) for key, data in leaves
                      if items[key] in state.fact_vecs]
            assert shared and all(shared), lazy  # the fact table's row, not a copy per leaf


def test_the_facts_of_leaves_read_on_demand_are_asked_for_before_their_vectors_are_compared(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _built(tmp_path)
    asked: list[list[str]] = []
    monkeypatch.setattr(FactVectors, "will_need", lambda self, ids: asked.append(list(ids)))
    with _forest(root) as forest:
        state = forest.snapshot("u").state
        tid = next(t for t, info in state.trees.items() if info.family != "session")
        tree = state.trees[tid].tree
        leaves = [nid for nid, node in tree.nodes.items() if node.level == 0]
        assert asked == []
        for nid in leaves:
            _ = state.nodes[(tid, nid)]
        items = {tree.nodes[nid].item for nid in leaves}
        assert items and items <= {fid for ids in asked for fid in ids}
