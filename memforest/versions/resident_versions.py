"""The versions of its users' memories that one `MemForest` holds in memory: per user the resident
snapshot readers are handed (loaded from the store when the store has moved past it), the caches
beside its database, and the versions other processes' commits superseded, kept until their store
snapshots may end (`memforest.store.versions`), with the background watch that ends them."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from memforest.config import MemForestConfig
from memforest.errors import StoreError, redact
from memforest.resident.heap import collect_before_load, settle_if_large
from memforest.store.db import UserDB
from memforest.store.versions import StoreWatch, SupersededSources, file_marks
from memforest.versions.caches import StoreCaches
from memforest.versions.snapshot import Snapshot

log = logging.getLogger(__name__)

_TRIES = 3  # loads of a memory whose store another process keeps committing to meanwhile


class ResidentVersions:
    """Per user, the resident version of its memory and what keeps it: its caches, the versions it
    replaced until their snapshots end, and the background work its load started."""

    def __init__(self, config: MemForestConfig) -> None:
        self.config = config
        self._snapshots: dict[str, Snapshot] = {}
        self._caches: dict[str, StoreCaches] = {}  # per user: the cache files beside its database
        self._settling: list[threading.Thread] = []  # background work a load started (huge pages)
        self._lock = threading.Lock()
        # sources of versions other processes' commits superseded, until their snapshots end
        self._superseded = SupersededSources()
        self._watch: StoreWatch | None = None  # started with the first version read on demand
        self._marks: dict[str, tuple[int, ...]] = {}  # per user: its files when last checked

    def get(self, user: str) -> Snapshot | None:
        """The version of `user` held now, as it is (no check against the store)."""
        with self._lock:
            return self._snapshots.get(user)

    def publish(self, user: str, snap: Snapshot | None) -> None:
        """Make `snap`, a version this process committed, the resident one (None: none is until the
        next reader loads one from the store)."""
        with self._lock:
            if snap is None:
                self._snapshots.pop(user, None)
            else:
                self._snapshots[user] = snap

    def forget(self, user: str, only: Snapshot | None = None) -> None:
        """Hold no version of `user` (with `only`: when that one is still the resident one), so that
        the next reader loads it from the store."""
        with self._lock:
            if only is None or self._snapshots.get(user) is only:
                self._snapshots.pop(user, None)

    def held(self, user: str, db: UserDB) -> Snapshot:
        """The last committed version of `user` (see `MemForest.snapshot`), its source holding the
        store's snapshot open while the version is referenced."""
        for _ in range(_TRIES):
            snap = self.current(user, db, db.validate())
            source = snap.state.tree_source
            if source is None or source.hold(snap.state):
                return snap
            self.supersede(user, snap)
        raise StoreError(f"the memory of user {user!r} kept changing while it was read; retry")

    def leased(self, user: str, db: UserDB) -> Snapshot:
        """`held(user, db)` with a lease on its source taken for an operation, which ends it with
        `tree_source.unlease()`."""
        for _ in range(_TRIES):
            snap = self.current(user, db, db.validate())
            source = snap.state.tree_source
            if source is None or source.lease():
                return snap
            self.supersede(user, snap)
        raise StoreError(f"the memory of user {user!r} kept changing while it was read; retry")

    def current(self, user: str, db: UserDB, version: int) -> Snapshot:
        """The resident snapshot of `user` at committed `version` (as read by `db.validate`)."""
        snap = self.get(user)
        if snap is not None and self._maps_changed(user, db):
            self.supersede(user, snap)
            snap = None
        if snap is None or snap.version != version:
            if snap is not None and snap.version < version:  # another process committed since
                self.supersede(user, snap)
                snap = None
                self._superseded.release(version_of)  # before the load: its snapshot holds no old frames
            snap = self._load(user, db)
            with self._lock:
                held = self._snapshots.get(user)
                if held is None or held.version < snap.version:
                    self._snapshots[user] = snap
        return snap

    def _load(self, user: str, db: UserDB) -> Snapshot:
        """The committed version of `user` read from the store, with the background work it needs."""
        config = self.config
        collect_before_load(config.heap_freeze_nodes)
        snap = self.caches_of(user, db).load(db, user, lazy=config.lazy_trees)
        if snap.state.tree_source is not None:
            self._start_watch()
        settling = settle_if_large(user, len(snap.state.nodes), config.heap_freeze_nodes,
                                   bool(config.huge_pages), snap.state.tree_source, config.warm_tree_leaves,
                                   config.warm_tree_share)
        if settling is not None:
            with self._lock:
                self._settling = [t for t in self._settling if t.is_alive()] + [settling]
        return snap

    def _maps_changed(self, user: str, db: UserDB) -> bool:
        """Whether a cache file the resident version of `user` maps was changed in place since it
        was mapped (one fstat per mapped file, `cache_file.MappedFiles`): the version is then read
        from the store again instead of touching the changed map, which could kill the process
        (a truncated file) or answer from other data (an overwritten one)."""
        changed = self.caches_of(user, db).mapped.changed()
        if changed:
            log.warning("memforest: warning: cache files of user %r changed in place under this process "
                        "(%s); reading the memory from the store again", user, "; ".join(changed))
        return bool(changed)

    def supersede(self, user: str, snap: Snapshot) -> None:
        """`snap`, the resident version of `user`, is older than the store's: it is resident no more,
        and its source's snapshot ends when nothing needs it (`memforest.store.versions`)."""
        self.forget(user, only=snap)
        if snap.state.tree_source is not None:
            self._superseded.add(snap.state.tree_source)

    def release_superseded(self) -> int:
        """`MemForest.release_superseded`: returns how many store snapshots ended."""
        with self._lock:
            resident = [(u, s) for u, s in self._snapshots.items() if s.state.tree_source is not None]
        while resident:  # (no reference to a version left behind here: one nobody holds is closed)
            self._release_resident(*resident.pop())
        return self._superseded.release(version_of)

    def _release_resident(self, user: str, snap: Snapshot) -> None:
        """Hand the resident `snap` over to be released when the store has moved past it; else end its
        snapshot while nothing uses it."""
        if (version_of(snap.state.tree_source.path) or 0) > snap.version:
            self.supersede(user, snap)
        else:
            snap.state.tree_source.rest()

    def _watch_tick(self) -> None:
        """`release_superseded` when a resident user's store files changed since the last tick, or
        a superseded version waits for its snapshot to end."""
        with self._lock:
            paths = {u: s.state.tree_source.path for u, s in self._snapshots.items()
                     if s.state.tree_source is not None}
        marks = {u: file_marks(p) for u, p in paths.items()}
        changed = marks != self._marks
        self._marks = marks
        if changed or len(self._superseded):
            self.release_superseded()

    def _start_watch(self) -> None:
        with self._lock:
            if self._watch is None and self.config.release_check_s > 0:
                self._watch = StoreWatch(self._watch_tick, self.config.release_check_s)

    def wait_settled(self, timeout: float | None = None) -> bool:
        """`MemForest.wait_settled`: whether the background work of the loads has finished."""
        with self._lock:
            threads = list(self._settling)
        for thread in threads:
            thread.join(timeout)
        return not any(t.is_alive() for t in threads)

    def caches_of(self, user: str, db: UserDB) -> StoreCaches:
        """The caches beside the database of `user` (made afresh when the store moved elsewhere)."""
        with self._lock:
            caches = self._caches.get(user)
            if caches is None or caches.db.path != db.path:
                caches = self._caches[user] = StoreCaches(db.path)
            return caches

    def close(self) -> None:
        """Stop the watch, write the caches of the resident versions (the next process maps their
        indexes) and end the store snapshots of every version held."""
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.stop()
        with self._lock:
            resident = [(self._caches.get(u), snap) for u, snap in self._snapshots.items()]
        for caches, snap in resident:
            if caches is not None:
                try:
                    caches.persist(snap)
                except Exception as e:  # a cache is never worth failing a close for
                    log.warning("memforest: warning: caches of %r not written (%s)", snap.state.user,
                                redact(str(e)))
        with self._lock:
            released, self._snapshots = list(self._snapshots.values()), {}
        for snap in released:  # their read transactions would hold the log (and their state) on
            if snap.state.tree_source is not None:
                snap.state.tree_source.close()
        self._superseded.close_all()


def version_of(path: Path) -> int | None:
    """The committed version of the store at `path` (None when it cannot be read)."""
    try:
        return UserDB(path).version()
    except (StoreError, OSError):
        return None
