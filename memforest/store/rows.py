"""The store's rows as the memory's records: a row's columns parsed (a node's place in its tree
and its data, a fact's fields, a stored vector), and the readers that take many rows in one pass
(every fact's occurrences, the fields of many facts, what the indexes need of the trees at an open)."""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import Callable, Iterable, Mapping

import numpy as np

from memforest.resident.ondemand import BulkRows, NodeData
from memforest.trees.node import Node, make_node
from memforest.types import FACT_DETAIL, Fact, Occurrence


def vec_of(b: bytes) -> np.ndarray:
    """A stored vector, read in place (a read-only view of the row's bytes: vectors are replaced,
    never changed in place)."""
    return np.frombuffer(b, dtype=np.float32)


def json_list(text: str) -> list:
    """A JSON list column (most are empty: a leaf's children, a fact without entities)."""
    return [] if text == "[]" else json.loads(text)


def int_list(text: str) -> list[int]:
    """A JSON list of integers (a node's children), parsed without the JSON decoder; a ValueError for
    anything else."""
    if text == "[]":  # a leaf's
        return []
    if not (text.startswith("[") and text.endswith("]")):
        raise ValueError(f"not a list of node ids: {text[:40]!r}")
    return [int(x) for x in text[1:-1].split(",")]


# the columns of a node's place in its tree (`node_of_structure`), and of its data (`data_of_row`)
STRUCTURE = "node_id, level, parent, children, t_lo, item_lo, t_hi, item_hi, count, item, prev, next"
DATA = "node_id, item, text, mode, embedding"


def node_of_structure(row: tuple, items: Mapping[str, str] | None = None) -> Node:
    """A node made from its `STRUCTURE` columns (as `node_from_row` makes it); a leaf's item is the
    string `items` holds for it, when it holds one (the memory's own copy of the id)."""
    item = row[9] if items is None or row[9] is None else items.get(row[9], row[9])
    return make_node(int(row[0]), int(row[1]), row[2], int_list(row[3]), float(row[4]), str(row[5]),
                     float(row[6]), str(row[7]), int(row[8]), item, row[10], row[11])


def data_of_row(item: str | None, text: str, mode: str, emb: bytes,
                fact_vecs: Mapping[str, np.ndarray]) -> NodeData:
    """A node's data from its columns. A fact's leaf carries the fact's own vector (one array for
    both, as the write path makes it) when its bytes are the fact's."""
    vec = fact_vecs.get(item) if item is not None else None
    if vec is None or vec.tobytes() != emb:
        vec = vec_of(emb)
    return NodeData(text, sys.intern(mode), vec)  # a few modes, one string each


def node_of_row(row: tuple, fact_vecs: Mapping[str, np.ndarray]) -> tuple[Node, NodeData]:
    """A whole `nodes` row as its tree node and its data."""
    return node_of_structure(row[1:13]), data_of_row(row[10], row[13], row[14], row[15], fact_vecs)


FACT_DETAIL_COLUMNS = ", ".join(FACT_DETAIL)


def detail_of_row(row: tuple) -> tuple:
    """The values of `FACT_DETAIL` from a row of its columns (the JSON lists parsed)."""
    text, origin, role, parts, ents, topics, *rest = row
    return (text, origin, role, json_list(parts), json_list(ents), json_list(topics), *rest)


# what one read of each kind fills (`OnDemand.take`): a fact's occurrences; every field of `FACT_DETAIL`
_OCCURRENCES, _DETAIL = Fact.occurrences, Fact.text


def read_facts(con: sqlite3.Connection, facts: Iterable[Fact], last_seqs: Mapping[str, int] | None = None
               ) -> None:
    """Fill in the fields and occurrences `facts` have not read from the store's rows (a full pass
    over each table that some fact needs: these are many facts). A fact of `last_seqs` takes its rows
    up to that sequence number only (later ones were appended by later versions); an `appended` copy
    reads through its root afterwards."""
    facts = list(facts)
    wanted = {f.id: f for f in facts if not f.is_read and f.appended is None}
    if wanted:
        if not all(map(_OCCURRENCES.is_read, wanted.values())):
            pool: dict[str, str] = {}
            occ = read_occurrences(con, pool.setdefault, last_seqs)
            for fid, unread in wanted.items():
                _OCCURRENCES.take(unread, occ.get(fid, []))
        for fid, *row in con.execute(f"SELECT fact_id, {FACT_DETAIL_COLUMNS} FROM facts"):
            fact = wanted.get(fid)
            if fact is not None and not _DETAIL.is_read(fact):
                _DETAIL.take(fact, detail_of_row(row))
    for fact in facts:
        if fact.appended is not None:
            _ = fact.occurrences, fact.text


def read_occurrences(con: sqlite3.Connection, same: Callable[[str, str], str],
                     last_seqs: Mapping[str, int] | None = None) -> dict[str, list[Occurrence]]:
    """Every fact's occurrences in `seq` order, their session and cell ids shared through `same`;
    of a fact of `last_seqs`, those up to that sequence number."""
    occ: dict[str, list[Occurrence]] = {}
    unordered: set[str] = set()  # facts whose occurrences came out of `seq` order
    last: dict[str, int] = {}
    bound = last_seqs or {}
    for fid, seq, sid, cid, lo, hi, t, es, ee in con.execute(
            "SELECT fact_id, seq, session_id, cell_id, turn_lo, turn_hi, source_time, event_start, event_end "
            "FROM occurrences"):  # table order: no sort by key
        if bound and seq > bound.get(fid, seq):
            continue
        if last.get(fid, -1) > seq:
            unordered.add(fid)
        last[fid] = seq
        occ.setdefault(fid, []).append(Occurrence(same(sid, sid), same(cid, cid), lo, hi, t, es, ee))
    if unordered:  # as `ORDER BY fact_id, seq` gives them
        ordered = con.execute("SELECT fact_id, seq, session_id, cell_id, turn_lo, turn_hi, source_time, "
                              "event_start, event_end FROM occurrences WHERE fact_id IN (SELECT value FROM "
                              "json_each(?)) ORDER BY fact_id, seq", (json.dumps(sorted(unordered)),))
        for fid in unordered:
            occ[fid] = []
        for fid, seq, *row in ordered:
            if seq <= bound.get(fid, seq):
                occ[fid].append(Occurrence(*row))
    return occ


def read_bulk(con: sqlite3.Connection, dim: int) -> BulkRows:
    """`BulkRows` of the version `con`'s transaction reads, in one pass over the nodes. A vector of
    another width is a ValueError."""
    out = BulkRows()
    width = 4 * dim
    leaf_items: dict[str, list[str]] = {}
    cell_leaves: dict[str, list[tuple[int, str, np.ndarray]]] = {}
    out.leaf_items, out.cell_leaves, roots = leaf_items, cell_leaves, out.roots
    for tid, nid, item, session, root, emb in con.execute(
            "SELECT n.tree_id, n.node_id, n.item, t.family = 'session', n.node_id = t.root, "
            "CASE WHEN (t.family = 'session' AND n.level = 0) OR n.node_id = t.root THEN n.embedding END "
            "FROM nodes n JOIN trees t ON t.tree_id = n.tree_id WHERE n.level = 0 OR n.node_id = t.root"):
        if emb is not None and len(emb) != width:
            raise ValueError(f"a node vector of tree {tid!r} has {len(emb)} bytes, not {dim}-d")
        if root:
            roots[tid] = vec_of(emb)
        if item is None:
            continue
        if session:
            cell_leaves.setdefault(tid, []).append((int(nid), item, vec_of(emb)))
        else:
            leaf_items.setdefault(tid, []).append(item)
    return out
