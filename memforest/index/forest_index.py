"""The forest's indexes: cells (the leaves of session trees), roots (tree roots) and facts. A fact's
leaf in an entity or scene tree carries the fact's own vector, so cells and facts are every leaf.
The fact index is the state's fact table (`UserState.fact_table`, keyed by fact id): the facts'
vectors are held once, and the index writes the row meta of its rows.

They are derived from the store: built from the state when a user's memory is loaded from SQLite,
then carried from version to version: `fork()` shares every row and `apply` changes exactly the
rows an operation changed, so a new version costs O(rows changed) and a published one never changes.

Cell and fact rows carry what the hybrid ranking needs of an item besides its vector, so a dense
candidate is ranked without reading its objects: row meta (time, the tree rowid of the session it
was first said in, -1 for none), and for a cell its id beside its leaf (`cell_key`; `cell_uid` maps
a cell id back to its row's key, so a cell found by its text is ranked from its row as well)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from memforest.resident.cow import _MISSING, CowMap
from memforest.resident.lazy_map import LazyMap
from memforest.resident.ondemand import BulkRows, CellRows, TreeInfo
from memforest.resident.packed_keys import IntKeys, PackedKeys
from memforest.resident.vector_table import SavedPartitions, VectorTable
from memforest.routing.router import session_tree_id
from memforest.state import ChangeSet, UserState
from memforest.types import Fact


def node_uid(tree_rowid: int, node_id: int) -> int:
    return (tree_rowid << 32) | node_id


# Tree roots are searched for a handful of trees (`QueryConfig.top_trees`) and one tree's root row is
# retired by every write that touches the tree: past this many, the roots table is partitioned.
ROOTS_EXACT_ROWS = 4096


class ForestIndex:
    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.cells = VectorTable(dim)
        self.roots = VectorTable(dim, exact_rows=ROOTS_EXACT_ROWS, int_keys=True)
        self.facts = VectorTable(dim)  # fact id -> vector: the state's fact table once built
        # uid -> (session tree id, leaf id, cell id)
        self.cell_key: CowMap[int, tuple[str, int, str]] = CowMap()
        self.cell_uid: CowMap[str, int] = CowMap()  # cell id -> uid
        self.root_tree: CowMap[int, str] = CowMap()
        self.version = -1

    TABLES = ("cells", "roots", "facts")

    @classmethod
    def build(cls, state: UserState, dim: int, saved: Mapping[str, SavedPartitions] | None = None,
              facts_meta: bool = True) -> ForestIndex:
        """The indexes of `state`; a table past its exact bound takes its `saved` partitions (from a
        cache of this version, `memforest.versions.caches`) when they hold exactly its keys. The fact index is
        `state`'s fact table, its row meta written here (`facts_meta=False`: the rows carry it, as
        the loader writes them)."""
        idx = cls(dim)
        idx._add_all(state, saved or {}, facts_meta)
        idx.version = state.version
        return idx

    def saved_partitions(self, rows: bool = False) -> dict[str, SavedPartitions]:
        """The partitions of the tables that have them, by key (for a cache); with `rows`, their
        vectors too (`VectorTable.saved_partitions`)."""
        out = {}
        for name in self.TABLES:
            parts = getattr(self, name).saved_partitions(rows)
            if parts is not None:
                out[name] = parts
        return out

    def _add_all(self, state: UserState, saved: Mapping[str, SavedPartitions], facts_meta: bool) -> None:
        bulk = state.tree_source.bulk if state.tree_source is not None else None
        cached = bulk.cells if bulk is not None else None
        arrays = _cells_of_rows(state, cached) if cached is not None else None
        if arrays is not None:  # (every session tree unread: their leaves in arrays, as the cache holds them)
            self._add_cells_of_rows(state, arrays, saved)
        else:
            self._add_cells(state, bulk, saved)
        root_tree = {info.rowid: info.tree_id for info in state.trees.values() if info.has_root}

        def root_vecs() -> np.ndarray:
            return _stack([_root_vec(state, t, bulk) for t in root_tree.values()], self.dim)
        self.roots.fill(list(root_tree), root_vecs, None, saved.get("roots"))
        if state.fact_table is None:
            state.fact_table = VectorTable(self.dim)
        self.facts = state.fact_table
        if facts_meta:
            facts = list(state.facts)
            self.facts.set_meta(facts, fact_meta(state, facts))
        self.root_tree = CowMap.over(root_tree)  # (built here alone)

    def _add_cells(self, state: UserState, bulk: BulkRows | None,
                   saved: Mapping[str, SavedPartitions]) -> None:
        """The cell index from each session tree's leaves (read, or as the open read them)."""
        cell_key: dict[int, tuple[str, int, str]] = {}
        stacked: list[np.ndarray] = []
        for t, i in state.trees.items():
            if i.family != "session":
                continue
            if bulk is not None and not i.is_read:  # not read yet: its leaves as the open read them
                leaves = bulk.cell_leaves.get(t, [])
            else:
                leaves = [(nid, item, state.nodes[(t, nid)].embedding) for nid, item in _cell_leaves(i)]
            for nid, item, vec in leaves:
                cell_key[node_uid(i.rowid, nid)] = (t, nid, item)
                stacked.append(vec)
        # vectors and meta are gathered only when a table cannot take its saved rows
        self.cells.fill(list(cell_key), lambda: _stack(stacked, self.dim),
                        lambda: cell_meta(state, [c for _, _, c in cell_key.values()]), saved.get("cells"))
        self.cell_key = CowMap.over(cell_key)  # (built here alone)
        self.cell_uid = CowMap.over({c: u for u, (_, _, c) in cell_key.items()})

    def _add_cells_of_rows(self, state: UserState, arrays: CellArrays,
                           saved: Mapping[str, SavedPartitions]) -> None:
        """The cell index from a cache's arrays (no record per cell): the table's keys an array, and
        a cell's key or uid found when first asked for."""
        rows = arrays.rows
        self.cells.fill(IntKeys(arrays.uids), lambda: rows.vecs[arrays.take],
                        lambda: cell_meta(state, [rows.items[r] for r in arrays.take.tolist()]),
                        saved.get("cells"))
        self.cell_key = LazyMap(_CellKeys(arrays))
        self.cell_uid = LazyMap(_CellUids(arrays))

    def fork(self) -> ForestIndex:
        """The next version, whose fact index is the next state's fact table (`apply` takes it);
        this one stays unchanged."""
        out = ForestIndex.__new__(ForestIndex)
        out.dim, out.version = self.dim, self.version
        out.cells, out.roots, out.facts = self.cells.fork(), self.roots.fork(), self.facts
        out.cell_key, out.root_tree = self.cell_key.fork(), self.root_tree.fork()
        out.cell_uid = self.cell_uid.fork()
        return out

    def apply(self, state: UserState, ch: ChangeSet, removed_nodes: dict[str, list[int]],
              removed_tree_rowids: dict[str, int]) -> None:
        """Update exactly the rows `ch` changed: cell leaves, the roots of changed trees, fact rows."""
        gone = [node_uid(removed_tree_rowids.get(t, state.trees[t].rowid if t in state.trees else -1), n)
                for t, ns in removed_nodes.items() for n in ns]
        self.cells.remove(gone)
        for uid in gone:
            key = self.cell_key.pop(uid, None)
            if key is not None and self.cell_uid.get(key[2]) == uid:
                del self.cell_uid[key[2]]
        live = [(state.trees[t].rowid, t, n, c) for t, n in sorted(ch.nodes)
                if (c := _cell_of(state, t, n)) is not None]
        uids = [node_uid(r, n) for r, _, n, _ in live]
        self.cells.upsert(uids, _stack([state.nodes[(t, n)].embedding for _, t, n, _ in live], self.dim),
                          cell_meta(state, [c for _, _, _, c in live]))
        self.cell_key.update({u: (t, n, c) for u, (_, t, n, c) in zip(uids, live)})
        self.cell_uid.update({c: u for u, (_, _, _, c) in zip(uids, live)})
        dead_roots = list(removed_tree_rowids.values())
        self.roots.remove(dead_roots)
        for r in dead_roots:
            self.root_tree.pop(r, None)
        touched = {t for t, _ in ch.nodes} | ch.trees
        rows = [(state.trees[t].rowid, t) for t in sorted(touched)
                if t in state.trees and state.trees[t].has_root]
        self.roots.upsert([r for r, _ in rows], _stack([_root_vec(state, t) for _, t in rows], self.dim))
        self.root_tree.update({r: t for r, t in rows})
        if state.fact_table is not None:  # its rows are the state's facts: their meta is written here
            self.facts = state.fact_table
            new = sorted(f for f in ch.facts | ch.deleted_facts if f in state.facts)
            self.facts.set_meta(new, fact_meta(state, new))
        self.version = state.version

    def rows_match(self, state: UserState) -> bool:
        """Whether the index holds exactly the state's cell, root and fact rows."""
        cells = {node_uid(i.rowid, n) for i in state.trees.values() for n, _ in _cell_leaves(i)}
        return (cells == set(self.cell_key) == set(self.cells.keys())
                and dict(self.cell_uid) == {c: u for u, (_, _, c) in self.cell_key.items()}
                and {i.rowid for i in state.trees.values() if i.has_root}
                == set(self.roots.keys())
                and set(state.facts) == set(self.facts.keys()))


def cell_meta(state: UserState, cells: list[str]) -> np.ndarray:
    """Row meta of cells: (time, rowid of their session's tree)."""
    rowid = _session_rowids(state)
    rows = [(cell.time, rowid(cell.session_id)) for cell in map(state.cells.__getitem__, cells)]
    return np.array(rows, dtype=float).reshape(len(cells), 2)


def fact_meta(state: UserState, facts: list[str]) -> np.ndarray:
    """Row meta of facts: (time, rowid of the tree of the session first saying them; -1 for none). A
    fact said again without reading its occurrences whose earliest is still its root's
    (`Fact.keeps_root_first`) keeps the meta its row holds (the version's it was copied from)."""
    rowid, table = _session_rowids(state), state.fact_table
    rows = [table.meta(f.id) if table is not None and f.keeps_root_first else _meta_row(f, rowid)
            for f in map(state.facts.__getitem__, facts)]
    return np.array(rows, dtype=float).reshape(len(facts), 2)


def facts_meta(facts: Iterable[Fact], rowid: Callable[[str], int], n: int) -> np.ndarray:
    """`fact_meta` of `n` fact objects, `rowid` giving a session's tree rowid (-1 for none)."""
    return np.array([_meta_row(fact, rowid) for fact in facts], dtype=float).reshape(n, 2)


def _meta_row(fact: Fact, rowid: Callable[[str], int]) -> tuple[float, int]:
    return fact.time, rowid(first.session_id) if (first := fact.first) is not None else -1


def _session_rowids(state: UserState) -> Callable[[str], int]:
    """session id -> the rowid of its tree (-1 for none)."""
    trees = state.trees

    def rowid(session_id: str) -> int:
        info = trees.get(session_tree_id(session_id))
        return info.rowid if info is not None else -1
    return rowid


@dataclass(frozen=True)
class CellArrays:
    """The cells of a version in a cache's arrays (`CellRows`), in the order of the state's trees:
    the uid of each (`uids`), its row in `rows` (`take`), and the number of its tree in `trees`."""

    rows: CellRows
    uids: np.ndarray
    take: np.ndarray
    tree_of: np.ndarray
    trees: list[str]


def _cells_of_rows(state: UserState, rows: CellRows) -> CellArrays | None:
    """The cells of `state` in the arrays of a cache, in the order of the state's trees (their vectors
    are not read here: a table filled from a cache's partitions does not need them); None when a
    session tree has been read (its leaves are then its own)."""
    at = {t: i for i, t in enumerate(rows.trees)}
    order, rowids = [], []
    for t, info in state.trees.items():
        if info.family != "session":
            continue
        if info.is_read:
            return None
        i = at.get(t)
        if i is not None:
            order.append(i)
            rowids.append(info.rowid)
    bounds = rows.bounds
    counts = (bounds[1:] - bounds[:-1])[order] if order else np.zeros(0, np.int64)
    starts = bounds[:-1][order] if order else np.zeros(0, np.int64)
    # the cache's row of each cell, tree by tree in the state's order
    first = np.concatenate([[0], np.cumsum(counts)[:-1]])  # each tree's first place in that order
    take = (np.repeat(starts - first, counts) + np.arange(int(counts.sum()))).astype(np.int64)
    uids = (np.repeat(np.asarray(rowids, np.int64), counts) << 32) | rows.nids[take]
    tree_of = np.repeat(np.asarray(order, np.int64), counts)
    return CellArrays(rows, uids, take, tree_of, rows.trees)


class _CellKeys:
    """uid -> (session tree id, leaf id, cell id) of the cells of `CellArrays`, each made when first
    asked for (the `Loaded` of `ForestIndex.cell_key`)."""

    def __init__(self, arrays: CellArrays) -> None:
        self.made: dict[int, tuple[str, int, str]] = {}
        self._arrays = arrays
        self._uids = IntKeys(arrays.uids)

    def make(self, uid: Any) -> Any:
        at = self._uids.position(uid)
        if at < 0:
            return _MISSING
        a = self._arrays
        row = int(a.take[at])
        key = self.made[int(uid)] = (a.trees[int(a.tree_of[at])], int(a.rows.nids[row]), a.rows.items[row])
        return key

    def holds(self, uid: Any) -> bool:
        return uid in self.made or uid in self._uids

    def keys_in_order(self) -> Iterator[int]:
        return iter(self._arrays.uids.tolist())

    def __len__(self) -> int:
        return len(self._arrays.uids)


class _CellUids:
    """cell id -> uid of the cells of `CellArrays`, each found when first asked for (the `Loaded` of
    `ForestIndex.cell_uid`): the cell's row in the cache (its packed items), then that row's uid."""

    def __init__(self, arrays: CellArrays) -> None:
        self.made: dict[str, int] = {}
        self._arrays = arrays
        items = arrays.rows.items
        self._items = items if isinstance(items, PackedKeys) else PackedKeys.pack(list(items))
        self._uid_of_row = np.full(len(items), -1, np.int64)
        self._uid_of_row[arrays.take] = arrays.uids

    def _uid(self, cell: Any) -> int:
        row = self._items.position(cell)
        return int(self._uid_of_row[row]) if row >= 0 else -1

    def make(self, cell: Any) -> Any:
        uid = self._uid(cell)
        if uid < 0:
            return _MISSING
        self.made[cell] = uid
        return uid

    def holds(self, cell: Any) -> bool:
        return cell in self.made or self._uid(cell) >= 0

    def keys_in_order(self) -> Iterator[str]:
        items = self._arrays.rows.items
        return map(items.__getitem__, self._arrays.take.tolist())

    def __len__(self) -> int:
        return len(self._arrays.uids)


def _cell_leaves(info: TreeInfo) -> list[tuple[int, str]]:
    """(leaf id, cell id) of a session tree's leaves (its cells); none for other families."""
    if info.family != "session":
        return []
    return [(nid, node.item) for nid, node in info.tree.nodes.items() if node.item is not None]


def _cell_of(state: UserState, tree_id: str, nid: int) -> str | None:
    """The cell a session tree's leaf shows (None for any other node)."""
    info = state.trees.get(tree_id)
    if info is None or info.family != "session" or (tree_id, nid) not in state.nodes:
        return None
    node = info.tree.nodes.get(nid)
    return node.item if node is not None else None


def _root_vec(state: UserState, tree_id: str, bulk: BulkRows | None = None) -> np.ndarray:
    info = state.trees[tree_id]
    if bulk is not None and not info.is_read:  # as the open read it
        return bulk.roots[tree_id]
    root = info.tree.root
    assert root is not None
    return state.nodes[(tree_id, root)].embedding


def _stack(vecs: list[np.ndarray], dim: int) -> np.ndarray:
    return np.stack(vecs).astype(np.float32) if vecs else np.zeros((0, dim), np.float32)
