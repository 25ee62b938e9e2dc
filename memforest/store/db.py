"""One user's SQLite database: load the committed state, commit a ChangeSet atomically.

WAL mode with synchronous=FULL: a committed operation survives a crash; readers see the last
committed version and never wait for a writer. Readers change nothing, so a store they may read but
not write (its files or folder read-only) is readable; a write to it is refused, naming it read-only."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from memforest.errors import StoreError
from memforest.resident.ondemand import BulkRows
from memforest.resident.vector_table import SavedPartitions
from memforest.state import ChangeSet, UserState
from memforest.store.commit import read_for_commit, write_changes
from memforest.store.connection import open_reader, rollback
from memforest.store.load import VectorWidthError, read_state
from memforest.store.migrate import create_file, migrate, migration_due
from memforest.store.validate import file_problem, identity_problem, schema_problems, store_error

# The connection helpers live in `connection`, reading the state in `load`, writing a ChangeSet in
# `commit`, creating and migrating the schema in `migrate`; `open_reader` is importable from here as before.
__all__ = ["UserDB", "open_reader"]


# a committed version -> the partitions of its vector tables by table name, from a cache (or None)
SavedFor = Callable[[int], Mapping[str, SavedPartitions] | None]

HELD_CACHE_KIB = 65536  # page cache of a held connection: a large store's upper B-tree pages stay in it
# write-ahead log pages at which the held connection's commits checkpoint (40 MB of 4 KiB pages): a
# large store's commit writes hundreds of pages, and a page written by many commits is copied once
HELD_CHECKPOINT_PAGES = 10_000


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
                if migration_due(con):
                    with self.connect() as writer:
                        migrate(writer)
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
                rollback(con)

    def create(self, embedder: str, dim: int) -> bool:
        """Create the database if it does not exist, atomically (a complete database appears at the
        path, or none); check an existing one. Returns whether this call created it."""
        created = False
        if not self.path.exists():
            created = create_file(self.path, embedder, dim)
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

    def stamp(self, version: int) -> str:
        """Which committed version of which store `version` is, for caches kept beside the store:
        the version and the time its operation committed (so a store restored from an older copy
        and written again to the same version number has another stamp), then the store's own
        identity: its embedder, dimension and the time of its first operation (so a cache copied
        from another store is not taken for this one's)."""
        with self.read() as con:
            row = con.execute("SELECT time FROM operations WHERE version=?", (version,)).fetchone()
            first = con.execute("SELECT time FROM operations ORDER BY version LIMIT 1").fetchone()
            meta = dict(con.execute("SELECT key, value FROM meta WHERE key IN ('embedder', 'dim')"))
        when = f"{version}:{row[0]!r}" if row else f"{version}:"
        return f"{when} {meta.get('embedder')}/{meta.get('dim')}/{first[0] if first else ''!r}"

    def load(self, user: str, saved: SavedFor | None = None, lazy: bool = False,
             cached_rows: Callable[[int, int], BulkRows | None] | None = None) -> UserState:
        """The committed state, read in one snapshot; rows that do not fit together are a StoreError.
        `saved` (optional) gives, for the version read, the tables' partitions from a cache (the
        state's fact table takes `facts`). `lazy`: trees are read when first reached, on a
        connection of their own that keeps the snapshot (`memforest.store.tree_source`), the rows the
        indexes need of them from `cached_rows(version, dim)` when it has them."""
        if lazy:
            try:
                con = open_reader(self.path, shared=True)
            except sqlite3.Error as e:
                raise store_error(e, self.path) from e
            try:
                con.execute("BEGIN")
                state = read_state(con, user, lazy=self.path, cached_rows=cached_rows, saved=saved)
            except BaseException as e:
                rollback(con)
                con.close()
                if isinstance(e, sqlite3.Error | UnicodeDecodeError):
                    raise store_error(e, self.path) from e
                if isinstance(e, VectorWidthError):  # diagnosed by the width findings (`check.damaged`)
                    raise
                if isinstance(e, KeyError | ValueError | TypeError | IndexError | AttributeError):
                    raise _rows_damaged(self.path, e) from e
                raise
        else:
            with self.read() as con:
                con.execute("BEGIN")
                try:
                    state = read_state(con, user, saved=saved)
                except VectorWidthError:
                    raise
                except (KeyError, ValueError, TypeError, IndexError, AttributeError) as e:
                    raise _rows_damaged(self.path, e) from e
                finally:
                    rollback(con)  # a read-only transaction: nothing to keep
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
        the committed state `state` was forked from: rows it shares are not written again, and what
        the commit replaces that `base` has not read from the store yet is read into it first
        (`read_for_commit`), so that versions still reading the store see what they were loaded with."""
        if base is not None:
            read_for_commit(base, ch, state)
        with self.connect() as con:
            con.execute("BEGIN IMMEDIATE")
            try:
                current = int(con.execute("SELECT value FROM meta WHERE key='version'").fetchone()[0])
                if current != expected_version:
                    raise StoreError(
                        f"user {state.user}: store changed underneath (version {current}, expected "
                        f"{expected_version}); retry the operation"
                    )
                write_changes(con, state, ch, base)
                version = current + 1
                for k, v in (("version", version), ("next_tree_rowid", state.next_tree_rowid),
                             ("next_scene", state.next_scene)):
                    con.execute("UPDATE meta SET value=? WHERE key=?", (str(v), k))
                con.execute("INSERT INTO operations VALUES (?, ?, ?, ?)",
                            (version, ch.operation.get("kind", "?"), json.dumps(ch.operation), time.time()))
                con.execute("COMMIT")
            except BaseException:
                rollback(con)
                raise
        state.version = version
        return version


def _rows_damaged(path: Path, e: BaseException) -> StoreError:
    return StoreError(f"{path} is damaged: its rows do not fit together ({type(e).__name__}: "
                      f"{' '.join(str(e).split())[:120]}); run `memforest check`")
