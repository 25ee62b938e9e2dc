"""The caches kept beside one user's database (`cache/` in the user's folder): the lexical index in
query-ready form (`memforest.index.lexical_cache`), the partitions of the large vector tables
(`memforest.index.partition_cache`) and the rows an open takes of the trees it does not read
(`memforest.index.tree_rows_cache`).

A cache serves only the committed version it was written for, after its checksums and contents are
checked; otherwise the index is built from the state as before and the cache rewritten. Operations
never write caches (a write stays O(what it changes)): a cache is rewritten when an index is built
afresh for a loaded version and when the memory is closed with a resident version newer than the
cache. A cache that cannot be written (a read-only store) is skipped."""

from __future__ import annotations

import gc
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from memforest.check import CacheCheck
from memforest.errors import StoreError
from memforest.index.forest_index import cell_meta, fact_meta, node_uid
from memforest.index.lexical_cache import FILE_NAME, build_lexical, read_lexical, write_lexical
from memforest.index.lexical_versions import VersionedLexical
from memforest.index.partition_cache import FILE_NAME as PARTITIONS_FILE
from memforest.index.partition_cache import read_partitions, write_partitions
from memforest.index.tree_rows_cache import FILE_NAME as TREE_ROWS_FILE
from memforest.index.tree_rows_cache import (
    bulk_difference,
    bulk_of_snapshot,
    bulk_of_state,
    read_tree_rows,
    write_tree_rows,
)
from memforest.resident.cache_file import CacheMiss, MappedFiles, cache_dir, remove_stale_temporary
from memforest.resident.ondemand import BulkRows
from memforest.resident.vector_table import SavedPartitions
from memforest.state import UserState
from memforest.store.db import UserDB
from memforest.versions import publish
from memforest.versions.snapshot import Snapshot

log = logging.getLogger(__name__)


class StoreCaches:
    def __init__(self, db_path: Path) -> None:
        self.db = UserDB(db_path)  # its own connections: never a writer's held one
        self.lexical_path = cache_dir(db_path) / FILE_NAME
        self.partitions_path = cache_dir(db_path) / PARTITIONS_FILE
        self.tree_rows_path = cache_dir(db_path) / TREE_ROWS_FILE
        self.tree_rows_written: int | None = None  # the version whose tree rows this process wrote or read
        self.written: int | None = None  # the version whose lexical cache this process wrote or read
        self.partitions_written: int | None = None  # the same for the partitions cache
        self._read: dict[int, dict[str, SavedPartitions] | None] = {}
        self.mapped = MappedFiles()  # the cache files the loaded versions' arrays map
        self.stale_removed = remove_stale_temporary(cache_dir(db_path))  # (name, bytes), until reported

    def load(self, db: UserDB, user: str, lazy: bool = False) -> Snapshot:
        """The committed version (`publish.load`), its tables taking the cached partitions when the
        cache serves the version read, its lexical index read from the cache when first needed; a
        version whose partitions were trained afresh has them written to the cache at once."""
        self._read.clear()
        collecting = gc.isenabled()
        gc.disable()  # millions of objects, none of them garbage yet: no cyclic collections while loading
        try:
            snap = publish.load(db, user, self._partitions_for, lazy=lazy, cached_rows=self._tree_rows_for)
        finally:
            if collecting:
                gc.enable()
        snap.use_lexical_source(self.lexical_source())
        if self._read.get(snap.version) is None:
            self.persist_partitions(snap)
        else:
            self.partitions_written = snap.version
        self._read.clear()
        return snap

    def _tree_rows_for(self, version: int, dim: int) -> BulkRows | None:
        found = read_tree_rows(self.tree_rows_path, self.db.stamp(version), dim, self.mapped)
        if isinstance(found, CacheMiss):
            log.debug("memforest: reading the tree rows from the store: %s", found.reason)
            return None
        self.tree_rows_written = version
        return found

    def _partitions_for(self, version: int) -> dict[str, SavedPartitions] | None:
        if version not in self._read:
            found = read_partitions(self.partitions_path, self.db.stamp(version), self.mapped)
            if isinstance(found, CacheMiss):
                log.debug("memforest: training the vector tables' partitions: %s", found.reason)
            self._read[version] = None if isinstance(found, CacheMiss) else found
        return self._read[version]

    def persist_partitions(self, snap: Snapshot) -> None:
        """Write the partitions of `snap`'s tables (when there are any and the cache holds another
        version), when `snap` is still the store's committed version."""
        if self.partitions_written == snap.version:
            return
        tables = snap.index.saved_partitions(rows=True)
        if not tables:
            return
        stamp = self._current_stamp(snap.version)
        if stamp is None:
            return
        try:
            write_partitions(self.partitions_path, stamp, tables)
            self.partitions_written = snap.version
        except OSError as e:
            log.debug("memforest: the partitions cache %s was not written (%s)", self.partitions_path, e)

    def persist_tree_rows(self, snap: Snapshot) -> None:
        """Write the tree rows of `snap` (a version whose trees are read on demand) when the cache
        holds another version and `snap` is still the store's committed version."""
        if self.tree_rows_written == snap.version or snap.state.tree_source is None:
            return
        stamp = self._current_stamp(snap.version)
        if stamp is None:
            return
        try:
            rows = bulk_of_snapshot(snap.state, snap.index)
            write_tree_rows(self.tree_rows_path, stamp, rows, snap.state.dim)
            self.tree_rows_written = snap.version
        except OSError as e:
            log.debug("memforest: the tree rows cache %s was not written (%s)", self.tree_rows_path, e)

    def _current_stamp(self, version: int) -> str | None:
        """The stamp of `version` when it is the store's committed version (else None)."""
        try:
            return self.db.stamp(version) if self.db.version() == version else None
        except StoreError:
            return None

    def lexical_source(self) -> Callable[[UserState], VersionedLexical]:
        """Where a loaded version's lexical index comes from: the cache when it serves the version,
        else built from the state (and the cache rewritten)."""
        def source(state: UserState) -> VersionedLexical:
            stamp = self.db.stamp(state.version)
            found = read_lexical(self.lexical_path, stamp, state, self.mapped)
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
        self.persist_partitions(snap)
        self.persist_tree_rows(snap)
        lexical = snap.built_lexical()
        if lexical is None or self.written == snap.version:
            return
        stamp = self._current_stamp(snap.version)
        if stamp is not None:
            self._write(stamp, lexical, snap.version)

    def findings(self, state: UserState) -> CacheCheck:
        """What is wrong with the caches of `state` (the store's committed version), what was checked
        and what was done: each cache found damaged or stale is rebuilt from the state (the
        partitions cache is removed: the next load trains the partitions and writes it), and the
        temporary files of cache writes that never finished are removed. Each file is read whole for
        its checksum, whatever its stamp says (`cache_file.read_arrays(..., verify=True)`)."""
        out = CacheCheck()
        stale = self.stale_removed + remove_stale_temporary(self.lexical_path.parent)
        self.stale_removed = []
        out.checked.append("temporary files of cache writes")
        if stale:
            size = sum(n for _, n in stale)
            out.findings.append(f"{len(stale)} temporary cache file(s) of writes that never finished "
                                f"({size} bytes)")
            out.done.append(f"removed {', '.join(name for name, _ in stale)}")
        stamp = self.db.stamp(state.version)
        for what, path, check in (("lexical cache", self.lexical_path, self._check_lexical),
                                  ("tree rows cache", self.tree_rows_path, self._check_tree_rows),
                                  ("partitions cache", self.partitions_path, self._check_partitions)):
            if not os.path.lexists(path):
                out.checked.append(f"{what}: absent (written when next needed)")
                continue
            try:
                wrong, done = check(stamp, state)
            except OSError as e:
                out.findings.append(f"{what}: could not be checked or rebuilt ({type(e).__name__}: {e})")
                continue
            if wrong is None:
                out.checked.append(f"{what}: holds the store's committed version")
            else:
                out.checked.append(f"{what}: {wrong}")
                out.findings.append(f"{what} {wrong}: {done}")
                out.done.append(f"{what} {done}")
        return out

    def _check_lexical(self, stamp: str, state: UserState) -> tuple[str | None, str]:
        found = read_lexical(self.lexical_path, stamp, state, verify=True)
        if not isinstance(found, CacheMiss):
            return None, ""
        self._write(stamp, build_lexical(state), state.version)
        return found.reason, "rebuilt from the store"

    def _check_tree_rows(self, stamp: str, state: UserState) -> tuple[str | None, str]:
        rows = read_tree_rows(self.tree_rows_path, stamp, state.dim, verify=True)
        truth = bulk_of_state(state)
        wrong = rows.reason if isinstance(rows, CacheMiss) else bulk_difference(rows, truth)
        if wrong is None:
            return None, ""
        write_tree_rows(self.tree_rows_path, stamp, truth, state.dim)
        self.tree_rows_written = state.version
        return wrong, "rebuilt from the store"

    def _check_partitions(self, stamp: str, state: UserState) -> tuple[str | None, str]:
        parts = read_partitions(self.partitions_path, stamp, verify=True)
        wrong = parts.reason if isinstance(parts, CacheMiss) else rows_difference(parts, state)
        del parts  # (its maps with it, before the file is removed)
        if wrong is None:
            return None, ""
        self.partitions_path.unlink(missing_ok=True)
        self.partitions_written = None
        return wrong, "removed (trained again at the next load)"

    def _write(self, stamp: str, lexical: VersionedLexical, version: int) -> None:
        try:
            write_lexical(self.lexical_path, stamp, lexical)
            self.written = version
        except OSError as e:
            log.debug("memforest: the lexical cache %s was not written (%s)", self.lexical_path, e)


def rows_difference(tables: dict[str, SavedPartitions], state: UserState) -> str | None:
    """How the rows cached for the tables of `state` (read from the store, every tree read) differ
    from the store's: keys, vectors or row meta (None: they hold the store's)."""
    truth = bulk_of_state(state)
    rowid = {tid: info.rowid for tid, info in state.trees.items()}
    leaves = {node_uid(rowid[t], nid): (cell, vec) for t, rows in truth.cell_leaves.items()
              for nid, cell, vec in rows}
    # per table: the store's vector of each key, and the row meta of given keys (all held)
    store: dict[str, tuple[dict[Any, np.ndarray], Callable[[list[Any]], np.ndarray]]] = {
        "facts": (dict(state.fact_vecs.items()), lambda keys: fact_meta(state, keys)),
        "cells": ({uid: vec for uid, (_, vec) in leaves.items()},
                  lambda keys: cell_meta(state, [leaves[k][0] for k in keys])),
        "roots": ({rowid[t]: vec for t, vec in truth.roots.items()}, lambda keys: np.zeros((len(keys), 2)))}
    for name, saved in sorted(tables.items()):
        if saved.vecs is None:
            continue
        if name not in store:
            return f"holds a table the store has not ({name})"
        vecs, meta_of = store[name]
        keys = list(saved.keys)
        if set(keys) != set(vecs):
            return f"the keys of {name} are not the store's"
        want = np.stack([vecs[k] for k in keys]) if keys else np.zeros((0, state.dim), np.float32)
        if not np.array_equal(saved.vecs[: len(keys)], want):
            return f"the vectors of {name} are not the store's"
        if saved.meta is not None and not np.array_equal(saved.meta, meta_of(keys)):
            return f"the row meta of {name} is not the store's"
    return None
