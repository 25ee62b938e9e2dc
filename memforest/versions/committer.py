"""Committing an operation: its ChangeSet written to the store, the next version published as the
resident one (`publish.next_snapshot`), and per user the connection its writes keep using, so that a
writer's page cache stays warm from one operation to the next."""

from __future__ import annotations

import logging
import sqlite3
import threading
from contextlib import suppress

from memforest.config import MemForestConfig
from memforest.errors import redact
from memforest.resident.heap import freeze_if_large
from memforest.state import ChangeSet, UserState
from memforest.store.db import UserDB
from memforest.timing import Clock
from memforest.versions import publish
from memforest.versions.resident_versions import ResidentVersions
from memforest.versions.snapshot import Snapshot

log = logging.getLogger(__name__)


class Committer:
    """Commits the operations of one `MemForest` (which serialises each user's writers) and
    publishes their versions into its `ResidentVersions`."""

    def __init__(self, config: MemForestConfig, resident: ResidentVersions) -> None:
        self.config = config
        self.resident = resident
        # per user written to: a connection its writes use (UserDB.hold) and the file it was opened on
        self._held: dict[str, tuple[sqlite3.Connection, tuple[int, int] | None]] = {}
        self._lock = threading.Lock()

    def held_connection(self, user: str, db: UserDB) -> sqlite3.Connection | None:
        """The held connection of `user` if it is open on the file now at the store's path; one open
        on a file since replaced (a store restored from a copy) is closed and forgotten."""
        with self._lock:
            con, opened = self._held.get(user, (None, None))
            if con is None or (opened is not None and opened == db.file_id()):
                return con
            del self._held[user]
        with suppress(sqlite3.Error):
            con.close()
        return None

    def commit(self, user: str, db: UserDB, base: Snapshot, state: UserState, ch: ChangeSet, clock: Clock,
               whole: bool) -> None:
        """Commit `state`, the next version of `base` changed by `ch` (`whole`: a private full copy
        read from the store), and publish it; a version committed but not published is loaded from
        the store by its next reader."""
        if whole:
            state.derive()
        removed_nodes = publish.collect_tree_changes(state, ch)
        clock.lap("changes")
        version = db.commit(state, ch, expected_version=base.version, base=None if whole else base.state)
        clock.lap("commit")
        if state.tree_source is not None and not whole:
            state.tree_source.advance(version)
        try:
            snap: Snapshot | None = publish.next_snapshot(base, state, ch, removed_nodes, rebuild=whole)
        except Exception as e:  # committed: the operation stands, the next reader loads it from the store
            log.warning("memforest: warning: committed, but the new version of %r was not published in "
                        "memory (%s: %s); it is loaded from the database when next read", user,
                        type(e).__name__, redact(str(e)))
            snap = None
        clock.lap("index")
        self.resident.publish(user, snap)
        with self._lock:
            held = user in self._held
        if not held:
            con = db.hold()
            with self._lock:
                if con is not None and self._held.setdefault(user, (con, db.file_id()))[0] is not con:
                    con.close()
        clock.lap("publish")
        if freeze_if_large(len(state.nodes), self.config.heap_freeze_nodes):
            clock.lap("collect")

    def close(self) -> None:
        """Close the held connections."""
        with self._lock:
            held, self._held = [con for con, _ in self._held.values()], {}
        for con in held:
            with suppress(sqlite3.Error):
                con.close()
