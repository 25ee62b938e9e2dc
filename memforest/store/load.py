"""Reading one user's committed state from its database rows."""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import cast

import numpy as np

from memforest.index.forest_index import facts_meta
from memforest.resident.cow import CowMap, CowSet
from memforest.resident.lazy_map import LazyMap
from memforest.resident.ondemand import BulkRows, LazyNodeMap, NodeData, Source, TreeInfo
from memforest.resident.vector_table import SavedPartitions
from memforest.routing.router import session_tree_id
from memforest.state import FactVectors, UserState
from memforest.store.loaded_cells import LoadedCells, LoadedSessionCells
from memforest.store.loaded_facts import LoadedFacts
from memforest.store.rows import (
    FACT_DETAIL_COLUMNS,
    json_list,
    node_of_row,
    read_bulk,
    read_facts,
    read_occurrences,
    vec_of,
)
from memforest.store.tree_source import StoreTreeSource
from memforest.trees.memtree import MemTree
from memforest.trees.node import Node
from memforest.types import Cell, EntityStat, Fact, Scene, Session, Turn

log = logging.getLogger(__name__)


class VectorWidthError(ValueError):
    """A stored vector whose width is not the store's dimension (diagnosed by `memforest check`'s
    width findings, which name the table)."""


class _Lists:
    """`json_list` for columns whose few distinct values repeat over many rows (a fact's participants,
    entities, topics): each distinct text is parsed once, and rows with the same text share its list
    (a fact is replaced, never changed in place: `UserState.writable_fact`)."""

    def __init__(self) -> None:
        self._parsed: dict[str, list] = {}

    def __call__(self, text: str) -> list:
        parsed = self._parsed.get(text)
        if parsed is None:
            parsed = self._parsed[text] = json_list(text)
        return parsed


def read_state(con: sqlite3.Connection, user: str, lazy: Path | None = None,
               cached_rows: Callable[[int, int], BulkRows | None] | None = None,
               saved: Callable[[int], Mapping[str, SavedPartitions] | None] | None = None) -> UserState:
    """The committed state; its maps are plain dicts, made copy-on-write by `UserState.derive`.
    `lazy` (the database's path): trees are read when first reached, through a `StoreTreeSource`
    that takes `con` and keeps its read transaction open (the caller then must not close it); what
    the indexes need of them comes from `cached_rows(version, dim)` when that agrees with the tree rows,
    else from one pass over the nodes. The fact table takes the partitions `saved(version)` holds for
    it (`facts`), when they hold exactly its keys, and then their rows when they carry them: the facts'
    vectors and row meta are then not read from the store, and with `lazy` neither are the facts: which
    ids the version holds is the cache's keys, and each fact is made from its row when first reached,
    its fields and occurrences when first needed (`memforest.store.loaded_facts`, `Fact.unread`). A
    fact vector of another width read from the store is a VectorWidthError."""
    meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
    st = UserState(user, version=int(meta["version"]), embedder=meta["embedder"], dim=int(meta["dim"]),
                   next_tree_rowid=int(meta["next_tree_rowid"]),
                   next_scene=int(meta["next_scene"]))
    tables = saved(st.version) if saved is not None else None
    saved_facts = tables.get("facts") if tables else None
    mapped = saved_facts is not None and saved_facts.vecs is not None  # the table takes the cache's rows
    facts: dict[str, Fact] = {}
    blobs: list[bytes] = []
    # with the cache's rows and their meta, the facts are made when first reached (`LoadedFacts`)
    made_later = False
    if lazy is not None and saved_facts is not None and mapped and saved_facts.meta is not None:
        keys = cast(Sequence[str], saved_facts.keys)
        try:
            made_later = st.fill_facts(keys, lambda: _fact_vectors(con, keys, st.dim), saved_facts)
        except KeyError:  # (a cached key the store lacks: the table is filled from the store below)
            made_later = False
    if not made_later:
        pool: dict[str, str] = {}  # one string object per distinct session id, cell id and fact label
        same = pool.setdefault
        occ = read_occurrences(con, same)
        lists = _Lists()
        columns = f"fact_id, norm, event_start, {FACT_DETAIL_COLUMNS}{'' if mapped else ', embedding'}"
        for row in con.execute(f"SELECT {columns} FROM facts"):
            fid, norm, es, text, origin, role, parts, ents, topics, time_text, ee, attr, dom, coll = row[:14]
            facts[fid] = Fact(fid, text, norm, same(origin, origin), same(role, role), lists(parts),
                              lists(ents), lists(topics), time_text, es, ee, same(attr, attr), same(dom, dom),
                              same(coll, coll), occ.get(fid, []))
            if not mapped:
                blobs.append(row[14])
        del pool
        ids = list(facts)
        vecs = (lambda: _fact_vectors(con, ids, st.dim)) if mapped else _vectors(blobs, ids, st.dim)
        st.fill_facts(ids, vecs, saved_facts, lambda: _fact_meta(con, facts))
        del blobs
    fact_vecs = st.fact_vecs
    if lazy is not None:
        _read_trees_lazily(con, st, lazy, fact_vecs, cached_rows(st.version, st.dim) if cached_rows else None)
    rows: dict[str, list[Node]] = {}
    nodes: dict[tuple[str, int], NodeData] = {}
    for row in ([] if lazy is not None else con.execute("SELECT * FROM nodes")):
        node, nodes[(row[0], row[1])] = node_of_row(row, fact_vecs)
        rows.setdefault(row[0], []).append(node)
    trees: dict[str, TreeInfo] = st.trees if lazy is not None else {}  # type: ignore[assignment]
    for tid, rowid, family, label, fanout, _root, next_id in ([] if lazy is not None else
                                                               con.execute("SELECT * FROM trees")):
        tree = MemTree.from_nodes(tid, fanout, rows.pop(tid, []), next_node_id=next_id, validate=False)
        trees[tid] = TreeInfo(tid, family, label, rowid, tree)
    entities = _read_entities(con, st.tree_source)
    scenes: dict[str, Scene] = {}
    for sid, domain, total, size, t_last, tree_id in con.execute("SELECT * FROM scenes"):
        scenes[sid] = Scene(sid, domain, vec_of(total), size, t_last, tree_id)
    st.sessions, st.session_cells, st.cells = _read_sessions(con, st.tree_source)
    if made_later:
        assert st.fact_table is not None
        loaded = st.tree_source.loaded_facts = LoadedFacts(st.fact_table.key_rows(), st.tree_source)
        st.facts, st.norms = LazyMap(loaded), LazyMap(loaded.norms)
    else:
        st.facts = facts
    if lazy is None:
        st.nodes = nodes
    st.trees, st.entities, st.scenes = trees, entities, scenes
    st.pending_cells = {row[0] for row in con.execute("SELECT cell_id FROM pending_cells")}
    return st


def _vectors(blobs: list[bytes], ids: Sequence[str], dim: int) -> np.ndarray:
    """The fact vectors of `blobs` (one per fact of `ids`); one of another width is a VectorWidthError."""
    width = 4 * dim
    for fid, blob in zip(ids, blobs):
        if len(blob) != width:
            raise VectorWidthError(f"the vector of fact {fid!r} has {len(blob)} bytes, not {dim}-d")
    return np.frombuffer(b"".join(blobs), np.float32).reshape(len(blobs), dim)


def _fact_vectors(con: sqlite3.Connection, ids: Sequence[str], dim: int) -> np.ndarray:
    """The vectors of the facts `ids`, in that order, read from the store (when the cached rows
    could not be taken)."""
    by_id = dict(con.execute("SELECT fact_id, embedding FROM facts").fetchall())
    return _vectors([by_id[f] for f in ids], ids, dim)


def _fact_meta(con: sqlite3.Connection, facts: dict[str, Fact]) -> np.ndarray:
    """The row meta of `facts` in the fact index (`forest_index.fact_meta`), from their occurrences as
    read and the session trees' rows; each fact keeps its earliest occurrence (`Fact.knows_first`)."""
    earliest = attrgetter("source_time", "session_id")
    read_facts(con, list(facts.values()))  # in one pass, not one read per fact
    for fact in facts.values():
        fact.knows_first(min(fact.occurrences, key=earliest, default=None))
    rowids = dict(con.execute("SELECT tree_id, rowid_ FROM trees WHERE family = 'session'").fetchall())
    return facts_meta(facts.values(), lambda sid: rowids.get(session_tree_id(sid), -1), len(facts))


def _read_entities(con: sqlite3.Connection, source: Source | None) -> dict[str, EntityStat]:
    """Entity labels with their members; with a `source`, the members are left in the store and
    read through it when first needed."""
    entities: dict[str, EntityStat] = {}
    for label, tree_id in con.execute("SELECT label, tree_id FROM entities"):
        entities[label] = EntityStat(label, tree_id=tree_id, source=source)
    if source is not None:
        return entities
    members: dict[str, dict[str, None]] = {}
    for label, fid in con.execute("SELECT label, fact_id FROM entity_facts"):
        members.setdefault(label, {})[fid] = None
    for label, fids in members.items():
        entities[label].facts = CowSet.over(fids)
    counts: dict[str, dict[str, int]] = {}
    for label, sid, n in con.execute("SELECT label, session_id, facts FROM entity_sessions"):
        counts.setdefault(label, {})[sid] = n
    for label, by_session in counts.items():
        entities[label].sessions = CowMap.over(by_session)
    return entities


def _read_sessions(con: sqlite3.Connection, source: StoreTreeSource | None
                   ) -> tuple[dict[str, Session], MutableMapping[str, list[str]], MutableMapping[str, Cell]]:
    """Sessions, their cells' ids in order, and cells; with a `source`, the turns are left in the store
    and read through it when first needed, and of the cells only their ids are read: a cell, and a
    session's list of cells, are read when first reached (`memforest.store.loaded_cells`)."""
    sessions: dict[str, Session] = {}
    if source is not None:
        for sid, t in con.execute("SELECT session_id, time FROM sessions"):  # (`sessions_opened`)
            sessions[sid] = Session(sid, t, source=source)
        ids = dict.fromkeys(_cell_ids(con))
        return sessions, LazyMap(LoadedSessionCells(sessions, source)), LazyMap(LoadedCells(ids, source))
    session_cells: dict[str, list[str]] = {}
    cells: dict[str, Cell] = {}
    for sid, t, turns in con.execute("SELECT session_id, time, turns FROM sessions"):
        sessions[sid] = Session(sid, t, [Turn(r, c, tt) for r, c, tt in json.loads(turns)])
        session_cells[sid] = []
    for cid, sid, idx, lo, hi, t, text in con.execute("SELECT cell_id, session_id, idx, turn_lo, turn_hi, "
                                                      "time, text FROM cells ORDER BY session_id, idx"):
        cells[cid] = Cell(cid, sid, idx, lo, hi, t, text)
        session_cells.setdefault(sid, []).append(cid)
    return sessions, session_cells, cells


def _cell_ids(con: sqlite3.Connection) -> list[str]:
    """Every cell's id, in the index's order: one text joined by SQLite and split here (no row
    object per cell), or row by row where an id holds the separator."""
    joined, count = con.execute("SELECT group_concat(cell_id, char(0)), count(*) FROM cells").fetchone()
    ids = joined.split("\0") if joined is not None else []
    if len(ids) == count:
        return ids
    return list(map(itemgetter(0), con.execute("SELECT cell_id FROM cells")))


def _read_trees_lazily(con: sqlite3.Connection, st: UserState, path: Path,
                       fact_vecs: FactVectors, cached: BulkRows | None) -> None:
    """The tree rows of `st` with a source reading their nodes on demand, and its lazy node map."""
    shapes: dict[str, tuple[int, int | None, int]] = {}
    rows = con.execute("SELECT * FROM trees").fetchall()
    for tid, _rowid, _family, _label, fanout, root, next_id in rows:
        shapes[tid] = (int(fanout), root, int(next_id))
    if cached is not None and not _fits(cached, {t: (family, root) for t, _, family, _, _, root, _ in rows}):
        log.debug("memforest: the cached tree rows do not fit the store's trees: read from the store")
        cached = None
    bulk = cached if cached is not None else read_bulk(con, st.dim)
    total = bulk.node_count  # (counted in the store, an index of every node, unless the cache holds it)
    if total is None:
        (total,) = con.execute("SELECT count(*) FROM nodes").fetchone()
    source = StoreTreeSource(path, con, st.version, st.dim, shapes, fact_vecs, int(total), bulk)
    trees = {tid: TreeInfo(tid, family, label, rowid, source=source, root=root)
             for tid, rowid, family, label, _fanout, root, _next_id in rows}
    source.attach(trees)
    st.trees, st.nodes, st.tree_source = trees, LazyNodeMap(source), source
    source.serve(st)


def _fits(bulk: BulkRows, trees: dict[str, tuple[str, int | None]]) -> bool:
    """Whether `bulk` names the trees as the store's rows do (tree id -> (family, root)): a root
    vector for each tree with a root, leaves of entity and scene trees, cells of session trees."""
    return (set(bulk.roots) == {t for t, (_, root) in trees.items() if root is not None}
            and all(trees.get(t, ("session",))[0] != "session" for t in bulk.leaf_items)
            and all(trees.get(t, ("",))[0] == "session" for t in bulk.cell_leaves))
