"""What an open needs of the trees it does not read (`memforest.resident.ondemand.BulkRows`), cached
beside the database for one committed version.

A memory opened with its trees read on demand (`MemForestConfig.lazy_trees`) still needs, for its
indexes, the leaves of every tree and the vectors of the session trees' leaves and of every root:
one pass over the nodes table, the largest in the store. The cache holds exactly those rows: per
tree, the items of an entity or scene tree's leaves; a session tree's leaf ids, cells and vectors;
every root vector. It is written from a version's indexes and placements (`bulk_of_snapshot`, no
tree read), used only for the store version (`stamp`) it was written for, after its checksums match
and its trees agree with the store's tree rows (`memforest.store.load`); anything else is a
`CacheMiss` and the rows are read from the store. `bulk_of_state` gives the same rows from a state
whose trees are all read, which `memforest check` compares the cache with."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from memforest.index.forest_index import ForestIndex
from memforest.resident.cache_file import (
    CacheMiss,
    MappedFiles,
    pack_strings,
    read_arrays,
    unpack_strings,
    write_arrays,
)
from memforest.resident.cow import _MISSING
from memforest.resident.lazy_map import KeyedLoaded
from memforest.resident.ondemand import BulkRows, CellRows
from memforest.resident.packed_keys import PackedKeys
from memforest.resident.prefetch import will_need
from memforest.state import UserState

KIND = "tree_rows"
# 2: leaves name their items by index into the distinct items; placements read from them;
# 3: the distinct items packed (`PackedKeys`), and each item's trees in item order; 4: the cells packed
FORMAT = 4
FILE_NAME = "trees.cache"


def bulk_of_snapshot(state: UserState, index: ForestIndex) -> BulkRows:
    """The rows of `state` (the version `index` was built or carried to), from its indexes and its
    placements: nothing is read from the store and no tree is read."""
    out = BulkRows()
    leaf_items: dict[str, list[str]] = {}
    non_session = {t for t, i in state.trees.items() if i.family != "session"}
    for item, trees in state.placements.items():
        for tid in trees:
            if tid in non_session:
                leaf_items.setdefault(tid, []).append(item)
    out.leaf_items = leaf_items
    out.node_count = len(state.nodes)
    cell_leaves: dict[str, list[tuple[int, str, np.ndarray]]] = {}
    for uid, (tid, nid, cell) in index.cell_key.items():
        cell_leaves.setdefault(tid, []).append((nid, cell, index.cells.vector(uid)))
    out.cell_leaves = cell_leaves
    for rowid, tid in index.root_tree.items():
        out.roots[tid] = index.roots.vector(rowid)
    return out


def bulk_of_state(state: UserState) -> BulkRows:
    """The rows of `state`, read from its trees (every one is read)."""
    out = BulkRows()
    leaf_items: dict[str, list[str]] = {}
    cell_leaves: dict[str, list[tuple[int, str, np.ndarray]]] = {}
    for tid, info in state.trees.items():
        tree = info.tree
        if tree.root is not None:
            out.roots[tid] = state.nodes[(tid, tree.root)].embedding
        leaves = [(nid, node.item) for nid, node in tree.nodes.items()
                  if node.level == 0 and node.item is not None]
        if info.family == "session":
            cell_leaves[tid] = [(nid, item, state.nodes[(tid, nid)].embedding) for nid, item in leaves]
        elif leaves:
            leaf_items[tid] = [item for _, item in leaves]
    out.leaf_items = leaf_items
    out.node_count = sum(len(info.tree.nodes) for info in state.trees.values())
    out.cell_leaves = {t: rows for t, rows in cell_leaves.items() if rows}
    return out


def bulk_difference(a: BulkRows, b: BulkRows) -> str | None:
    """How two sets of rows differ (None: they hold the same rows, in any order)."""
    if {t: sorted(v) for t, v in a.leaf_items.items()} != {t: sorted(v) for t, v in b.leaf_items.items()}:
        return "the leaves of its entity and scene trees are not the store's"
    cells_a = {(t, n, c): v.tobytes() for t, rows in a.cell_leaves.items() for n, c, v in rows}
    cells_b = {(t, n, c): v.tobytes() for t, rows in b.cell_leaves.items() for n, c, v in rows}
    if cells_a != cells_b:
        return "the leaves of its session trees are not the store's"
    if {t: v.tobytes() for t, v in a.roots.items()} != {t: v.tobytes() for t, v in b.roots.items()}:
        return "its root vectors are not the store's"
    if None not in (a.node_count, b.node_count) and a.node_count != b.node_count:
        return f"it counts {a.node_count} nodes, the store holds {b.node_count}"
    return None


def write_tree_rows(path: Path, stamp: str, bulk: BulkRows, dim: int) -> int:
    """Write `bulk` (the rows of committed version `stamp`) to `path`; returns its bytes."""
    arrays: dict[str, np.ndarray] = {}
    leaf_trees = sorted(bulk.leaf_items)
    _put(arrays, "leaf_trees", leaf_trees)
    arrays["leaf_bounds"] = _bounds(len(bulk.leaf_items[t]) for t in leaf_trees)
    index: dict[str, int] = {}  # each distinct item once, numbered as first met
    number = index.setdefault
    ids = np.asarray([number(item, len(index)) for t in leaf_trees for item in bulk.leaf_items[t]], np.int32)
    arrays["leaf_item_ids"] = ids
    arrays.update(PackedKeys.pack(list(index)).arrays("leaf_items"))
    # the trees of item 0, then of item 1, ...: each item's placements without a sort at the open
    tree_of_leaf = np.repeat(np.arange(len(leaf_trees), dtype=np.int32), np.diff(arrays["leaf_bounds"]))
    arrays["item_trees"] = tree_of_leaf[np.argsort(ids, kind="stable")]
    arrays["item_ends"] = np.cumsum(np.bincount(ids, minlength=len(index))).astype(np.int64)
    cell_trees = sorted(bulk.cell_leaves)
    rows = [r for t in cell_trees for r in bulk.cell_leaves[t]]
    _put(arrays, "cell_trees", cell_trees)
    arrays["cell_bounds"] = _bounds(len(bulk.cell_leaves[t]) for t in cell_trees)
    arrays["cell_nids"] = np.asarray([n for n, _, _ in rows], np.int64)
    arrays.update(PackedKeys.pack([c for _, c, _ in rows]).arrays("cell_items"))
    arrays["cell_vecs"] = _matrix([v for _, _, v in rows], dim)
    if bulk.node_count is not None:  # (what an open would count in the store: `read_tree_rows`)
        arrays["node_count"] = np.asarray([bulk.node_count], np.int64)
    root_trees = sorted(bulk.roots)
    _put(arrays, "root_trees", root_trees)
    arrays["root_vecs"] = _matrix([bulk.roots[t] for t in root_trees], dim)
    return write_arrays(path, KIND, FORMAT, stamp, arrays)


def read_tree_rows(path: Path, stamp: str, dim: int, watch: MappedFiles | None = None,
                   verify: bool = False) -> BulkRows | CacheMiss:
    """The cached rows of committed version `stamp` (vectors are read-only; of a large file, views of
    its map, added to `watch`), or why the cache cannot serve them. The map is read for random access
    (an operation looks an item's trees up, or reads a few vectors: a page each, never the read-ahead
    around them); what the open reads whole or looks keys up in is asked for at once."""
    found = read_arrays(path, KIND, FORMAT, stamp, watch=watch, random_access=True, verify=verify)
    if isinstance(found, CacheMiss):
        return found
    for name, array in found.items():
        if not name.endswith("_vecs"):
            will_need(array, [(0, len(array))])
    try:
        out = BulkRows()
        leaf_trees, ids = _get(found, "leaf_trees"), found["leaf_item_ids"]
        items = PackedKeys.of_arrays(found, "leaf_items")
        if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= len(items)):
            raise ValueError("a leaf names no item")
        spans = _spans(found["leaf_bounds"], len(leaf_trees), len(ids))
        out.leaf_items = LeafItems(dict(zip(leaf_trees, spans, strict=True)), ids, items)
        out.held = Placements(leaf_trees, found["item_trees"], found["item_ends"], items)
        cell_trees, cells, nids, vecs = (_get(found, "cell_trees"), PackedKeys.of_arrays(found, "cell_items"),
                                         found["cell_nids"], found["cell_vecs"])
        if len(nids) != len(cells) or vecs.shape != (len(cells), dim):
            raise ValueError("the session trees' leaf arrays disagree")
        spans = _spans(found["cell_bounds"], len(cell_trees), len(cells))
        out.cells = CellRows(cell_trees, found["cell_bounds"], found["cell_nids"], cells, vecs)
        out.cell_leaves = CellLeaves(dict(zip(cell_trees, spans, strict=True)), out.cells)
        root_trees, root_vecs = _get(found, "root_trees"), found["root_vecs"]
        if root_vecs.shape != (len(root_trees), dim):
            raise ValueError("the root arrays disagree")
        out.roots = dict(zip(root_trees, root_vecs, strict=True))
        if "node_count" in found:  # (a cache written before it carried the count: counted in the store)
            out.node_count = int(found["node_count"][0])
    except (KeyError, ValueError, TypeError, UnicodeDecodeError) as e:
        return CacheMiss(f"{path.name}: inconsistent arrays ({type(e).__name__}: {e})")
    return out


class LeafItems(Mapping[str, list[str]]):
    """tree id -> the items of its leaves, as the cache holds them (each list made when first asked
    for: most trees of a large memory are never reached)."""

    def __init__(self, spans: dict[str, tuple[int, int]], ids: np.ndarray, items: Sequence[str]) -> None:
        self._spans, self._ids, self._items = spans, ids, items

    def __getitem__(self, tree_id: str) -> list[str]:
        lo, hi = self._spans[tree_id]
        return list(map(self._items.__getitem__, self._ids[lo:hi].tolist()))

    def __iter__(self) -> Iterator[str]:
        return iter(self._spans)

    def __len__(self) -> int:
        return len(self._spans)

    def sizes(self) -> dict[str, int]:
        """tree id -> how many leaves it has (nothing made)."""
        return {t: hi - lo for t, (lo, hi) in self._spans.items()}


class CellLeaves(Mapping[str, list[tuple[int, str, np.ndarray]]]):
    """session tree id -> (node id, cell id, vector) of its leaves, as the cache holds them (each list
    made when first asked for)."""

    def __init__(self, spans: dict[str, tuple[int, int]], rows: CellRows) -> None:
        self._spans, self._rows = spans, rows

    def __getitem__(self, tree_id: str) -> list[tuple[int, str, np.ndarray]]:
        lo, hi = self._spans[tree_id]
        rows = self._rows
        return list(zip(rows.nids[lo:hi].tolist(), rows.items[lo:hi], rows.vecs[lo:hi]))

    def __iter__(self) -> Iterator[str]:
        return iter(self._spans)

    def __len__(self) -> int:
        return len(self._spans)


class Placements(KeyedLoaded):
    """item -> the trees whose leaves hold it, from the trees of each item in item order (`trees_of`:
    item i's at trees_of[ends[i - 1]:ends[i]], as tree numbers), made for an item when first asked
    for (one frozenset per distinct set of trees): the loaded version's placements (a
    `memforest.resident.lazy_map.Loaded`, in the items' order). Arrays that do not fit together are
    a ValueError."""

    def __init__(self, trees: list[str], trees_of: np.ndarray, ends: np.ndarray, items: PackedKeys) -> None:
        if len(ends) != len(items) or (len(ends) and int(ends[-1]) != len(trees_of)):
            raise ValueError("the items' trees do not fit the items")
        if len(trees_of) and (int(trees_of.min()) < 0 or int(trees_of.max()) >= len(trees)):
            raise ValueError("an item names no tree")
        self.made: dict[str, frozenset[str]] = {}
        self._trees = trees
        self._keys = self._items = items
        self._by_item, self._ends = trees_of, ends
        self._pool: dict[tuple[int, ...], frozenset[str]] = {}
        self._lock = threading.Lock()

    def make(self, item: Any) -> Any:
        found = self.made.get(item)
        if found is not None:
            return found
        number = self._items.position(item)
        if number < 0:
            return _MISSING
        lo = int(self._ends[number - 1]) if number else 0
        key = tuple(self._by_item[lo:int(self._ends[number])].tolist())
        with self._lock:
            trees = self._pool.get(key)
            if trees is None:
                trees = self._pool[key] = frozenset(map(self._trees.__getitem__, key))
            return self.made.setdefault(item, trees)


def _put(arrays: dict[str, np.ndarray], name: str, values: list[str]) -> None:
    packed = pack_strings(values)
    arrays[f"{name}_blob"], arrays[f"{name}_ends"] = packed["blob"], packed["ends"]


def _get(found: dict[str, np.ndarray], name: str) -> list[str]:
    return unpack_strings(found[f"{name}_blob"], found[f"{name}_ends"])


def _bounds(sizes: Iterable[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(np.fromiter(sizes, np.int64))]).astype(np.int64)


def _spans(bounds: np.ndarray, groups: int, total: int) -> list[tuple[int, int]]:
    b = bounds.tolist()
    if len(b) != groups + 1 or b[0] != 0 or b[-1] != total or any(x > y for x, y in zip(b, b[1:])):
        raise ValueError("group bounds do not fit their rows")
    return list(zip(b[:-1], b[1:]))


def _matrix(vecs: list[np.ndarray], dim: int) -> np.ndarray:
    return np.stack(vecs).astype(np.float32, copy=False) if vecs else np.zeros((0, dim), np.float32)
