"""Writing a ChangeSet into one user's database, inside the caller's transaction: each key it names is
deleted and written again as the state holds it, or, against the committed state it was forked from,
edited in place."""

from __future__ import annotations

import json
import sqlite3
from itertools import compress
from operator import not_
from typing import Any

import numpy as np

from memforest.state import ChangeSet, UserState
from memforest.types import Occurrence


def _blob(v: np.ndarray) -> bytes:
    return np.asarray(v, dtype=np.float32).tobytes()


def read_for_commit(base: UserState, ch: ChangeSet, st: UserState | None = None) -> None:
    """Read into `base` (the committed version an operation forked, loaded from the store) what the
    operation's commit replaces in the store: every tree it changes or drops with the data of each
    node it changes or drops (of a tree it drops, all), the turns and cell texts of every session it
    replaces or deletes, the members of every entity label and the fields and occurrences of every
    fact it changes or drops, but the occurrences of a fact `st` (the version committed) only appends
    to without reading them (`Fact.appended_since`: the rows `base` reads stay as they are, and a
    loaded fact reads no row appended after it: `StoreTreeSource.last_seqs`). What some version
    still has to read from the store is then what no commit of this process has changed
    (`memforest.store.read_snapshot`). `UserDB.commit` reads it before it writes; a second call
    reads nothing."""
    source = base.tree_source
    if source is None:
        return
    for tid in sorted(ch.trees | ch.deleted_trees | {t for t, _ in ch.nodes | ch.deleted_nodes}):
        info = base.trees.get(tid)
        if info is not None:
            _ = info.tree
    for sid in sorted(ch.sessions | ch.deleted_sessions):
        session = base.sessions.get(sid)
        if session is not None:
            _ = session.turns
        for cid in base.session_cells.get(sid, ()):
            cell = base.cells.get(cid)
            if cell is not None:
                _ = cell.text
    for label in sorted(ch.entities | ch.deleted_entities):
        stat = base.entities.get(label)
        if stat is not None:
            _ = stat.facts  # (and its session counts: read together)
    if source.loaded_facts is not None:  # (made as loaded, and their texts looked up, before they change)
        source.loaded_facts.remember(sorted(ch.facts | ch.deleted_facts))
    for fid in sorted(ch.facts | ch.deleted_facts):
        fact = base.facts.get(fid)
        if fact is None:
            continue
        new = st.facts.get(fid) if st is not None else None
        if new is None or new.appended_since(fact) is None:
            _ = fact.occurrences
        _ = fact.text  # (every field of `FACT_DETAIL`, read together)
    for tid in sorted(ch.deleted_trees):
        source.read_data(tid)
    for node in sorted(ch.nodes | ch.deleted_nodes):
        base.nodes.get(node)


def write_changes(con: sqlite3.Connection, st: UserState, ch: ChangeSet, base: UserState | None) -> None:
    """Every key the ChangeSet names is deleted, then written again if it exists in the state: a
    key removed and re-created by one operation (a corrected session) ends up as the state says.
    A fact whose occurrences changed by removals and appends (against `base`) is edited in place.
    With `base`, a key it does not hold has no rows to delete (the store holds `base`, whose version
    the caller checked), so new rows cost their inserts only."""
    for sid in ch.deleted_sessions | ch.sessions:
        if base is None or sid in base.sessions:
            con.execute("DELETE FROM sessions WHERE session_id=?", (sid,))
            con.execute("DELETE FROM cell_sentences WHERE cell_id IN (SELECT cell_id FROM cells WHERE "
                        "session_id=?)", (sid,))
            con.execute("DELETE FROM cells WHERE session_id=?", (sid,))
        if sid in st.sessions:
            _write_session(con, st, sid)
    con.executemany("INSERT OR REPLACE INTO cell_sentences VALUES (?, ?, ?)", [
        (cid, s.words, None if s.vectors is None else _blob(s.vectors))
        for cid, s in sorted(ch.sentences.items()) if cid in st.cells])
    for fid in ch.deleted_facts | ch.facts:
        edit = _occurrence_edit(base, st, fid)
        if edit is not None and base is not None and _edit_fact(con, st, base, fid, *edit):
            continue
        if base is None or fid in base.facts:
            con.execute("DELETE FROM facts WHERE fact_id=?", (fid,))
            con.execute("DELETE FROM occurrences WHERE fact_id=?", (fid,))
        if fid in st.facts:
            _write_fact(con, st, fid)
    for tid in ch.deleted_trees | ch.trees:
        t = st.trees.get(tid)
        tree_row = (None if t is None
                    else (t.rowid, t.family, t.label, t.tree.fanout, t.tree.root, t.tree.next_node_id))
        if tree_row is not None and base is not None and tid in base.trees and tid not in ch.deleted_trees \
                and _update_row(con, "trees", "tree_id", _TREE_COLUMNS, tid, tree_row):
            continue
        if base is None or tid in base.trees:
            if tid in ch.deleted_trees:
                con.execute("DELETE FROM nodes WHERE tree_id=?", (tid,))
            con.execute("DELETE FROM trees WHERE tree_id=?", (tid,))
        if tree_row is not None:
            con.execute("INSERT INTO trees VALUES (?, ?, ?, ?, ?, ?, ?)", (tid, *tree_row))
    # a node the store holds (in `base`, its tree not dropped by this operation) is updated in place,
    # which leaves its key's index entry alone; a new one is inserted; a removed one deleted
    held = base.nodes if base is not None else {}
    updates, inserts = [], []
    for tid, nid in sorted(ch.nodes):
        if tid in st.trees and nid in st.trees[tid].tree.nodes:
            n, d = st.trees[tid].tree.nodes[nid], st.nodes[(tid, nid)]
            row = (n.level, n.parent, json.dumps(n.children), n.key_lo[0], n.key_lo[1], n.key_hi[0],
                   n.key_hi[1], n.count, n.item, n.prev, n.next, d.text, d.mode, _blob(d.embedding))
            if (tid, nid) in held and tid not in ch.deleted_trees:
                updates.append((*row, tid, nid))
            else:
                inserts.append((tid, nid, *row))
    written = {(u[-2], u[-1]) for u in updates}
    stale = ch.deleted_nodes | ch.nodes
    con.executemany("DELETE FROM nodes WHERE tree_id=? AND node_id=?",
                    sorted(k for k in stale if k not in written and (base is None or k in held)))
    cur = con.executemany(
        "UPDATE nodes SET level=?, parent=?, children=?, t_lo=?, item_lo=?, t_hi=?, item_hi=?, "
        "count=?, item=?, prev=?, next=?, text=?, mode=?, embedding=? WHERE tree_id=? AND node_id=?", updates)
    if updates and cur.rowcount != len(updates):  # the store lacks a row `base` has: write them whole
        inserts += [(u[-2], u[-1], *u[:-2]) for u in updates]
        verb = "INSERT OR REPLACE"
    else:
        verb = "INSERT"
    con.executemany(f"{verb} INTO nodes VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", inserts)
    for label in sorted(ch.deleted_entities | ch.entities):
        _write_entity(con, st, label, base)
    for sid in ch.deleted_scenes | ch.scenes:
        sc = st.scenes.get(sid)
        scene = None if sc is None else (sc.domain, _blob(sc.total), sc.size, sc.t_last, sc.tree_id)
        if scene is not None and base is not None and sid in base.scenes and sid not in ch.deleted_scenes \
                and _update_row(con, "scenes", "scene_id", _SCENE_COLUMNS, sid, scene):
            continue
        if base is None or sid in base.scenes:
            con.execute("DELETE FROM scenes WHERE scene_id=?", (sid,))
        if scene is not None:
            con.execute("INSERT INTO scenes VALUES (?, ?, ?, ?, ?, ?)", (sid, *scene))
    if ch.pending_cells:
        con.execute("DELETE FROM pending_cells")
        con.executemany("INSERT INTO pending_cells VALUES (?)", [(c,) for c in sorted(st.pending_cells)])


def _write_entity(con: sqlite3.Connection, st: UserState, label: str, base: UserState | None) -> None:
    """An entity's row and its member rows: for a copy of its committed version in `base`, only the
    facts and session counts the copy changed (`EntityStat.edited`); otherwise all of them."""
    new, old = st.entities.get(label), base.entities.get(label) if base is not None else None
    if new is not None and new is old:  # unchanged
        return
    if new is None or old is None or new.edited is None:
        for table in ("entities", "entity_facts", "entity_sessions"):
            con.execute(f"DELETE FROM {table} WHERE label=?", (label,))
        if new is None:
            return
        facts, sessions = sorted(new.facts), sorted(new.sessions)
    else:
        facts, sessions = sorted(new.edited[0]), sorted(new.edited[1])
    con.execute("INSERT OR REPLACE INTO entities VALUES (?, ?)", (label, new.tree_id))
    con.executemany("DELETE FROM entity_facts WHERE label=? AND fact_id=?", [(label, f) for f in facts])
    con.executemany("INSERT INTO entity_facts VALUES (?, ?)", [(label, f) for f in facts if f in new.facts])
    con.executemany("DELETE FROM entity_sessions WHERE label=? AND session_id=?",
                    [(label, s) for s in sessions])
    con.executemany("INSERT INTO entity_sessions VALUES (?, ?, ?)",
                    [(label, s, new.sessions[s]) for s in sessions if s in new.sessions])


def _write_session(con: sqlite3.Connection, st: UserState, sid: str) -> None:
    s = st.sessions[sid]
    turns = json.dumps([[t.role, t.content, t.time] for t in s.turns], ensure_ascii=False)
    con.execute("INSERT INTO sessions VALUES (?, ?, ?, ?)", (sid, s.time, turns, st.version + 1))
    con.executemany("INSERT INTO cells VALUES (?, ?, ?, ?, ?, ?, ?)", [
        (c.id, c.session_id, c.index, c.turn_lo, c.turn_hi, c.time, c.text)
        for c in (st.cells[cid] for cid in st.session_cells[sid])])


def _occurrence_edit(base: UserState | None, st: UserState, fid: str
                     ) -> tuple[list[Occurrence], list[Occurrence]] | None:
    """(removed, appended) when fact `fid`'s occurrences in `st` are its committed ones (in `base`)
    with some removed, order kept, and some appended; None when it must be written whole."""
    old = base.facts.get(fid) if base is not None else None
    new = st.facts.get(fid)
    if old is None or new is None:
        return None
    appended = new.appended_since(old)
    if appended is not None:  # said again, neither version's occurrences read (`Fact.appended`)
        return [], appended
    was, now = old.occurrences, new.occurrences
    if now[: len(was)] == was:  # said again: the usual edit, decided in one list comparison
        return [], now[len(was):]
    # a session deleted or corrected: past the lists' common prefix, the run of that session's
    # occurrences is gone, the rest kept and any new ones appended. Slice comparisons decide it
    # without touching the run's neighbours one by one, where the general case below spends a set of
    # every occurrence (a fact said in thousands of sessions loses one per deleted session)
    p = _common_prefix(was, now)
    q = p
    while q < len(was) and was[q].session_id == was[p].session_id:
        q += 1
    rest = len(was) - q
    if was[q:] == now[p : p + rest]:
        return was[p:q], now[p + rest:]
    present = set(map(id, now))  # kept occurrences are the committed objects themselves
    flags = list(map(present.__contains__, map(id, was)))
    kept = list(compress(was, flags))
    if now[: len(kept)] != kept:
        return None
    return list(compress(was, map(not_, flags))), now[len(kept):]


def _common_prefix(a: list[Any], b: list[Any]) -> int:
    """How many leading items `a` and `b` share: blocks of doubling size compared as slices, then the
    first unequal block halved down to its first unequal item."""
    n = min(len(a), len(b))
    lo, step = 0, 32
    while lo < n:
        hi = min(lo + step, n)
        if a[lo:hi] != b[lo:hi]:
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if a[lo:mid] == b[lo:mid]:
                    lo = mid
                else:
                    hi = mid
            return lo
        lo, step = hi, step * 2
    return n


def _edit_fact(con: sqlite3.Connection, st: UserState, base: UserState, fid: str, removed: list[Occurrence],
               appended: list[Occurrence]) -> bool:
    """Apply an occurrence edit in place: the fact's row (updated, only if it changed from `base`),
    its removed occurrence rows found through their session, the appended ones after its last
    sequence number. False when the rows deleted are not exactly the removed occurrences (the store
    does not hold what `base` says): the caller then writes the fact whole."""
    cur = con.executemany(
        "DELETE FROM occurrences INDEXED BY occurrences_by_session WHERE session_id=? AND fact_id=? "
        "AND cell_id=? AND turn_lo=? AND turn_hi=?",
        [(o.session_id, fid, o.cell_id, o.turn_lo, o.turn_hi) for o in removed])
    if removed and cur.rowcount != len(removed):
        return False
    row = _fact_row(st, fid)
    if (row != _fact_row(base, fid)
            and not _update_row(con, "facts", "fact_id", _FACT_COLUMNS[1:], fid, row[1:])):
        return False
    (last,) = con.execute("SELECT MAX(seq) FROM occurrences WHERE fact_id=?", (fid,)).fetchone()
    _insert_occurrences(con, fid, appended, (last if last is not None else -1) + 1)
    return True


_TREE_COLUMNS = ("rowid_", "family", "label", "fanout", "root", "next_node_id")
_SCENE_COLUMNS = ("domain", "total", "size", "t_last", "tree_id")


def _update_row(con: sqlite3.Connection, table: str, key_column: str, columns: tuple[str, ...], key: str,
                values: tuple[Any, ...]) -> bool:
    """Rewrite the row of `key` in place (its keys' index entries stay); False when there is none."""
    sets = ", ".join(f"{c}=?" for c in columns)
    return con.execute(f"UPDATE {table} SET {sets} WHERE {key_column}=?", (*values, key)).rowcount == 1


_FACT_COLUMNS = ("fact_id", "text", "norm", "origin", "role", "participants", "entities", "topics",
                 "time_text", "event_start", "event_end", "attribute", "domain", "collection", "embedding")


def _fact_row(st: UserState, fid: str) -> tuple[Any, ...]:
    f = st.facts[fid]
    return (f.id, f.text, f.norm, f.origin, f.role, json.dumps(f.participants), json.dumps(f.entities),
            json.dumps(f.topics), f.time_text, f.event_start, f.event_end, f.attribute, f.domain,
            f.collection, _blob(st.fact_vecs[fid]))


def _write_fact(con: sqlite3.Connection, st: UserState, fid: str) -> None:
    """The fact's row and all its occurrences."""
    con.execute("INSERT INTO facts VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", _fact_row(st, fid))
    _insert_occurrences(con, fid, st.facts[fid].occurrences, 0)


def _insert_occurrences(con: sqlite3.Connection, fid: str, occurrences: list[Occurrence], seq: int) -> None:
    """Rows of `occurrences` numbered from `seq` on (the numbers order them; gaps are allowed)."""
    con.executemany("INSERT INTO occurrences VALUES (?,?,?,?,?,?,?,?,?)", [
        (fid, i, o.session_id, o.cell_id, o.turn_lo, o.turn_hi, o.source_time, o.event_start, o.event_end)
        for i, o in enumerate(occurrences, seq)])
