"""Versioned vector tables: exact inner-product search where a new version costs O(rows it changes).

Rows are append-only and shared by every version; a version is its row count, a live mask and a
key -> row map (copy-on-write). Changing a key's vector appends a row and retires the old one in the
new version only, so a published version never changes. Retired rows are dropped by a compaction
once they outnumber the live ones (O(size), amortised over as many changes).

Search is exact while the table holds at most `EXACT_ROWS` live rows (a table may set a lower bound).
Past that, its rows are partitioned by nearest centroid (`memforest.resident.partitions`) and a search
scores exactly the rows of the partitions nearest the query (`memforest.resident.vector_search`), at
least `probe_size(k)` of them, so it costs the same at any size; results are then approximate
(`benchmarks/micro/incremental.py` reports their overlap with exact search), and may differ between a
resident table and one built afresh from the store, as the partitions depend on the order rows came
in. When partitions are built (and at every compaction) the rows are laid out partition by
partition, in runs a probe reads in place; rows added later join the runs' ends. A cache may keep a
partitioned table's rows in that layout (`memforest.resident.saved_partitions`).

A table whose keys are small non-negative integers (`int_keys=True`) also keeps key -> row as an
array (`memforest.resident.key_rows`), so `rows_of` finds the rows of many keys in one gather."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from memforest.resident.cow import CowMap
from memforest.resident.key_rows import KeyRows
from memforest.resident.lazy_map import LazyMap
from memforest.resident.packed_keys import IntKeys, KeyPlaces, PackedKeys, RowKeys, int_positions
from memforest.resident.partitions import Partitions
from memforest.resident.prefetch import is_mapped, will_need_rows
from memforest.resident.saved_partitions import (
    SavedPartitions,
    partitions_over,
    restore_partitions,
    save_partitions,
    saved_order,
)
from memforest.resident.saved_partitions import slack_rows as slack_rows  # for the callers of this module
from memforest.resident.vector_search import best, exact_scores, scores_above

_MIN_ROWS = 1024
EXACT_ROWS = 16384
PARTITION_ROWS = 512  # most rows per partition
PROBE_MIN = 2048
PROBE_FACTOR = 8


def probe_size(k: int) -> int:
    """Rows a partitioned table scores for a top-k search."""
    return max(PROBE_MIN, PROBE_FACTOR * k)


Given = np.ndarray | Callable[[], np.ndarray]  # an array, or a function giving it when it is needed


class _Rows:
    """The shared, append-only storage: vectors, their keys and optional per-row numbers."""

    def __init__(self, dim: int, capacity: int, vecs: np.ndarray | None = None) -> None:
        self.vecs = np.zeros((capacity, dim), np.float32) if vecs is None else vecs
        self.keys: list[Any] | RowKeys = []
        self.meta = np.zeros((capacity, 2), np.float64)


class VectorTable:
    def __init__(self, dim: int, exact_rows: int | None = None, int_keys: bool = False) -> None:
        self.dim = dim
        self._exact = exact_rows  # live rows searched exactly (None: EXACT_ROWS)
        self._rows = _Rows(dim, _MIN_ROWS)
        self._n = 0
        self._live = np.zeros(_MIN_ROWS, bool)
        self._slot: CowMap[Hashable, int] = CowMap()
        self._own_tail = True  # whether rows >= _n may be written by this version
        self._own_from = 0  # rows from here on were written by this version alone (since its fork)
        self._parts: Partitions | None = None  # built once the table outgrows EXACT_ROWS
        self._own_parts = True
        self._key_rows = KeyRows(_MIN_ROWS) if int_keys else None

    def __len__(self) -> int:
        return len(self._slot)

    def __contains__(self, key: object) -> bool:
        return key in self._slot

    def keys(self) -> Iterable[Hashable]:
        return iter(self._slot)

    def key_rows(self) -> Mapping[Hashable, int]:
        """key -> row as the table holds them now (a fork of its map: later edits leave it as it is)."""
        return self._slot.fork()

    def fork(self) -> VectorTable:
        """The next version; this one stays unchanged (and may no longer append)."""
        out = VectorTable.__new__(VectorTable)
        out.dim, out._exact, out._rows, out._n = self.dim, self._exact, self._rows, self._n
        out._live, out._slot, out._own_tail = self._live.copy(), self._slot.fork(), True
        out._own_from = self._own_from = self._n
        out._parts, out._own_parts = self._parts, self._parts is None
        out._key_rows = None if self._key_rows is None else self._key_rows.fork()
        self._own_tail = False
        self._own_parts = self._parts is None  # shared now: either side copies it before changing it
        return out

    def vector(self, key: Hashable) -> np.ndarray:
        """A view of `key`'s row (rows are never changed in place: it stays what it is)."""
        return self._rows.vecs[self._slot[key]]

    def vector_or_none(self, key: Hashable) -> np.ndarray | None:
        """`vector`, or None for a key the table does not hold."""
        slot = self._slot.get(key)
        return None if slot is None else self._rows.vecs[slot]

    def vectors(self, keys: Sequence[Hashable]) -> np.ndarray:
        """The vectors of `keys` (held by the table), gathered into one new array (of a mapped table,
        their pages asked for at once before the gather: `prefetch.will_need_rows`)."""
        slots = self._slots(keys)
        will_need_rows(self._rows.vecs, slots)
        return self._rows.vecs[slots]

    def will_need(self, keys: Iterable[Hashable]) -> None:
        """Ask at once for the pages of the rows of those of `keys` the table holds, when its rows are
        a map: what reading their vectors one after another would fault one at a time."""
        vecs = self._rows.vecs
        if is_mapped(vecs):
            slot = self._slot
            will_need_rows(vecs, np.array([s for s in map(slot.get, keys) if s is not None], np.int64))

    def meta(self, key: Hashable) -> np.ndarray:
        return self._rows.meta[self._slot[key]]

    def upsert(self, keys: Sequence[Hashable], vecs: np.ndarray, meta: np.ndarray | None = None) -> None:
        """Set the vectors (and row numbers) of `keys`; a key whose row already holds them is left as
        it is (no new row)."""
        if not keys:
            return
        vecs = np.asarray(vecs, np.float32).reshape(len(keys), self.dim)
        meta_rows = np.zeros((len(keys), 2)) if meta is None else np.broadcast_to(meta, (len(keys), 2))
        empty = not len(self._slot)  # (a table filled at a load: no key to look up, none to retire)
        slots_held = () if empty else enumerate(map(self._slot.get, keys))
        held = [(i, slot) for i, slot in slots_held if slot is not None]
        if held:
            at, slots = np.array([i for i, _ in held]), np.array([slot for _, slot in held])
            same = ((self._rows.vecs[slots] == vecs[at]).all(axis=1)
                    & (self._rows.meta[slots] == meta_rows[at]).all(axis=1))
            if same.any():
                keep = np.ones(len(keys), bool)
                keep[at[same]] = False
                keys = [k for k, kept in zip(keys, keep.tolist()) if kept]
                vecs, meta_rows = vecs[keep], meta_rows[keep]
                if not keys:
                    return
        meta = meta_rows
        if not empty:
            self.remove(keys)
        if self._dead() > max(_MIN_ROWS, len(self._slot)):
            self._compact()
        self._reserve(self._n + len(keys))
        rows, lo, hi = self._rows, self._n, self._n + len(keys)
        rows.vecs[lo:hi] = vecs
        rows.meta[lo:hi] = meta
        del rows.keys[lo:]
        rows.keys.extend(keys)
        self._live[lo:hi] = True
        fresh = dict(zip(keys, range(lo, hi))) if empty and type(self._slot) is CowMap else None
        if fresh is not None and len(fresh) == len(keys):  # (each key once: the map is made in one pass)
            self._slot = CowMap.over(fresh)
        else:
            for i, key in enumerate(keys):
                self._slot[key] = lo + i
        if self._key_rows is not None:
            self._key_rows.set(np.asarray(keys, np.int64), np.arange(lo, hi))
        self._n = hi
        if self._parts is not None:
            self._writable_parts().add(np.arange(lo, hi), rows.vecs, self._live)
        elif len(self._slot) > self.exact_rows:
            live = self.live_rows()
            self._parts, self._own_parts = Partitions.build(rows.vecs, live, self._live, PARTITION_ROWS), True
            self._compact()  # laid out partition by partition

    def set_meta(self, keys: Sequence[Hashable], meta: np.ndarray) -> None:
        """Set the row numbers of `keys` (held by the table): in place in rows this version wrote
        since it was forked, which no other version reads; as new rows (`upsert`) in shared ones."""
        if not keys:
            return
        meta = np.broadcast_to(np.asarray(meta, np.float64), (len(keys), 2))
        slots = self._slots(keys)
        mine = slots >= self._own_from
        self._rows.meta[slots[mine]] = meta[mine]
        if not mine.all():
            shared = np.flatnonzero(~mine)
            self.upsert([keys[i] for i in shared.tolist()], self._rows.vecs[slots[shared]], meta[shared])

    def _slots(self, keys: Sequence[Hashable]) -> np.ndarray:
        """The rows of `keys` (each held by the table)."""
        slot = self._slot
        return np.fromiter((slot[k] for k in keys), np.int64, len(keys))

    def fill(self, keys: Sequence[Hashable], vecs: Given, meta: Given | None = None,
             saved: SavedPartitions | None = None) -> bool:
        """Fill an empty table with `keys`, their `vecs` and row `meta` (each may be a function giving
        it, called only when it is needed). A table past its exact bound takes the `saved` partitions
        when their keys are exactly the table's (no training), and their rows when they carry them
        (the vectors and meta are then not needed); else it trains its own. Returns whether the
        saved partitions were used."""
        if len(self._slot) or self._n:
            raise ValueError("fill takes an empty table")
        if saved is None or len(keys) <= self.exact_rows:
            self.upsert(keys, _given(vecs), _given_meta(meta))
            return False
        if self._fill_as_saved(keys, vecs, meta, saved):
            return True
        exact, self._exact = self._exact, len(keys)  # no partitions are trained while filling
        try:
            self.upsert(keys, _given(vecs), _given_meta(meta))
        finally:
            self._exact = exact
        restored = partitions_over(saved, self._slot, PARTITION_ROWS)
        self._parts, self._own_parts = restored, True
        if restored is None:
            self._parts = Partitions.build(self._rows.vecs, self.live_rows(), self._live, PARTITION_ROWS)
        self._compact()  # laid out partition by partition (as the saved table was, when restored)
        return restored is not None

    def _fill_as_saved(self, keys: Sequence[Hashable], vecs: Given, meta: Given | None,
                       saved: SavedPartitions) -> bool:
        """`fill` with `saved` partitions holding exactly `keys` (each once): the table takes their
        rows when they carry them, else gathers `vecs` straight into the saved layout (partition by
        partition), as filling, then compacting, lays them out. False, with nothing changed, when
        the keys differ."""
        n = len(keys)
        packed: Sequence[Hashable] | None = None  # the saved keys as the rows' keys, found when asked for
        slot: dict[Hashable, int] | LazyMap[Hashable, int] = {}
        if keys is saved.keys and isinstance(keys, PackedKeys):  # (the cache's own keys, packed)
            if keys.has_duplicates():
                return False
            packed, slot, at = keys, LazyMap(KeyPlaces(keys)), np.arange(n)
        elif isinstance(keys, IntKeys) and isinstance(saved.keys, IntKeys):  # (both arrays)
            found_at = int_positions(keys.array, saved.keys.array)
            if found_at is None:
                return False
            at, order = found_at
            packed, slot = saved.keys, LazyMap(KeyPlaces(IntKeys(saved.keys.array, order)))
        elif keys is saved.keys:  # (the cache's own keys: in its order, each once if the map says so)
            slot = dict(zip(keys, range(n)))
            if len(slot) != n:
                return False
            at = np.arange(n)
        else:
            found = saved_order(keys, saved)
            if found is None:
                return False
            at, slot = found, {}
        mapped = saved.vecs
        if (mapped is not None and mapped.ndim == 2 and mapped.shape[1] == self.dim and len(mapped) > n
                and mapped.dtype == np.float32 and mapped.flags.writeable):
            rows = _Rows(self.dim, len(mapped), vecs=mapped)
        else:
            rows = _Rows(self.dim, max(_MIN_ROWS, 2 * n))
            np.take(np.asarray(_given(vecs), np.float32).reshape(n, self.dim), at, axis=0, out=rows.vecs[:n])
        capacity = len(rows.vecs)
        if rows.vecs is mapped and saved.meta is not None and saved.meta.shape == (n, 2):
            rows.meta[:n] = saved.meta
        elif meta is not None:
            rows.meta[:n] = np.broadcast_to(_given(meta), (n, 2))[at]
        # the caller's key objects, not the saved copies
        if packed is not None:
            rows.keys = RowKeys(packed)
        else:
            rows.keys = list(keys) if slot else list(map(keys.__getitem__, at.tolist()))
        self._rows, self._n, self._own_tail, self._own_from = rows, n, True, 0
        self._live = np.zeros(capacity, bool)
        self._live[:n] = True
        if isinstance(slot, LazyMap):
            self._slot = slot
        else:
            self._slot = CowMap.over(slot or dict(zip(rows.keys, range(n))))
        if self._key_rows is not None:
            self._key_rows = self._key_rows.remade(np.asarray(rows.keys, np.int64), np.arange(n))
        self._parts, self._own_parts = restore_partitions(saved, None, PARTITION_ROWS), True
        return True

    def saved_partitions(self, rows: bool = False) -> SavedPartitions | None:
        """The partitions searches go through, by key (None while the table is searched exactly);
        with `rows`, their vectors too, in that order, followed by `slack_rows` zero rows."""
        parts = self.partitions
        if parts is None:
            return None
        return save_partitions(parts, self._live, self._rows.keys, self._rows.vecs if rows else None,
                               self._rows.meta, self.dim)

    def remove(self, keys: Iterable[Hashable]) -> None:
        gone = []
        for key in keys:
            slot = self._slot.pop(key, None)
            if slot is not None:
                self._live[slot] = False
                gone.append(key)
        if gone and self._key_rows is not None:
            self._key_rows.set(np.asarray(gone, np.int64), -1)

    def live_rows(self) -> np.ndarray:
        """Row numbers of the live rows."""
        return np.flatnonzero(self._live[: self._n])

    def scores(self, query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(row numbers, inner products) of the live rows for one query vector."""
        return exact_scores(self._rows.vecs, self._n, self._live, query)

    def search(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(keys, scores) of the top-k rows for one query vector, best first."""
        return self.search_meta(query, k)[:2]

    def search_meta(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`search`, and the row numbers (meta) of the rows found. Keys come back as an array of
        their kind (integers, or text for a table keyed by text)."""
        rows, sims = best(*self.candidate_scores(query, probe_size(k)), k)
        keys = self._rows.keys
        found = [keys[r] for r in rows.tolist()]
        return (np.asarray(found) if found else np.zeros(0, np.int64), sims.astype(np.float32),
                self._rows.meta[rows])

    @property
    def exact_rows(self) -> int:
        """Live rows up to which this table is searched exactly."""
        return EXACT_ROWS if self._exact is None else self._exact

    @property
    def partitions(self) -> Partitions | None:
        """The partitions searches go through (None while the table is searched exactly)."""
        return self._parts if len(self._slot) > self.exact_rows else None

    def candidate_scores(self, query: np.ndarray, candidates: int) -> tuple[np.ndarray, np.ndarray]:
        """(row numbers, exact inner products) of every live row, or for a partitioned table of the
        live rows of the partitions nearest `query` (at least `candidates` rows gathered)."""
        return self.above(np.asarray(query, np.float32).reshape(1, -1), -np.inf, candidates)[0]

    def above(self, queries: np.ndarray, floor: float,
              candidates: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """For each query row, (row numbers, inner products) of the live rows scoring at least
        `floor` (in a partitioned table: among the `candidates` rows of the nearest partitions)."""
        queries = np.asarray(queries, np.float32).reshape(-1, self.dim)
        return scores_above(self._rows.vecs, self._n, self._live, self.partitions, queries, floor, candidates)

    def top(self, rows: np.ndarray, sims: np.ndarray, k: int) -> list[tuple[Hashable, float]]:
        rows, sims = best(rows, sims, k)
        keys = self._rows.keys
        return [(keys[r], s) for r, s in zip(rows.tolist(), sims.tolist())]

    def row_of(self, key: Hashable) -> int | None:
        """The row holding `key`'s vector in this version (None if absent)."""
        return self._slot.get(key)

    def rows_of(self, keys: np.ndarray) -> np.ndarray:
        """The rows holding the vectors of integer `keys` in this version (-1 for a key it lacks);
        one gather for a table made with `int_keys=True`."""
        keys = np.asarray(keys, np.int64)
        if self._key_rows is None:
            return np.asarray([-1 if (r := self._slot.get(k)) is None else r for k in keys.tolist()],
                              np.int64)
        return self._key_rows.rows_of(keys)

    def row_scores(self, rows: np.ndarray, query: np.ndarray) -> np.ndarray:
        """Inner products of `query` with the given rows (of a mapped table, their pages asked for at
        once before the gather: `prefetch.will_need_rows`)."""
        vecs = self._rows.vecs
        will_need_rows(vecs, rows)
        return vecs[rows] @ np.asarray(query, np.float32).reshape(-1)

    def row_meta(self, rows: np.ndarray) -> np.ndarray:
        meta = self._rows.meta
        will_need_rows(meta, rows)
        return meta[rows]

    def row_key(self, row: int) -> Hashable:
        return self._rows.keys[row]

    def _writable_parts(self) -> Partitions:
        assert self._parts is not None
        if not self._own_parts:
            self._parts, self._own_parts = self._parts.copy(), True
        return self._parts

    def _dead(self) -> int:
        return self._n - len(self._slot)

    def _reserve(self, n: int) -> None:
        if self._own_tail and n <= len(self._rows.vecs):
            if len(self._live) < len(self._rows.vecs):
                self._live = np.resize(self._live, len(self._rows.vecs))
            return
        self._regrow(max(n, _MIN_ROWS), keep=self._n)

    def _regrow(self, n: int, keep: int) -> None:
        """Private storage for rows [0, keep) with room for `n` (older versions keep the old storage)."""
        capacity = max(_MIN_ROWS, 2 * n)
        old = self._rows
        rows = _Rows(self.dim, capacity)
        rows.vecs[:keep] = old.vecs[:keep]
        rows.meta[:keep] = old.meta[:keep]
        rows.keys = old.keys[:keep]
        live = np.zeros(capacity, bool)
        live[:keep] = self._live[:keep]
        self._rows, self._live, self._own_tail, self._own_from = rows, live, True, 0

    def _compact(self) -> None:
        """Drop retired rows into private storage; with partitions, lay the rows out partition by
        partition (each partition's members become one run of consecutive rows)."""
        if self._parts is not None:
            members = np.concatenate(self._parts.members) if self._parts.members else np.zeros(0, np.int64)
            slots = members[self._live[members]]
            keys = [self._rows.keys[r] for r in slots.tolist()]
        if self._parts is None or len(keys) != len(self._slot):  # (every live row is in one partition)
            keys = list(self._slot)
            slots = np.asarray([self._slot[k] for k in keys], np.int64)
        old = self._rows
        capacity = max(_MIN_ROWS, 2 * len(keys))
        rows = _Rows(self.dim, capacity)
        rows.vecs[: len(keys)] = old.vecs[slots]
        rows.meta[: len(keys)] = old.meta[slots]
        rows.keys = keys
        self._rows, self._n, self._own_tail, self._own_from = rows, len(keys), True, 0
        self._live = np.zeros(capacity, bool)
        self._live[: len(keys)] = True
        self._slot = CowMap((k, i) for i, k in enumerate(keys))
        if self._key_rows is not None:
            self._key_rows = self._key_rows.remade(np.asarray(keys, np.int64), np.arange(len(keys)))
        if self._parts is not None:
            new_row = np.full(len(old.vecs), -1, np.int64)
            new_row[slots] = np.arange(len(keys))
            self._writable_parts().remap(new_row)


def _given(value: Given) -> np.ndarray:
    return value() if callable(value) else value


def _given_meta(meta: Given | None) -> np.ndarray | None:
    return None if meta is None else _given(meta)
