"""Versions of a memory that another process's commits have superseded, and the read transactions
their sources hold.

A loaded version reads the store on demand through a `StoreTreeSource`, which keeps a read
transaction open on the version's snapshot. An open snapshot holds the write-ahead log: no
checkpoint copies a page past it and no commit restarts the log while it is open, so a process
holding a memory open (idle, or querying) while another process writes would grow the log with every
commit. A memory that finds the store at a newer version than the one it holds (an operation's
check, or `MemForest.release_superseded`, which a background check calls) hands the old version's
source to `SupersededSources`, which ends its transaction:

- at once when no version it serves is still referenced and no operation uses it;
- when a version it serves is still referenced (a caller keeps an old snapshot or state): that
  version first reads in everything it would read from the store (`UserState.read_all`), so it
  keeps answering as itself, and the transaction ends at the next release;
- never while an operation uses it (`StoreTreeSource.leases`): at a release after that.

Each release that ended a transaction checkpoints the log (passively: it waits for no one), so the
next commit of any process restarts it. The log then holds the frames of the commits between two
releases, plus those a writer's own snapshot holds (`read_snapshot.RELEASE_LOG_EVERY` commits)."""

from __future__ import annotations

import os
import sqlite3
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from memforest.errors import StoreError
from memforest.store.tree_source import StoreTreeSource


class SupersededSources:
    """The sources of versions a memory no longer holds as its resident ones, until their read
    transactions have ended."""

    def __init__(self) -> None:
        self._sources: list[StoreTreeSource] = []
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._sources)

    def add(self, source: StoreTreeSource) -> None:
        with self._lock:
            if all(s is not source for s in self._sources):
                self._sources.append(source)

    def release(self, version_of: Callable[[Path], int | None]) -> int:
        """End the transactions that may end now (the module's notes); `version_of(path)`: the
        store's committed version (None when it cannot be read: such a source is kept). Returns how
        many ended; when any did, the logs of their stores are checkpointed."""
        with self._lock:
            sources, self._sources = self._sources, []
        kept: list[StoreTreeSource] = []
        ended: list[Path] = []
        for source in sources:
            if source.closed:
                continue
            if source.leases:
                kept.append(source)
            elif not source.serves_any() or source.drained:
                source.close()
                ended.append(source.path)
            elif version_of(source.path) not in (None, source.version):
                source.drain()
                kept.append(source)
            else:  # the store's version again, or unknown: kept until superseded for certain
                kept.append(source)
        with self._lock:
            self._sources = kept + self._sources
        for path in sorted(set(ended)):
            checkpoint(path)
        return len(ended)

    def close_all(self) -> None:
        with self._lock:
            sources, self._sources = self._sources, []
        for source in sources:
            source.close()


def checkpoint(path: Path) -> None:
    """Copy the committed frames of the log into the database as far as no reader holds them, waiting
    for no one (a store that may not be written is left as it is)."""
    with suppress(sqlite3.Error):
        con = sqlite3.connect(path, timeout=0.0, isolation_level=None)
        try:
            con.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        finally:
            con.close()


@contextmanager
def leased(state: Any, what: str) -> Iterator[None]:
    """Hold a lease on the source of `state` (a version an operation uses) for the block: its
    snapshot stays open meanwhile (`StoreTreeSource.lease`). A StoreError naming `what` when the
    snapshot had ended and the store has moved past the version since."""
    source = getattr(state, "tree_source", None)
    if not isinstance(source, StoreTreeSource):
        yield
        return
    if not source.lease():
        raise StoreError(f"{what}: the store changed underneath (another process committed); retry "
                         "the operation")
    try:
        yield
    finally:
        source.unlease()


def file_marks(path: Path) -> tuple[int, ...]:
    """What changes when a commit lands in the store at `path`: the sizes and times of the database
    file and its log (zeros for a missing file)."""
    marks: list[int] = []
    for name in (f"{path}", f"{path}-wal"):
        try:
            st = os.stat(name)
            marks += [st.st_size, st.st_mtime_ns, st.st_ino]
        except OSError:
            marks += [0, 0, 0]
    return tuple(marks)


class StoreWatch:
    """A daemon thread calling `check()` every `interval_s` seconds (a weak reference: it ends when
    the object it checks for is gone, or at `stop`)."""

    def __init__(self, check: Callable[[], object], interval_s: float) -> None:
        self._check = weakref.WeakMethod(check)
        self._interval = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memforest-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            check = self._check()
            if check is None:
                return
            with suppress(Exception):  # a check that fails is tried again at the next tick
                check()
            del check

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()
