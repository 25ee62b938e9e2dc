"""Reading one user's committed state from its database rows."""

from __future__ import annotations

import json
import sqlite3

import numpy as np

from memforest.state import EntityStat, NodeData, Scene, TreeInfo, UserState
from memforest.trees.memtree import MemTree
from memforest.trees.node import Node
from memforest.types import Cell, Fact, Occurrence, Session, Turn


def _vec(b: bytes) -> np.ndarray:
    """A stored vector, read in place (a read-only view of the row's bytes: vectors are replaced,
    never changed in place)."""
    return np.frombuffer(b, dtype=np.float32)


def _list(text: str) -> list:
    """A JSON list column (most are empty: a leaf's children, a fact without entities)."""
    return [] if text == "[]" else json.loads(text)


def read_state(con: sqlite3.Connection, user: str) -> UserState:
    """The committed state; its maps are plain dicts, made copy-on-write by `UserState.derive`."""
    meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
    st = UserState(user, version=int(meta["version"]), embedder=meta["embedder"], dim=int(meta["dim"]),
                   next_tree_rowid=int(meta["next_tree_rowid"]),
                   next_scene=int(meta["next_scene"]))
    sessions: dict[str, Session] = {}
    session_cells: dict[str, list[str]] = {}
    for sid, t, turns in con.execute("SELECT session_id, time, turns FROM sessions"):
        sessions[sid] = Session(sid, t, [Turn(r, c, tt) for r, c, tt in json.loads(turns)])
        session_cells[sid] = []
    cells: dict[str, Cell] = {}
    for row in con.execute("SELECT cell_id, session_id, idx, turn_lo, turn_hi, time, text FROM cells ORDER "
                           "BY session_id, idx"):
        cell = Cell(*row)
        cells[cell.id] = cell
        session_cells.setdefault(cell.session_id, []).append(cell.id)
    occ: dict[str, list[Occurrence]] = {}
    for row in con.execute("SELECT fact_id, session_id, cell_id, turn_lo, turn_hi, source_time, event_start, "
                           "event_end FROM occurrences ORDER BY fact_id, seq"):
        occ.setdefault(row[0], []).append(Occurrence(*row[1:]))
    facts: dict[str, Fact] = {}
    fact_vecs: dict[str, np.ndarray] = {}
    fact_blobs: dict[str, bytes] = {}  # the bytes the fact vectors are views of
    for row in con.execute("SELECT * FROM facts"):
        (fid, text, norm, origin, role, parts, ents, topics, time_text, es, ee, attr, domain, coll, emb) = row
        facts[fid] = Fact(fid, text, norm, origin, role, _list(parts), _list(ents),
                          _list(topics), time_text, es, ee, attr, domain, coll, occ.get(fid, []))
        fact_vecs[fid] = _vec(emb)
        fact_blobs[fid] = emb
    rows: dict[str, list[Node]] = {}
    nodes: dict[tuple[str, int], NodeData] = {}
    for row in con.execute("SELECT * FROM nodes"):
        tid, nid, item, emb = row[0], row[1], row[10], row[15]
        rows.setdefault(tid, []).append(Node(  # as `node_from_row` makes it
            int(nid), int(row[2]), row[3], _list(row[4]), (float(row[5]), str(row[6])),
            (float(row[7]), str(row[8])), int(row[9]), item, row[11], row[12]))
        # a fact's leaf carries the fact's own vector: one array for both, as the write path makes it
        vec = fact_vecs[item] if item is not None and fact_blobs.get(item) == emb else _vec(emb)
        nodes[(tid, nid)] = NodeData(row[13], row[14], vec)
    trees: dict[str, TreeInfo] = {}
    for tid, rowid, family, label, fanout, _root, next_id in con.execute("SELECT * FROM trees"):
        tree = MemTree.from_nodes(tid, fanout, rows.pop(tid, []), next_node_id=next_id, validate=False)
        trees[tid] = TreeInfo(tid, family, label, rowid, tree)
    entities: dict[str, EntityStat] = {}
    for label, tree_id in con.execute("SELECT label, tree_id FROM entities"):
        entities[label] = EntityStat(label, tree_id=tree_id)
    for label, fid in con.execute("SELECT label, fact_id FROM entity_facts"):
        entities[label].facts.add(fid)
    for label, sid, n in con.execute("SELECT label, session_id, facts FROM entity_sessions"):
        entities[label].sessions[sid] = n
    scenes: dict[str, Scene] = {}
    for sid, domain, total, size, t_last, tree_id in con.execute("SELECT * FROM scenes"):
        scenes[sid] = Scene(sid, domain, _vec(total), size, t_last, tree_id)
    st.sessions, st.session_cells, st.cells, st.facts, st.fact_vecs = (sessions, session_cells, cells, facts,
                                                                       fact_vecs)
    st.nodes, st.trees, st.entities, st.scenes = nodes, trees, entities, scenes
    st.pending_cells = {row[0] for row in con.execute("SELECT cell_id FROM pending_cells")}
    return st
