"""The caches kept beside one user's database (`cache/` in the user's folder): today the lexical
index in query-ready form (`memforest.index.lexical_cache`).

A cache serves only the committed version it was written for, after its checksums and contents are
checked; otherwise the index is built from the state as before and the cache rewritten. Operations
never write caches (a write stays O(what it changes)): a cache is rewritten when an index is built
afresh for a loaded version and when the memory is closed with a resident version newer than the
cache. A cache that cannot be written (a read-only store) is skipped."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from memforest.cache_file import CacheMiss, cache_dir
from memforest.errors import StoreError
from memforest.index.lexical_cache import FILE_NAME, build_lexical, read_lexical, write_lexical
from memforest.index.lexical_versions import VersionedLexical
from memforest.snapshot import Snapshot
from memforest.state import UserState
from memforest.store.db import UserDB

log = logging.getLogger(__name__)


class StoreCaches:
    def __init__(self, db_path: Path) -> None:
        self.db = UserDB(db_path)  # its own connections: never a writer's held one
        self.lexical_path = cache_dir(db_path) / FILE_NAME
        self.written: int | None = None  # the version whose lexical cache this process wrote or read

    def lexical_source(self) -> Callable[[UserState], VersionedLexical]:
        """Where a loaded version's lexical index comes from: the cache when it serves the version,
        else built from the state (and the cache rewritten)."""
        def source(state: UserState) -> VersionedLexical:
            stamp = self.db.stamp(state.version)
            found = read_lexical(self.lexical_path, stamp, state)
            if not isinstance(found, CacheMiss):
                self.written = state.version
                return found
            log.debug("memforest: rebuilding the lexical index: %s", found.reason)
            built = build_lexical(state)
            self._write(stamp, built, state.version)
            return built
        return source

    def persist(self, snap: Snapshot) -> None:
        """Rewrite the lexical cache for `snap` when its index is built, newer than the cache, and
        still the store's committed version (at close)."""
        lexical = snap.built_lexical()
        if lexical is None or self.written == snap.version:
            return
        try:
            if self.db.version() != snap.version:
                return
            stamp = self.db.stamp(snap.version)
        except StoreError:
            return
        self._write(stamp, lexical, snap.version)

    def findings(self, state: UserState) -> list[str]:
        """What is wrong with the caches of `state` (the store's committed version); each one found
        damaged or stale is rebuilt from the state."""
        if not self.lexical_path.exists():
            return []
        stamp = self.db.stamp(state.version)
        found = read_lexical(self.lexical_path, stamp, state)
        if not isinstance(found, CacheMiss):
            return []
        self._write(stamp, build_lexical(state), state.version)
        return [f"lexical cache {found.reason}: rebuilt from the store"]

    def _write(self, stamp: str, lexical: VersionedLexical, version: int) -> None:
        try:
            write_lexical(self.lexical_path, stamp, lexical)
            self.written = version
        except OSError as e:
            log.debug("memforest: the lexical cache %s was not written (%s)", self.lexical_path, e)
