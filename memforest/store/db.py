"""One user's SQLite database: load the committed state, commit a ChangeSet atomically.

WAL mode with synchronous=FULL: a committed operation survives a crash; readers see the last
committed version and never wait for a writer. Readers change nothing, so a store they may read but
not write (its files or folder read-only) is readable; a write to it is refused, naming it read-only."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from itertools import compress
from operator import not_
from pathlib import Path
from typing import Any

import numpy as np

from memforest.errors import StoreError
from memforest.sqlite_file import create_atomically
from memforest.state import ChangeSet, EntityStat, NodeData, Scene, TreeInfo, UserState
from memforest.store.schema import DDL, MIGRATIONS, SCHEMA_VERSION
from memforest.store.validate import file_problem, identity_problem, schema_problems, store_error
from memforest.trees.memtree import MemTree
from memforest.types import Cell, Fact, Occurrence, Session, Turn


def _blob(v: np.ndarray) -> bytes:
    return np.asarray(v, dtype=np.float32).tobytes()


def _vec(b: bytes) -> np.ndarray:
    return np.frombuffer(b, dtype=np.float32).copy()


HELD_CACHE_KIB = 65536  # page cache of a held connection: a large store's upper B-tree pages stay in it
# write-ahead log pages at which the held connection's commits checkpoint (40 MB of 4 KiB pages): a
# large store's commit writes hundreds of pages, and a page written by many commits is copied once
HELD_CHECKPOINT_PAGES = 10_000
_SQLITE_READONLY, _SQLITE_CANTOPEN = 8, 14  # primary result codes: a file that may not be written, opened


class UserDB:
    """`con` (optional): a connection from `hold()` that this object's operations use instead of a
    new one each, so its page cache stays warm from one write to the next. It must be used by one
    writer at a time (the caller holds the user's write lock) and never by a reader."""

    def __init__(self, path: Path, con: sqlite3.Connection | None = None) -> None:
        self.path = Path(path)
        self._con = con

    def connect(self) -> AbstractContextManager[sqlite3.Connection]:
        """A connection to write with, in WAL mode with synchronous=FULL; SQLite failures surface as
        StoreErrors naming the database."""
        return self._connection(write=True)

    def read(self) -> AbstractContextManager[sqlite3.Connection]:
        """A connection that only reads: it leaves the store as it is, journal mode included, and
        reads a store it may not write (`open_reader`); failures as `connect`'s."""
        return self._connection(write=False)

    @contextmanager
    def _connection(self, write: bool) -> Iterator[sqlite3.Connection]:
        if self._con is not None:
            try:
                yield self._con
            except (sqlite3.Error, UnicodeDecodeError) as e:
                raise store_error(e, self.path) from e
            return
        try:
            con = sqlite3.connect(self.path, timeout=60.0, isolation_level=None) if write \
                else open_reader(self.path)
        except sqlite3.Error as e:
            raise store_error(e, self.path) from e
        try:
            if write:
                con.execute("PRAGMA journal_mode=WAL")
                con.execute("PRAGMA synchronous=FULL")
            yield con
        except (sqlite3.Error, UnicodeDecodeError) as e:  # text that is not UTF-8 is damage too
            raise store_error(e, self.path) from e
        finally:
            con.close()

    def validate(self, embedder: str | None = None, dim: int | None = None) -> int:
        """Refuse, naming the path, a file that is not a sound database of this schema version or
        (when given: a writer's check) was built with another embedder or cannot be written; return its
        committed version, read on the same connection. A store of an older schema version with a known
        migration is migrated first, in one transaction; nothing else is created or repaired."""
        problem = file_problem(self.path)
        version = 0
        if problem is None:
            with self.read() as con:
                if _migration_due(con):
                    with self.connect() as writer:
                        _migrate(writer)
                problems = schema_problems(con, self.path)
                if not problems and embedder is not None and dim is not None:
                    problems = [p for p in [identity_problem(con, self.path, embedder, dim)] if p]
                if not problems:
                    row = con.execute("SELECT value FROM meta WHERE key='version'").fetchone()
                    version = int(row[0]) if row else 0
            problem = problems[0] if problems else None
        if problem is not None:
            raise StoreError(problem)
        if embedder is not None:
            self._check_writable()
        return version

    def _check_writable(self) -> None:
        """A StoreError now, before the work of a write, when the store cannot be written (read-only):
        SQLite finds a read-only file at a transaction's first write, here one that matches no row."""
        with self.connect() as con:
            con.execute("BEGIN IMMEDIATE")
            try:
                con.execute("DELETE FROM meta WHERE 0")
            finally:
                _rollback(con)

    def create(self, embedder: str, dim: int) -> bool:
        """Create the database if it does not exist, atomically (a complete database appears at the
        path, or none); check an existing one. Returns whether this call created it."""
        created = False
        if not self.path.exists():
            created = _create_file(self.path, embedder, dim)
        self.validate(embedder, dim)
        return created

    def hold(self) -> sqlite3.Connection | None:
        """A connection kept open by the caller, idle between the writes it serves (`UserDB(path,
        con)`): while one is open, closing the others does not checkpoint the write-ahead log into the
        database on every operation; its own commits checkpoint it every `HELD_CHECKPOINT_PAGES`
        pages, so a page written by many commits is copied once. Idle, it holds only the shared lock of
        every open connection in WAL mode, which keeps other processes from deleting the log (so nothing
        in this process may open and close the database file outside SQLite: `file_problem`). None when
        the database cannot be opened (the next operation reports why)."""
        try:
            con = sqlite3.connect(self.path, timeout=60.0, isolation_level=None, check_same_thread=False)
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("PRAGMA synchronous=FULL")
            con.execute(f"PRAGMA cache_size=-{HELD_CACHE_KIB}")
            con.execute(f"PRAGMA wal_autocheckpoint={HELD_CHECKPOINT_PAGES}")
            con.execute("SELECT value FROM meta WHERE key='version'").fetchone()
            return con
        except sqlite3.Error:
            return None

    def file_id(self) -> tuple[int, int] | None:
        """(device, inode) of the database file (None when it is missing)."""
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_dev, st.st_ino

    def discard_if_empty(self) -> bool:
        """Remove a database no operation has committed to (a failed first write); True if removed."""
        if self.version() != 0:
            return False
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)
        return True

    def version(self) -> int:
        with self.read() as con:
            row = con.execute("SELECT value FROM meta WHERE key='version'").fetchone()
        return int(row[0]) if row else 0

    def load(self, user: str) -> UserState:
        """The committed state, read in one snapshot; rows that do not fit together are a StoreError."""
        with self.read() as con:
            con.execute("BEGIN")
            try:
                state = _read_state(con, user)
            except (KeyError, ValueError, TypeError, IndexError, AttributeError) as e:
                raise StoreError(f"{self.path} is damaged: its rows do not fit together ({type(e).__name__}: "
                                 f"{' '.join(str(e).split())[:120]}); run `memforest check`") from e
            finally:
                _rollback(con)  # a read-only transaction: nothing to keep
        state.derive()
        return state

    def facts_of_session(self, session_id: str) -> list[str]:
        """Ids of the facts with an occurrence in `session_id` (committed rows)."""
        with self.read() as con:
            rows = con.execute("SELECT DISTINCT fact_id FROM occurrences WHERE session_id=?", (session_id,))
            return sorted(r[0] for r in rows)

    def commit(self, state: UserState, ch: ChangeSet, expected_version: int,
               base: UserState | None = None) -> int:
        """Write `ch` from `state` in one transaction; return the new version. `base` (optional) is
        the committed state `state` was forked from: rows it shares are not written again."""
        with self.connect() as con:
            con.execute("BEGIN IMMEDIATE")
            try:
                current = int(con.execute("SELECT value FROM meta WHERE key='version'").fetchone()[0])
                if current != expected_version:
                    raise StoreError(
                        f"user {state.user}: store changed underneath (version {current}, expected "
                        f"{expected_version}); retry the operation"
                    )
                _write_changes(con, state, ch, base)
                version = current + 1
                for k, v in (("version", version), ("next_tree_rowid", state.next_tree_rowid),
                             ("next_scene", state.next_scene)):
                    con.execute("UPDATE meta SET value=? WHERE key=?", (str(v), k))
                con.execute("INSERT INTO operations VALUES (?, ?, ?, ?)",
                            (version, ch.operation.get("kind", "?"), json.dumps(ch.operation), time.time()))
                con.execute("COMMIT")
            except BaseException:
                _rollback(con)
                raise
        state.version = version
        return version


def _rollback(con: sqlite3.Connection) -> None:
    """Roll back if a transaction is still open: SQLite has already rolled back after some errors (a
    full disk), and a second failure must not hide the first."""
    if con.in_transaction:
        with suppress(sqlite3.Error):
            con.execute("ROLLBACK")


def open_reader(path: Path, strict: bool = False) -> sqlite3.Connection:
    """A connection that only reads (`strict`: opened with `mode=ro`, so SQLite itself refuses any
    write, as a check of a store that may be damaged wants). SQLite opens a database file it may not
    write read-only by itself, but reading a store in WAL mode takes its WAL index (the `-shm` file),
    which the first reader creates beside the database: in a read-only folder, with no connection
    holding the store open (so neither index nor log exists), that fails. The database file then
    holds every commit, and it is read as immutable, without the index. A write-ahead log left with
    commits but without its index (a writer killed) cannot be read that way: that is refused."""
    con = sqlite3.connect(_uri(path, "mode=ro") if strict else path, uri=strict, timeout=60.0,
                          isolation_level=None)
    try:
        con.execute("PRAGMA schema_version").fetchone()  # opens the database and its WAL index
        return con
    except sqlite3.Error as e:
        con.close()
        code = _primary_code(e)
        if code not in (_SQLITE_READONLY, _SQLITE_CANTOPEN):
            raise
        wal, index = Path(f"{path}-wal"), Path(f"{path}-shm")
        if _size(wal) and not index.exists():
            raise StoreError(f"{path} is read-only and its write-ahead log {wal.name} holds "
                             "commits that cannot be read without write access to its folder; nothing was "
                             "read or written: open the store once with write access") from None
        if code != _SQLITE_READONLY:
            raise
    return sqlite3.connect(_uri(path, "mode=ro&immutable=1"), uri=True, timeout=60.0, isolation_level=None)


def _uri(path: Path, query: str) -> str:
    return f"{Path(path).absolute().as_uri()}?{query}"


def _primary_code(e: sqlite3.Error) -> int | None:
    """SQLite's primary result code of `e` (Python 3.11 and later carry it; before, from the message)."""
    code = getattr(e, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF
    text = str(e)
    return _SQLITE_READONLY if "readonly" in text else _SQLITE_CANTOPEN if "unable to open" in text else None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _create_file(path: Path, embedder: str, dim: int) -> bool:
    """Build the schema in a private file, then link it into place unless another writer was first."""

    def build(con: sqlite3.Connection) -> None:
        con.execute("BEGIN IMMEDIATE")
        for statement in DDL.split(";"):
            if statement.strip():
                con.execute(statement)
        for k, v in {"schema_version": SCHEMA_VERSION, "embedder": embedder, "dim": dim,
                     "version": 0, "next_tree_rowid": 1, "next_scene": 1}.items():
            con.execute("INSERT INTO meta VALUES (?, ?)", (k, str(v)))
        con.execute("COMMIT")

    try:
        return create_atomically(path, build)
    except sqlite3.Error as e:
        raise store_error(e, path) from e


def _read_state(con: sqlite3.Connection, user: str) -> UserState:
    meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
    st = UserState(user, version=int(meta["version"]), embedder=meta["embedder"], dim=int(meta["dim"]),
                   next_tree_rowid=int(meta["next_tree_rowid"]),
                   next_scene=int(meta["next_scene"]))
    for sid, t, turns in con.execute("SELECT session_id, time, turns FROM sessions"):
        st.sessions[sid] = Session(sid, t, [Turn(r, c, tt) for r, c, tt in json.loads(turns)])
        st.session_cells[sid] = []
    for row in con.execute("SELECT cell_id, session_id, idx, turn_lo, turn_hi, time, text FROM cells ORDER "
                           "BY session_id, idx"):
        cell = Cell(*row)
        st.cells[cell.id] = cell
        st.session_cells.setdefault(cell.session_id, []).append(cell.id)
    occ: dict[str, list[Occurrence]] = {}
    for row in con.execute("SELECT fact_id, session_id, cell_id, turn_lo, turn_hi, source_time, event_start, "
                           "event_end FROM occurrences ORDER BY fact_id, seq"):
        occ.setdefault(row[0], []).append(Occurrence(*row[1:]))
    for row in con.execute("SELECT * FROM facts"):
        (fid, text, norm, origin, role, parts, ents, topics, time_text, es, ee, attr, domain, coll, emb) = row
        st.facts[fid] = Fact(fid, text, norm, origin, role, json.loads(parts), json.loads(ents),
                             json.loads(topics), time_text, es, ee, attr, domain, coll, occ.get(fid, []))
        st.fact_vecs[fid] = _vec(emb)
    rows: dict[str, list[dict]] = {}
    for row in con.execute("SELECT * FROM nodes"):
        tid, nid = row[0], row[1]
        rows.setdefault(tid, []).append({
            "id": nid, "level": row[2], "parent": row[3], "children": json.loads(row[4]), "t_lo": row[5],
            "item_lo": row[6], "t_hi": row[7], "item_hi": row[8], "count": row[9], "item": row[10],
            "prev": row[11], "next": row[12]})
        st.nodes[(tid, nid)] = NodeData(row[13], row[14], _vec(row[15]))
    for tid, rowid, family, label, fanout, _root, next_id in con.execute("SELECT * FROM trees"):
        tree = MemTree.from_rows(tid, fanout, rows.get(tid, []), next_node_id=next_id, validate=False)
        st.trees[tid] = TreeInfo(tid, family, label, rowid, tree)
    for label, tree_id in con.execute("SELECT label, tree_id FROM entities"):
        st.entities[label] = EntityStat(label, tree_id=tree_id)
    for label, fid in con.execute("SELECT label, fact_id FROM entity_facts"):
        st.entities[label].facts.add(fid)
    for label, sid, n in con.execute("SELECT label, session_id, facts FROM entity_sessions"):
        st.entities[label].sessions[sid] = n
    for sid, domain, total, size, t_last, tree_id in con.execute("SELECT * FROM scenes"):
        st.scenes[sid] = Scene(sid, domain, _vec(total), size, t_last, tree_id)
    st.pending_cells = {row[0] for row in con.execute("SELECT cell_id FROM pending_cells")}
    return st


def _write_changes(con: sqlite3.Connection, st: UserState, ch: ChangeSet, base: UserState | None) -> None:
    """Every key the ChangeSet names is deleted, then written again if it exists in the state: a
    key removed and re-created by one operation (a corrected session) ends up as the state says.
    A fact whose occurrences changed by removals and appends (against `base`) is edited in place.
    With `base`, a key it does not hold has no rows to delete (the store holds `base`, whose version
    the caller checked), so new rows cost their inserts only."""
    for sid in ch.deleted_sessions | ch.sessions:
        if base is None or sid in base.sessions:
            con.execute("DELETE FROM sessions WHERE session_id=?", (sid,))
            con.execute("DELETE FROM cells WHERE session_id=?", (sid,))
        if sid in st.sessions:
            _write_session(con, st, sid)
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


def _schema_version(con: sqlite3.Connection) -> int | None:
    try:
        row = con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    except sqlite3.Error:
        return None
    return int(row[0]) if row and str(row[0]).isdigit() else None


def _migration_due(con: sqlite3.Connection) -> bool:
    """Whether the store is of an older schema version with a known migration."""
    start = _schema_version(con)
    return start is not None and start < SCHEMA_VERSION and start in MIGRATIONS


def _migrate(con: sqlite3.Connection) -> None:
    """Bring a store of an older schema version up to this one, in one transaction (a no-op for a
    current store; one that is damaged or of an unknown version is left for validation to refuse)."""
    if not _migration_due(con):
        return
    con.execute("BEGIN IMMEDIATE")
    try:
        v = _schema_version(con)  # another process may have migrated it meanwhile
        while v is not None and v < SCHEMA_VERSION and v in MIGRATIONS:
            for statement in MIGRATIONS[v]:
                con.execute(statement)
            v += 1
            con.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(v),))
        con.execute("COMMIT")
    except BaseException:
        _rollback(con)
        raise


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
