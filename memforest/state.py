"""The in-memory view of one user's memory, loaded from the store and edited by operations.

Every change an operation makes is recorded in a ChangeSet; the store writes the ChangeSet in one
transaction, so the committed version is the only one a reader ever sees."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from memforest.resident.cow import CowMap
from memforest.resident.lazy_map import LazyMap
from memforest.resident.ondemand import LazyNodeMap, NodeData, NodeKey, TreeInfo
from memforest.resident.vector_table import Given, SavedPartitions, VectorTable
from memforest.trees.memtree import MemTree
from memforest.types import Cell, CellSentences, EntityStat, Fact, Scene, Session


@dataclass
class ChangeSet:
    """What one operation changed, by primary key. Deletions win over upserts of the same key."""

    sessions: set[str] = field(default_factory=set)
    deleted_sessions: set[str] = field(default_factory=set)
    facts: set[str] = field(default_factory=set)
    deleted_facts: set[str] = field(default_factory=set)
    trees: set[str] = field(default_factory=set)
    deleted_trees: set[str] = field(default_factory=set)
    nodes: set[NodeKey] = field(default_factory=set)
    deleted_nodes: set[NodeKey] = field(default_factory=set)
    entities: set[str] = field(default_factory=set)
    deleted_entities: set[str] = field(default_factory=set)
    scenes: set[str] = field(default_factory=set)
    deleted_scenes: set[str] = field(default_factory=set)
    pending_cells: bool = False  # rewrite the pending-cell list
    # cell id -> its sentences, embedded (or copied) by this operation: written with the cell
    sentences: dict[str, CellSentences] = field(default_factory=dict)
    operation: dict = field(default_factory=dict)


def _cow() -> CowMap:
    return CowMap()


NEAR_DUPLICATE_CANDIDATES = 256  # rows of a partitioned fact table scored exactly for near-duplicates


@dataclass
class UserState:
    """One version of a user's memory. A published version is never edited: `fork()` gives the next
    operation a copy-on-write version whose edits cost O(what they touch). Objects shared with older
    versions are replaced, never changed in place: `writable_tree`, `writable_fact`, `writable_entity`
    and `writable_scene` hand out private copies."""

    user: str
    version: int = 0
    embedder: str = ""
    dim: int = 0
    sessions: MutableMapping[str, Session] = field(default_factory=_cow)
    cells: MutableMapping[str, Cell] = field(default_factory=_cow)
    session_cells: MutableMapping[str, list[str]] = field(default_factory=_cow)
    facts: MutableMapping[str, Fact] = field(default_factory=_cow)
    trees: MutableMapping[str, TreeInfo] = field(default_factory=_cow)
    nodes: MutableMapping[NodeKey, NodeData] = field(default_factory=_cow)
    entities: MutableMapping[str, EntityStat] = field(default_factory=_cow)
    scenes: MutableMapping[str, Scene] = field(default_factory=_cow)
    pending_cells: set[str] = field(default_factory=set)  # extraction failed (degraded mode)
    next_tree_rowid: int = 1
    next_scene: int = 1
    # derived, maintained by every edit: fact id -> ids of the entity and scene trees holding it;
    # normalised fact text -> fact id
    placements: MutableMapping[str, frozenset[str]] = field(default_factory=_cow)
    norms: MutableMapping[str, str] = field(default_factory=_cow)
    scene_tables: dict[str, VectorTable] = field(default_factory=dict)  # domain -> scene centroids
    # fact id -> embedding (`fact_vecs`): the facts' only copy of their vectors, searched for duplicate
    # candidates and, as the fact index, by queries (`ForestIndex.facts`, which writes its row meta)
    fact_table: VectorTable | None = None
    # session id -> time (row meta); never searched, so never partitioned (`_session_times`)
    session_times: VectorTable = field(default_factory=lambda: _session_times())
    _own: dict[str, set[str]] = field(default_factory=dict, repr=False)  # keys copied into this version
    # where the trees of the version loaded are read from when first reached (None: all in memory)
    tree_source: Any = field(default=None, repr=False)

    _MAPS = ("sessions", "cells", "session_cells", "facts", "trees", "nodes", "entities", "scenes",
             "placements", "norms")

    @property
    def fact_vecs(self) -> FactVectors:
        """fact id -> its embedding (a read-only view of its row in `fact_table`)."""
        return FactVectors(self.fact_table)

    def fork(self) -> UserState:
        """The next version: shares everything with this one, which stays unchanged."""
        out = replace(self, pending_cells=set(self.pending_cells), _own={},
                      scene_tables={d: t.fork() for d, t in self.scene_tables.items()},
                      fact_table=self.fact_table.fork() if self.fact_table is not None else None,
                      session_times=self.session_times.fork())
        for name in self._MAPS:
            setattr(out, name, _fork(getattr(self, name)))
        if out.tree_source is not None:
            out.tree_source.serve(out)
        return out

    def _owns(self, kind: str, key: str) -> bool:
        own = self._own.setdefault(kind, set())
        if key in own:
            return True
        own.add(key)
        return False

    def writable_tree(self, tree_id: str) -> TreeInfo:
        info = self.trees[tree_id]
        if not self._owns("trees", tree_id):
            info = info.with_tree(info.tree.fork())
            self.trees[tree_id] = info
        return info

    def read_facts(self) -> None:
        """Have every fact read in what it would read from the store when first needed (a loaded
        version's: `Fact.unread`), in one pass over the store's rows; for what reads them all."""
        if self.tree_source is not None:
            loaded = self.tree_source.loaded_facts
            if loaded is not None and isinstance(self.facts, LazyMap):
                loaded.norms.make_all()  # (every fact in one pass, not one read each)
            self.tree_source.read_facts(self.facts.values())

    def make_facts(self) -> None:
        """Have every fact of a loaded version made (`LazyMap`), in one pass over the store's rows
        rather than one read each; for what reaches them all."""
        if isinstance(self.facts, LazyMap):
            self.facts.make_all()

    def make_cells(self) -> None:
        """Have every cell and session's list of cells of a loaded version made (`LazyMap`), each kind
        in one pass over the store's rows rather than one read each; for what reads them all."""
        for m in (self.cells, self.session_cells):
            if isinstance(m, LazyMap):
                m.make_all()

    def read_all(self) -> None:
        """Have everything this version would read from the store when first needed read in now:
        its trees and their nodes' data, its sessions' turns, its cells' texts, its facts' fields and
        occurrences and its entity labels' members (a version whose snapshot of the store ends)."""
        if self.tree_source is None:
            return
        self.tree_source.ensure_all()
        self.read_facts()
        self.make_cells()
        for session in self.sessions.values():
            _ = session.turns
        for cell in self.cells.values():
            _ = cell.text
        for stat in self.entities.values():
            _ = stat.facts

    def fact_times(self, fact_ids: Iterable[str]) -> list[float]:
        """Each fact's `time`. A fact of a loaded version whose occurrences nothing has read (so
        unchanged since the load) has it in its fact table row's meta, as the index writes it: it is
        not read from the store for it, nor made."""
        facts, table = self.facts, self.fact_table
        if not isinstance(facts, LazyMap) or table is None:
            return [facts[f].time for f in fact_ids]
        out = []
        for fact_id in fact_ids:
            fact = facts.peek(fact_id)
            if fact is not None and fact.knows_time:
                out.append(fact.time)
            elif fact_id in facts:
                out.append(float(table.meta(fact_id)[0]))
            else:
                raise KeyError(fact_id)
        return out

    def writable_fact(self, fact_id: str) -> Fact:
        """The version's own copy of a fact, to change. A loaded fact whose occurrences nothing has
        read is copied without reading them (`Fact.copy_for_write`, given its time from its fact
        table row's meta, as `fact_times` takes it): to be said again, it need not be read."""
        fact = self.facts[fact_id]
        if not self._owns("facts", fact_id):
            table, root_time = self.fact_table, None
            if not fact.knows_time and table is not None and fact_id in table:
                root_time = float(table.meta(fact_id)[0])
            fact = fact.copy_for_write(root_time)
            self.facts[fact_id] = fact
        return fact

    def writable_entity(self, label: str) -> EntityStat:
        stat = self.entities[label]
        if not self._owns("entities", label):
            stat = stat.copy()
            self.entities[label] = stat
        return stat

    def writable_scene(self, scene_id: str) -> Scene:
        scene = self.scenes[scene_id]
        if not self._owns("scenes", scene_id):
            scene = replace(scene)
            self.scenes[scene_id] = scene
        return scene

    def index_scene(self, scene: Scene) -> None:
        """Put `scene`'s centroid, size and last time into its domain's centroid table."""
        table = self.scene_tables.get(scene.domain)
        if table is None:
            table = self.scene_tables[scene.domain] = VectorTable(len(scene.total))
        table.upsert([scene.scene_id], scene.centroid.reshape(1, -1), np.array([[scene.size, scene.t_last]]))

    def add_tree(self, tree_id: str, family: str, label: str, fanout: int) -> TreeInfo:
        info = TreeInfo(tree_id, family, label, self.next_tree_rowid, MemTree(tree_id, fanout))
        self.next_tree_rowid += 1
        self.trees[tree_id] = info
        self._owns("trees", tree_id)
        return info

    def add_session(self, session: Session) -> None:
        self.sessions[session.session_id] = session
        self.session_times.upsert([session.session_id], np.zeros((1, 1)), np.array([[session.time, 0.0]]))

    def remove_session(self, session_id: str) -> None:
        del self.sessions[session_id]
        self.session_times.remove([session_id])

    def latest_session_time(self) -> float | None:
        """The time of the latest stored session (None when there is none)."""
        rows = self.session_times.live_rows()
        return float(self.session_times.row_meta(rows)[:, 0].max()) if len(rows) else None

    def add_fact(self, fact: Fact, vec: np.ndarray) -> None:
        self.add_facts([fact], vec.reshape(1, -1))

    def add_facts(self, facts: Sequence[Fact], vecs: np.ndarray) -> None:
        """Add new facts with their vectors (one row each of `vecs`), in one upsert of the fact table:
        a partitioned table assigns them to their partitions in one pass over the centroids."""
        if not facts:
            return
        for fact in facts:
            self.facts[fact.id] = fact
            self.norms[fact.norm] = fact.id
            self._owns("facts", fact.id)
        if self.fact_table is None:
            self.fact_table = VectorTable(vecs.shape[1])
        self.fact_table.upsert([f.id for f in facts], vecs)

    def remove_fact(self, fact_id: str) -> None:
        fact = self.facts.pop(fact_id)
        if self.norms.get(fact.norm) == fact_id:
            del self.norms[fact.norm]
        if self.fact_table is not None:
            self.fact_table.remove([fact_id])

    def place(self, tree_id: str, item: str) -> None:
        """Record that the (entity or scene) tree `tree_id` now holds `item`."""
        self.placements[item] = self.placements.get(item, frozenset()) | {tree_id}

    def unplace(self, tree_id: str, item: str) -> None:
        held = self.placements.get(item, frozenset()) - {tree_id}
        if held:
            self.placements[item] = held
        else:
            self.placements.pop(item, None)

    def similar_facts(self, queries: np.ndarray, floor: float) -> list[list[tuple[float, str]]]:
        """For each query row, the (cosine, fact id) of facts at or above `floor`."""
        if self.fact_table is None or not len(self.fact_table):
            return [[] for _ in range(len(queries))]
        table = self.fact_table
        return [[(float(s), str(table.row_key(r))) for r, s in zip(rows.tolist(), sims.tolist())]
                for rows, sims in table.above(queries, floor, NEAR_DUPLICATE_CANDIDATES)]

    def trees_holding(self, item: str) -> list[str]:
        """Ids of the entity and scene trees holding `item` (a fact id)."""
        return sorted(self.placements.get(item, ()))

    def fill_facts(self, ids: Sequence[str], vecs: Given, saved: SavedPartitions | None = None,
                   meta: Given | None = None) -> bool:
        """A new fact table of `ids` with `vecs` and row `meta` (each may be a function giving it),
        after a load; it takes the `saved` partitions (of a cache of this version) when they hold
        exactly its keys, and their rows when they carry them (`VectorTable.fill`): whether it did."""
        self.fact_table = VectorTable(self.dim)
        return self.fact_table.fill(ids, vecs, meta, saved)

    def derive(self) -> None:
        """Rebuild the derived maps from the trees and facts (after a load or a merge)."""
        lazy = isinstance(self.facts, LazyMap)  # (made when first reached: the norms too, by the loader)
        norms = {f.norm: fid for fid, f in self.facts.items()} if not lazy else None
        for name in self._MAPS:  # a plain dict (as a load makes them) is nobody else's: taken as it is
            m = getattr(self, name)
            if not isinstance(m, (LazyNodeMap, LazyMap)):
                setattr(self, name, CowMap.over(m if type(m) is dict else dict(m.items())))
        bulk = self.tree_source.bulk if self.tree_source is not None else None
        if bulk is not None and bulk.held is not None and not any(
                info.is_read for info in self.trees.values() if info.family != "session"):
            self.placements = LazyMap(bulk.held)  # as the open read them, no tree read yet
        else:
            self.placements = CowMap.over(self._placements_of_trees())
        if norms is not None:
            self.norms = CowMap.over(norms)
        if self.fact_table is None:
            self.fact_table = VectorTable(self.dim)
        self.scene_tables = {}
        by_domain: dict[str, list[Scene]] = {}
        for scene in self.scenes.values():
            by_domain.setdefault(scene.domain, []).append(scene)
        for domain, scenes in by_domain.items():  # one upsert per domain, as `index_scene` rows
            table = self.scene_tables[domain] = VectorTable(len(scenes[0].total))
            table.upsert([sc.scene_id for sc in scenes], np.stack([sc.centroid for sc in scenes]),
                         np.array([[sc.size, sc.t_last] for sc in scenes]))
        self.session_times = _session_times()
        if self.sessions:
            ids = list(self.sessions)
            self.session_times.upsert(ids, np.zeros((len(ids), 1)),
                                      np.array([[session.time, 0.0] for session in self.sessions.values()]))

    def _placements_of_trees(self) -> dict[str, frozenset[str]]:
        """item -> the entity and scene trees holding it, from the trees (a tree not read yet: from its
        leaves as the open read them)."""
        held: dict[str, frozenset[str]] = {}
        hold = held.setdefault
        pool: dict[frozenset[str], frozenset[str]] = {}  # one object per distinct set of trees
        bulk = self.tree_source.bulk if self.tree_source is not None else None
        for tid, info in self.trees.items():
            if info.family != "session":
                items = bulk.leaf_items.get(tid, ()) if bulk is not None and not info.is_read \
                    else info.tree.placements()
                alone = frozenset((tid,))  # shared by the items no other tree holds (most)
                for item in items:
                    trees = hold(item, alone)
                    if trees is not alone:
                        trees = trees | alone
                        held[item] = pool.setdefault(trees, trees)
        return held


class FactVectors(Mapping[str, np.ndarray]):
    """fact id -> embedding, read from a fact table (`UserState.fact_vecs`)."""

    __slots__ = ("_table",)

    def __init__(self, table: VectorTable | None) -> None:
        self._table = table

    def __getitem__(self, fact_id: str) -> np.ndarray:
        if self._table is None:
            raise KeyError(fact_id)
        return self._table.vector(fact_id)

    def get(self, fact_id: str, default: Any = None) -> Any:  # one lookup, not Mapping's try/except
        found = self._table.vector_or_none(fact_id) if self._table is not None else None
        return default if found is None else found

    def __contains__(self, fact_id: object) -> bool:
        return self._table is not None and fact_id in self._table

    def __iter__(self) -> Iterator[str]:
        return iter(self._table.keys()) if self._table is not None else iter(())  # type: ignore[arg-type]

    def __len__(self) -> int:
        return len(self._table) if self._table is not None else 0

    def will_need(self, fact_ids: Iterable[str]) -> None:
        """Ask ahead for the vectors of those of `fact_ids` the table holds (`VectorTable.will_need`)."""
        if self._table is not None:
            self._table.will_need(fact_ids)

    def stack(self, fact_ids: Sequence[str]) -> np.ndarray:
        """The vectors of `fact_ids` as one array (one gather)."""
        if self._table is None:
            if fact_ids:
                raise KeyError(fact_ids[0])
            return np.zeros((0, 0), np.float32)
        return self._table.vectors(fact_ids)


def _session_times() -> VectorTable:
    """The table of the sessions' times (row meta). Only its rows' meta is read, never a search, so
    it is never partitioned: past the exact bound, partitions would be trained on zero vectors at
    every open (a third of a second at 10^5 sessions)."""
    return VectorTable(1, exact_rows=sys.maxsize)


def _fork(m: MutableMapping) -> CowMap:
    return m.fork() if isinstance(m, CowMap) else CowMap.over(dict(m))
