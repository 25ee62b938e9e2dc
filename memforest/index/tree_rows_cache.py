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

from collections.abc import Iterable
from pathlib import Path

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
from memforest.resident.ondemand import BulkRows
from memforest.state import UserState

KIND = "tree_rows"
FORMAT = 2  # 2: leaves name their items by index into the distinct items; placements read from them
FILE_NAME = "trees.cache"


def bulk_of_snapshot(state: UserState, index: ForestIndex) -> BulkRows:
    """The rows of `state` (the version `index` was built or carried to), from its indexes and its
    placements: nothing is read from the store and no tree is read."""
    out = BulkRows()
    non_session = {t for t, i in state.trees.items() if i.family != "session"}
    for item, trees in state.placements.items():
        for tid in trees:
            if tid in non_session:
                out.leaf_items.setdefault(tid, []).append(item)
    for uid, (tid, nid, cell) in index.cell_key.items():
        out.cell_leaves.setdefault(tid, []).append((nid, cell, index.cells.vector(uid)))
    for rowid, tid in index.root_tree.items():
        out.roots[tid] = index.roots.vector(rowid)
    return out


def bulk_of_state(state: UserState) -> BulkRows:
    """The rows of `state`, read from its trees (every one is read)."""
    out = BulkRows()
    for tid, info in state.trees.items():
        tree = info.tree
        if tree.root is not None:
            out.roots[tid] = state.nodes[(tid, tree.root)].embedding
        leaves = [(nid, node.item) for nid, node in tree.nodes.items()
                  if node.level == 0 and node.item is not None]
        if info.family == "session":
            out.cell_leaves[tid] = [(nid, item, state.nodes[(tid, nid)].embedding) for nid, item in leaves]
        elif leaves:
            out.leaf_items[tid] = [item for _, item in leaves]
    out.cell_leaves = {t: rows for t, rows in out.cell_leaves.items() if rows}
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
    return None


def write_tree_rows(path: Path, stamp: str, bulk: BulkRows, dim: int) -> int:
    """Write `bulk` (the rows of committed version `stamp`) to `path`; returns its bytes."""
    arrays: dict[str, np.ndarray] = {}
    leaf_trees = sorted(bulk.leaf_items)
    _put(arrays, "leaf_trees", leaf_trees)
    arrays["leaf_bounds"] = _bounds(len(bulk.leaf_items[t]) for t in leaf_trees)
    index: dict[str, int] = {}  # each distinct item once, numbered as first met
    number = index.setdefault
    arrays["leaf_item_ids"] = np.asarray([number(item, len(index)) for t in leaf_trees
                                          for item in bulk.leaf_items[t]], np.int32)
    _put(arrays, "leaf_items", list(index))
    cell_trees = sorted(bulk.cell_leaves)
    rows = [r for t in cell_trees for r in bulk.cell_leaves[t]]
    _put(arrays, "cell_trees", cell_trees)
    arrays["cell_bounds"] = _bounds(len(bulk.cell_leaves[t]) for t in cell_trees)
    arrays["cell_nids"] = np.asarray([n for n, _, _ in rows], np.int64)
    _put(arrays, "cell_items", [c for _, c, _ in rows])
    arrays["cell_vecs"] = _matrix([v for _, _, v in rows], dim)
    root_trees = sorted(bulk.roots)
    _put(arrays, "root_trees", root_trees)
    arrays["root_vecs"] = _matrix([bulk.roots[t] for t in root_trees], dim)
    return write_arrays(path, KIND, FORMAT, stamp, arrays)


def read_tree_rows(path: Path, stamp: str, dim: int, watch: MappedFiles | None = None,
                   verify: bool = False) -> BulkRows | CacheMiss:
    """The cached rows of committed version `stamp` (vectors are read-only; of a large file, views of
    its map, added to `watch`), or why the cache cannot serve them."""
    found = read_arrays(path, KIND, FORMAT, stamp, watch=watch, verify=verify)
    if isinstance(found, CacheMiss):
        return found
    try:
        out = BulkRows()
        leaf_trees, items, ids = _get(found, "leaf_trees"), _get(found, "leaf_items"), found["leaf_item_ids"]
        if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= len(items)):
            raise ValueError("a leaf names no item")
        spans = _spans(found["leaf_bounds"], len(leaf_trees), len(ids))
        at = ids.tolist()
        for tid, (lo, hi) in zip(leaf_trees, spans, strict=True):
            out.leaf_items[tid] = list(map(items.__getitem__, at[lo:hi]))
        out.held = _held(leaf_trees, found["leaf_bounds"], ids, items)
        cell_trees, cells, nids, vecs = (_get(found, "cell_trees"), _get(found, "cell_items"),
                                         found["cell_nids"].tolist(), found["cell_vecs"])
        if len(nids) != len(cells) or vecs.shape != (len(cells), dim):
            raise ValueError("the session trees' leaf arrays disagree")
        spans = _spans(found["cell_bounds"], len(cell_trees), len(cells))
        for tid, (lo, hi) in zip(cell_trees, spans, strict=True):
            out.cell_leaves[tid] = [(nids[i], cells[i], vecs[i]) for i in range(lo, hi)]
        root_trees, root_vecs = _get(found, "root_trees"), found["root_vecs"]
        if root_vecs.shape != (len(root_trees), dim):
            raise ValueError("the root arrays disagree")
        out.roots = dict(zip(root_trees, root_vecs, strict=True))
    except (KeyError, ValueError, TypeError, UnicodeDecodeError) as e:
        return CacheMiss(f"{path.name}: inconsistent arrays ({type(e).__name__}: {e})")
    return out


def _held(trees: list[str], bounds: np.ndarray, ids: np.ndarray,
          items: list[str]) -> dict[str, frozenset[str]]:
    """item -> the trees whose leaves hold it, from each leaf's tree (by `bounds`) and item number
    (`ids`): grouped by item in numpy, one frozenset per distinct set of trees."""
    tree_of_leaf = np.repeat(np.arange(len(trees), dtype=np.int64), np.diff(bounds))
    order = np.argsort(ids, kind="stable")
    by_item = tree_of_leaf[order].tolist()
    ends = np.cumsum(np.bincount(ids, minlength=len(items))).tolist()
    pool: dict[tuple[int, ...], frozenset[str]] = {}
    held: dict[str, frozenset[str]] = {}
    lo = 0
    for item, hi in zip(items, ends):
        key = tuple(by_item[lo:hi])
        found = pool.get(key)
        if found is None:
            found = pool[key] = frozenset(map(trees.__getitem__, key))
        held[item] = found
        lo = hi
    return held


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
