"""Resident versions: load a user's committed memory once, then build each next version from the
previous one and an operation's ChangeSet, in O(what the operation changed)."""

from __future__ import annotations

from collections.abc import Callable

from memforest.check import damaged
from memforest.index.forest_index import ForestIndex
from memforest.resident.ondemand import BulkRows
from memforest.state import ChangeSet, UserState
from memforest.store.db import SavedFor, UserDB
from memforest.store.integrity import widths_agree
from memforest.versions.snapshot import Snapshot


def load(db: UserDB, user: str, saved: SavedFor | None = None, lazy: bool = False,
         cached_rows: Callable[[int, int], BulkRows | None] | None = None) -> Snapshot:
    """The committed version, read from SQLite, with its vector indexes built from it (`saved`: the
    tables' partitions cached for the version read, `memforest.versions.caches`). A store that
    holds vectors whose width is not its dimension, or cannot be loaded for other damage the loader does
    not name itself, is a StoreError naming the damage (`check.damaged`)."""
    try:
        state = db.load(user, saved, lazy=lazy, cached_rows=cached_rows)
        if not widths_agree(state):
            raise ValueError(f"vectors of {user!r} differ in width from the store's dimension")
        snap = Snapshot(state, ForestIndex.build(state, state.dim, saved(state.version) if saved else None,
                                                 facts_meta=False))
        if state.tree_source is not None:
            state.tree_source.release_bulk()
        return snap
    except Exception as e:
        diagnosis = damaged(e, user, db)
        if diagnosis is not e:
            raise diagnosis from e
        raise


def collect_tree_changes(state: UserState, ch: ChangeSet) -> dict[str, list[int]]:
    """Move the node rows the operation's tree edits changed into `ch`; return removed node ids."""
    removed_nodes: dict[str, list[int]] = {}
    for tid in sorted(ch.trees):
        if tid in state.trees:
            changed, removed = state.trees[tid].tree.take_changes()
            ch.nodes |= {(tid, n.id) for n in changed}
            ch.deleted_nodes |= {(tid, n) for n in removed}
            removed_nodes[tid] = removed
            for n in removed:
                state.nodes.pop((tid, n), None)
    return removed_nodes


def next_snapshot(base: Snapshot, state: UserState, ch: ChangeSet, removed_nodes: dict[str, list[int]],
                  rebuild: bool = False) -> Snapshot:
    """The version `state` (committed from `base` with `ch`): indexes forked from `base`'s and changed
    for exactly the rows `ch` names (`rebuild=True`: built afresh, for whole-state operations)."""
    if rebuild or base.index.version != base.version:
        return Snapshot(state, ForestIndex.build(state, state.dim))
    old = base.state
    dropped = {t: old.trees[t].rowid for t in ch.deleted_trees if t in old.trees}
    for tid in dropped:
        removed_nodes[tid] = list(old.trees[tid].tree.nodes)
    index = base.index.fork()
    index.apply(state, ch, removed_nodes, dropped)
    return Snapshot(state, index, base.next_lexical(state, ch))
