"""The read transaction a loaded version reads through: kept open on the committed version it was
loaded from (SQLite, in WAL mode, shows it that snapshot however many commits follow), on a
connection of its own, while something may read through it (`ReadSnapshot`;
`memforest.store.tree_source` reads the version's trees and records through it).

A snapshot held open keeps the write-ahead log from being checkpointed past it, so after each commit
this process makes the snapshot moves to the new version (`advance`). That is sound because a commit
reads in, before it is written, every tree it changes or drops with the data of every node it
changes or drops, the text of every session and cell it replaces or deletes, the members of every
label and the fields and occurrences of every fact it changes or drops (`UserDB.commit`, through
`memforest.store.commit.read_for_commit`): what is still unread is what no commit of this process
changed, and its rows are the same in both versions (data read later are kept only for nodes the
loaded version's structure holds, never a later commit's new ones). After another process's commit the
snapshot stays where it is (a reader reloads the new version into a new source, and the old source is
released: `memforest.store.versions`).

The snapshot is open only while something may read through it: an operation (a lease), or a
version handed to a caller that is still referenced (`hold`). Otherwise it ends after each
operation (`rest`), and the next read begins it again when the store is still at the same commit
(`pin`): an idle memory holds no snapshot that would keep another process's commits in the log.

Moving is not enough for the log to be restarted: a snapshot begun before the log was checkpointed
reads frames of it, and the source always holds one begun right after a commit, so the log would
grow with every commit of a long-lived process (a 10^4-session store ingesting batches grew a 5 GB
log). Every `RELEASE_LOG_EVERY` moves the snapshot checkpoints what is committed, in a background
thread on a connection of its own, and then begins again on the database file alone, so the next
commit restarts the log."""

from __future__ import annotations

import sqlite3
import threading
import weakref
from pathlib import Path
from typing import Any

from memforest.errors import StoreError
from memforest.resident.ondemand import Waiting
from memforest.store.connection import open_reader, rollback

RELEASE_LOG_EVERY = 16  # commits of this process between checkpoints that let the log restart
RELEASE_LOG_IN_BACKGROUND = True  # False: the commit that is due checkpoints before it returns


class ReadSnapshot:
    """A read transaction of one committed version of a store, kept for the versions loaded from it
    that read through it (see the module's notes)."""

    def __init__(self, path: Path, con: sqlite3.Connection, version: int) -> None:
        self.path = path
        self.version = version
        self.lock = threading.RLock()
        self._con: sqlite3.Connection | None = con
        self._spare: sqlite3.Connection | None = None
        self._moves = 0  # moves since the log was last released (`advance`)
        self._releasing: threading.Thread | None = None  # a checkpoint under way (`_release_log`)
        self._checkpointer: sqlite3.Connection | None = None
        self._cons = [con]  # closed with the snapshot at the latest (`weakref.finalize`)
        weakref.finalize(self, _close, self._cons)
        # the versions (states) reading through the snapshot that are still referenced somewhere
        self._served: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
        # the versions a caller was handed (`MemForest.snapshot`) that are still referenced: while
        # one is, the read transaction stays open (`rest`)
        self._held: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
        self.leases = Waiting()  # operations using the snapshot now (`lease`)
        self.drained = False  # every version it serves has read in what it would read (`drain`)
        self._pinned = True  # a read transaction of `version` is open on `_con` (the loader began it)
        self._stamp: tuple[int, object] | None = None  # (version, its commit time), read while pinned

    def serve(self, state: Any) -> None:
        """`state` (a loaded version, or a fork of one) reads through this source."""
        self._served[id(state)] = state

    def hold(self, state: Any) -> bool:
        """`state` was handed to a caller, who may read it at any time: keep the snapshot open while
        it is referenced. False when the snapshot has ended and the store has moved past its version."""
        with self.lock:
            if not self.pin():
                return False
            self._held[id(state)] = state
            return True

    def lease(self) -> bool:
        """An operation starts using the source: its snapshot is open until `unlease`. False (and no
        lease taken) when the snapshot had ended and the store has moved past its version since."""
        self.leases.__enter__()
        with self.lock:
            if self.pin():
                return True
        self.leases.__exit__()
        return False

    def unlease(self) -> None:
        """An operation stopped using the source (`lease`); the snapshot ends when nothing needs it."""
        self.leases.__exit__()
        self.rest()

    def pin(self) -> bool:
        """Begin the snapshot again if it has ended (`rest`), when the store is still at the version
        the source reads (the same commit: its version and time); whether the snapshot is open.
        Called with the lock held."""
        con = self._con
        if con is None:
            return False
        if self._pinned:
            return True
        try:
            con.execute("BEGIN")
            if self._read_stamp(con) == self._stamp:
                self._pinned = True
                return True
        except sqlite3.Error:
            pass
        rollback(con)
        return False

    def rest(self) -> bool:
        """End the read transaction while no operation uses the source and no version handed to a
        caller is referenced: an idle memory then holds no snapshot of the store, and the log can be
        checkpointed and restarted whatever other processes commit. The next read begins it again
        (`pin`). Whether the snapshot is ended now."""
        with self.lock:
            if not self._pinned:
                return True
            if self.leases or len(self._held) or self._releasing is not None or self._con is None:
                return False
            try:
                if self._stamp is None:
                    self._stamp = self._read_stamp(self._con)
            except sqlite3.Error:
                return False
            rollback(self._con)
            self._pinned = False
            return True

    def _read_stamp(self, con: sqlite3.Connection) -> tuple[int, object]:
        (version,) = con.execute("SELECT value FROM meta WHERE key='version'").fetchone()
        row = con.execute("SELECT time FROM operations WHERE version=?", (int(version),)).fetchone()
        return int(version), row[0] if row else None

    def _open_snapshot(self, kind: str, key: str) -> sqlite3.Connection:
        """The connection whose snapshot reads the source's version (begun again if it had ended);
        a StoreError when the source is closed or the store has moved past that version meanwhile.
        Called with the lock held."""
        con = self._con
        if con is None:
            raise StoreError(f"{self.path}: {kind} {key!r} of version {self.version} can no longer be read "
                             "(the memory was closed); open it again")
        if not self.pin():
            raise StoreError(f"{self.path}: {kind} {key!r} of version {self.version} can no longer be read: "
                             "another process has committed since, and nothing held that version open; "
                             "nothing was read: take the memory's current version")
        return con

    @property
    def closed(self) -> bool:
        return self._con is None

    def serves_any(self) -> bool:
        """Whether some version reading through the source is still referenced."""
        return len(self._served) > 0

    def drain(self) -> None:
        """Have every version the source serves that is still referenced read in what it would read
        from the store (`UserState.read_all`): the source's snapshot is then needed by none of them."""
        try:
            with self.lock:
                if not self.pin():  # ended, and the store moved past it: nothing can be read in
                    return
            for state in list(self._served.values()):
                state.read_all()
        except StoreError:  # damage, reported by what reaches it: closed the same
            pass
        finally:
            self.drained = True

    def _fetch(self, kind: str, key: str, sql: str, args: tuple) -> list[tuple]:
        """The rows `sql` gives in the loaded version (called with the lock held)."""
        con = self._open_snapshot(kind, key)
        try:
            return con.execute(sql, args).fetchall()
        except sqlite3.Error as e:
            why = " ".join(str(e).split())[:120]
            raise StoreError(f"{self.path}: the rows of {kind} {key!r} cannot be read ({why})") from e

    def advance(self, version: int) -> None:
        """Move to `version`, which this process has just committed on top of the source's (what
        the commits replaced read in first: `UserDB.commit`), unless another process has committed
        since. The read transaction is begun on a second connection kept for it, and
        the old one ends and is kept in turn; every `RELEASE_LOG_EVERY` moves, a background thread
        checkpoints the log and begins the snapshot again (`_release_log`; the module's notes), so the
        commit does not wait for the checkpoint (`RELEASE_LOG_IN_BACKGROUND` False: it does)."""
        with self.lock:
            if not self._move(version):
                return
            self._moves += 1
            if self._moves < RELEASE_LOG_EVERY or self._releasing is not None:
                return
            self._moves = 0
            if not RELEASE_LOG_IN_BACKGROUND:
                self._release_log()
                return
            self._releasing = threading.Thread(target=self._release_log, name="memforest-log", daemon=True)
            self._releasing.start()

    def _release_log(self) -> None:
        """Checkpoint what is committed (on a connection of its own, outside the lock: reads and
        commits go on meanwhile), then begin the snapshot again at the version the source is at,
        on the database file alone, or end it when nothing uses it (`rest`)."""
        try:
            with self.lock:
                if self._con is None:
                    return
                if self._checkpointer is None:
                    self._checkpointer = open_reader(self.path, shared=True)
                    self._cons.append(self._checkpointer)
                con = self._checkpointer
            con.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            with self.lock:  # begun again only for what uses it now; else it ends (`rest`)
                if self._con is not None and self._pinned and (self.leases or len(self._held)):
                    self._move(self.version)
        except (sqlite3.Error, StoreError):
            pass  # the log is released at a later try
        finally:
            with self.lock:
                self._releasing = None
            self.rest()

    def close(self) -> None:
        """End the read transactions and close the connections (the memory that opened the source is
        closed): what is still unread can no longer be read, and the log is no longer held. A
        checkpoint `advance` started ends first."""
        releasing = self._releasing
        if releasing is not None:
            releasing.join()
        with self.lock:
            self._con = self._spare = self._checkpointer = None
            self._pinned = False
            _close(self._cons)
            self._cons.clear()

    def _move(self, version: int) -> bool:
        """Begin a read transaction of `version` on the spare connection and end the current one;
        whether it did (the source stays on its snapshot when it is closed or the store is at
        another version). Called with the lock held."""
        if self._con is None:
            return False
        con = self._spare
        try:
            if con is None:
                con = self._spare = open_reader(self.path, shared=True)
                self._cons.append(con)
            con.execute("BEGIN")
            (found,) = con.execute("SELECT value FROM meta WHERE key='version'").fetchone()
        except (sqlite3.Error, StoreError):
            if con is not None:
                rollback(con)
            return False
        if int(found) != version:
            rollback(con)
            return False
        rollback(self._con)
        self._con, self._spare, self.version = con, self._con, version
        self._pinned, self._stamp = True, None
        return True


def _close(cons: list[sqlite3.Connection]) -> None:
    for con in cons:
        try:
            con.rollback()
            con.close()
        except sqlite3.Error:
            pass
