"""The forest's indexes: NodeIndex (every node), RootIndex (tree roots) and FactIndex (facts).

They are derived from the store: rebuilt from SQLite when their cache files are missing, stale or
unreadable, and updated in place for exactly the rows an operation changed."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import numpy as np

from memforest.index.vectors import VectorIndex
from memforest.state import ChangeSet, UserState

log = logging.getLogger(__name__)
_KINDS = ("nodes", "roots", "facts")


def node_uid(tree_rowid: int, node_id: int) -> int:
    return (tree_rowid << 32) | node_id


def fact_uid(fact_id: str) -> int:
    return int(hashlib.sha1(fact_id.encode()).hexdigest()[:15], 16)


class ForestIndex:
    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.nodes = VectorIndex(dim)
        self.roots = VectorIndex(dim)
        self.facts = VectorIndex(dim)
        self.node_key: dict[int, tuple[str, int]] = {}
        self.root_tree: dict[int, str] = {}
        self.fact_key: dict[int, str] = {}
        self.version = -1

    @classmethod
    def build(cls, state: UserState, dim: int) -> ForestIndex:
        idx = cls(dim)
        idx._add_all(state)
        idx.version = state.version
        return idx

    def _add_all(self, state: UserState) -> None:
        self.node_key, self.root_tree, self.fact_key = {}, {}, {}
        for info in state.trees.values():
            for nid in info.tree.nodes:
                self.node_key[node_uid(info.rowid, nid)] = (info.tree_id, nid)
            if info.tree.root is not None:
                self.root_tree[info.rowid] = info.tree_id
        self.fact_key = {fact_uid(f): f for f in state.facts}
        self.nodes.upsert(list(self.node_key), _stack([state.nodes[k].embedding for k in self.node_key.values()], self.dim))
        self.roots.upsert(list(self.root_tree), _stack([_root_vec(state, t) for t in self.root_tree.values()], self.dim))
        self.facts.upsert(list(self.fact_key), _stack([state.fact_vecs[f] for f in self.fact_key.values()], self.dim))

    def copy(self) -> ForestIndex:
        out = ForestIndex(self.dim)
        out.nodes, out.roots, out.facts = self.nodes.copy(), self.roots.copy(), self.facts.copy()
        out.node_key, out.root_tree, out.fact_key = dict(self.node_key), dict(self.root_tree), dict(self.fact_key)
        out.version = self.version
        return out

    def apply(self, state: UserState, ch: ChangeSet, removed_nodes: dict[str, list[int]],
              removed_tree_rowids: dict[str, int]) -> None:
        """Update exactly the rows `ch` changed: node rows, the roots of changed trees, fact rows."""
        gone_nodes = [node_uid(removed_tree_rowids.get(t, state.trees[t].rowid if t in state.trees else -1), n)
                      for t, ns in removed_nodes.items() for n in ns]
        self.nodes.remove(gone_nodes)
        for uid in gone_nodes:
            self.node_key.pop(uid, None)
        live = [(state.trees[t].rowid, t, n) for t, n in ch.nodes if t in state.trees and (t, n) in state.nodes]
        uids = [node_uid(r, n) for r, _, n in live]
        self.nodes.upsert(uids, _stack([state.nodes[(t, n)].embedding for _, t, n in live], self.dim))
        self.node_key.update({u: (t, n) for u, (_, t, n) in zip(uids, live)})
        dead_roots = [r for r in removed_tree_rowids.values()]
        self.roots.remove(dead_roots)
        for r in dead_roots:
            self.root_tree.pop(r, None)
        touched = {t for t, _ in ch.nodes} | ch.trees
        rows = [(state.trees[t].rowid, t) for t in sorted(touched) if t in state.trees and state.trees[t].tree.root is not None]
        self.roots.upsert([r for r, _ in rows], _stack([_root_vec(state, t) for _, t in rows], self.dim))
        self.root_tree.update({r: t for r, t in rows})
        gone_facts = [fact_uid(f) for f in ch.deleted_facts if f not in state.facts]
        self.facts.remove(gone_facts)
        for u in gone_facts:
            self.fact_key.pop(u, None)
        new = [f for f in ch.facts | ch.deleted_facts if f in state.facts]
        self.facts.upsert([fact_uid(f) for f in new], _stack([state.fact_vecs[f] for f in new], self.dim))
        self.fact_key.update({fact_uid(f): f for f in new})
        self.version = state.version

    def save(self, directory: Path) -> None:
        """Write the cache files and, last, a stamp naming the version they hold."""
        directory.mkdir(parents=True, exist_ok=True)
        for kind in _KINDS:
            getattr(self, kind).save(directory / f"{kind}.faiss")
        stamp = directory / "stamp.json"
        tmp = stamp.with_suffix(".tmp")
        tmp.write_text(json.dumps({"version": self.version, "dim": self.dim}))
        tmp.replace(stamp)

    @classmethod
    def open(cls, directory: Path, state: UserState, dim: int) -> tuple[ForestIndex, bool]:
        """The cached index when its stamp matches the state's version and it loads, else a rebuild.
        Returns (index, rebuilt)."""
        try:
            stamp = json.loads((directory / "stamp.json").read_text())
            if stamp["version"] != state.version or stamp["dim"] != dim:
                raise ValueError(f"stale cache (version {stamp['version']}, store {state.version})")
            idx = cls(dim)
            for kind in _KINDS:
                setattr(idx, kind, VectorIndex.load(directory / f"{kind}.faiss", dim))
            idx._keys_from_state(state)
            if set(idx.node_key) != idx.nodes.ids or set(idx.fact_key) != idx.facts.ids or set(idx.root_tree) != idx.roots.ids:
                raise ValueError("cache rows differ from store rows")
            idx.version = state.version
            return idx, False
        except (OSError, ValueError, KeyError, RuntimeError) as e:
            log.info("rebuilding indexes of %s: %s", directory, e)
            return cls.build(state, dim), True

    def _keys_from_state(self, state: UserState) -> None:
        self.node_key = {node_uid(i.rowid, n): (t, n) for t, i in state.trees.items() for n in i.tree.nodes}
        self.root_tree = {i.rowid: t for t, i in state.trees.items() if i.tree.root is not None}
        self.fact_key = {fact_uid(f): f for f in state.facts}


def _root_vec(state: UserState, tree_id: str) -> np.ndarray:
    root = state.trees[tree_id].tree.root
    assert root is not None
    return state.nodes[(tree_id, root)].embedding


def _stack(vecs: list[np.ndarray], dim: int) -> np.ndarray:
    return np.stack(vecs).astype(np.float32) if vecs else np.zeros((0, dim), np.float32)
