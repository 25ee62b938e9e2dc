"""Versioned vector tables: exact inner-product search where a new version costs O(rows it changes).

Rows are append-only and shared by every version; a version is its row count, a live mask and a
key -> row map (copy-on-write). Changing a key's vector appends a row and retires the old one in the
new version only, so a published version never changes. Retired rows are dropped by a compaction
once they outnumber the live ones (O(size), amortised over as many changes).

Search is exact while the table holds at most `EXACT_ROWS` live rows (a table may set a lower bound).
Past that, its rows are partitioned by nearest centroid (`memforest.resident.partitions`) and a search scores
exactly the rows of the partitions nearest the query, at least `max(PROBE_MIN, PROBE_FACTOR * k)` of
them, so it costs the same at any size; results are then approximate
(`benchmarks/micro/incremental.py` reports their overlap with exact search), and may differ between a
resident table and one built afresh from the store, as the partitions depend on the order rows came
in. When partitions are built (and at every compaction) the rows are laid out partition by
partition, so a probe reads runs of consecutive rows in place instead of gathering scattered ones;
rows added later join the runs' ends and are read as short runs of their own.

A partitioned table's rows can be kept in a cache in that layout (`saved_partitions(rows=True)`,
followed by zero rows to append to); a table filled from such a cache keeps its vectors in the
cache's copy-on-write memory map, so only the rows a search or a write reaches become resident.

A table whose keys are small non-negative integers (`int_keys=True`: the roots table, keyed by tree
rowid) also keeps key -> row as an array, shared by versions until one changes it, so `rows_of`
finds the rows of many keys in one gather."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from memforest.resident.cow import CowMap
from memforest.resident.partitions import Partitions

_MIN_ROWS = 1024
EXACT_ROWS = 16384
PARTITION_ROWS = 512  # most rows per partition
PROBE_MIN = 2048
PROBE_FACTOR = 8
_MAX_RUNS = 64  # a probe over more runs of consecutive rows than this gathers them instead


def probe_size(k: int) -> int:
    """Rows a partitioned table scores for a top-k search."""
    return max(PROBE_MIN, PROBE_FACTOR * k)


Given = np.ndarray | Callable[[], np.ndarray]  # an array, or a function giving it when it is needed


def slack_rows(n: int) -> int:
    """Zero rows kept after `n` saved rows, so a table filled from them appends in place."""
    return max(_MIN_ROWS, n // 4)


@dataclass(frozen=True)
class SavedPartitions:
    """A table's partitions by key (as `VectorTable.saved_partitions` gives them, for a cache): the
    centroids, and the keys of partition i's live rows at keys[bounds[i]:bounds[i + 1]]; optionally
    the rows themselves: `vecs`, their vectors in `keys` order followed by zero rows (`slack_rows`)
    a table filled from them appends to (writable: a private, copy-on-write map of the cache), and
    `meta`, their row numbers."""

    centroids: np.ndarray
    keys: list[Hashable]
    bounds: np.ndarray
    vecs: np.ndarray | None = None
    meta: np.ndarray | None = None


class _Rows:
    """The shared, append-only storage: vectors, their keys and optional per-row numbers."""

    def __init__(self, dim: int, capacity: int, vecs: np.ndarray | None = None) -> None:
        self.vecs = np.zeros((capacity, dim), np.float32) if vecs is None else vecs
        self.keys: list[Any] = []
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
        self._key_rows = np.full(_MIN_ROWS, -1, np.int64) if int_keys else None  # key -> row, -1 for none
        self._own_key_rows = True

    def __len__(self) -> int:
        return len(self._slot)

    def __contains__(self, key: object) -> bool:
        return key in self._slot

    def keys(self) -> Iterable[Hashable]:
        return iter(self._slot)

    def fork(self) -> VectorTable:
        """The next version; this one stays unchanged (and may no longer append)."""
        out = VectorTable.__new__(VectorTable)
        out.dim, out._exact, out._rows, out._n = self.dim, self._exact, self._rows, self._n
        out._live, out._slot, out._own_tail = self._live.copy(), self._slot.fork(), True
        out._own_from = self._own_from = self._n
        out._parts, out._own_parts = self._parts, self._parts is None
        out._key_rows, out._own_key_rows = self._key_rows, False
        self._own_key_rows = False
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
        """The vectors of `keys` (held by the table), gathered into one new array."""
        return self._rows.vecs[self._slots(keys)]

    def meta(self, key: Hashable) -> np.ndarray:
        return self._rows.meta[self._slot[key]]

    def upsert(self, keys: Sequence[Hashable], vecs: np.ndarray, meta: np.ndarray | None = None) -> None:
        """Set the vectors (and row numbers) of `keys`; a key whose row already holds them is left as
        it is (no new row)."""
        if not keys:
            return
        vecs = np.asarray(vecs, np.float32).reshape(len(keys), self.dim)
        meta_rows = np.zeros((len(keys), 2)) if meta is None else np.broadcast_to(meta, (len(keys), 2))
        held = [(i, slot) for i, slot in enumerate(map(self._slot.get, keys)) if slot is not None]
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
        for i, key in enumerate(keys):
            self._slot[key] = lo + i
        if self._key_rows is not None:
            self._set_key_rows(np.asarray(keys, np.int64), np.arange(lo, hi))
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
        slots = [self._slot.get(k) for k in saved.keys]
        if len(slots) != len(self._slot) or None in slots or len(set(slots)) != len(slots):
            self._parts, self._own_parts = Partitions.build(self._rows.vecs, self.live_rows(), self._live,
                                                            PARTITION_ROWS), True
            self._compact()
            return False
        rows = np.asarray(slots, np.int64)
        bounds = saved.bounds.tolist()
        members = [rows[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:])]
        self._parts = Partitions(np.array(saved.centroids, np.float32), members, PARTITION_ROWS)
        self._own_parts = True
        self._compact()  # laid out partition by partition, as the saved table was
        return True

    def _fill_as_saved(self, keys: Sequence[Hashable], vecs: Given, meta: Given | None,
                       saved: SavedPartitions) -> bool:
        """`fill` with `saved` partitions holding exactly `keys` (each once): the table takes their
        rows when they carry them, else gathers `vecs` straight into the saved layout (partition by
        partition), as filling, then compacting, lays them out. False, with nothing changed, when
        the keys differ."""
        n = len(keys)
        position = dict(zip(keys, range(n)))
        if len(position) != n or len(saved.keys) != n:
            return False
        order = list(map(position.get, saved.keys))
        if None in order:
            return False
        at = np.asarray(order, np.int64)
        if n and int(np.bincount(at, minlength=n).max()) != 1:  # each key once
            return False
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
        rows.keys = list(map(keys.__getitem__, at.tolist()))  # the caller's key objects, not the saved copies
        self._rows, self._n, self._own_tail, self._own_from = rows, n, True, 0
        self._live = np.zeros(capacity, bool)
        self._live[:n] = True
        self._slot = CowMap.over(dict(zip(rows.keys, range(n))))
        if self._key_rows is not None:
            self._key_rows, self._own_key_rows = np.full(len(self._key_rows), -1, np.int64), True
            self._set_key_rows(np.asarray(rows.keys, np.int64), np.arange(n))
        bounds = saved.bounds.tolist()
        members = [np.arange(lo, hi, dtype=np.int64) for lo, hi in zip(bounds[:-1], bounds[1:])]
        self._parts = Partitions(np.array(saved.centroids, np.float32), members, PARTITION_ROWS)
        self._own_parts = True
        return True

    def saved_partitions(self, rows: bool = False) -> SavedPartitions | None:
        """The partitions searches go through, by key (None while the table is searched exactly);
        with `rows`, their vectors too, in that order, followed by `slack_rows` zero rows."""
        parts = self.partitions
        if parts is None:
            return None
        keys = self._rows.keys
        members = [m[self._live[m]] for m in parts.members]
        flat = [keys[r] for m in members for r in m.tolist()]
        bounds = np.cumsum([0, *(len(m) for m in members)]).astype(np.int64)
        if not rows:
            return SavedPartitions(parts.centroids.copy(), flat, bounds)
        order = np.concatenate(members) if members else np.zeros(0, np.int64)
        vecs = np.zeros((len(order) + slack_rows(len(order)), self.dim), np.float32)
        np.take(self._rows.vecs, order, axis=0, out=vecs[: len(order)])
        return SavedPartitions(parts.centroids.copy(), flat, bounds, vecs, self._rows.meta[order])

    def remove(self, keys: Iterable[Hashable]) -> None:
        gone = []
        for key in keys:
            slot = self._slot.pop(key, None)
            if slot is not None:
                self._live[slot] = False
                gone.append(key)
        if gone and self._key_rows is not None:
            self._set_key_rows(np.asarray(gone, np.int64), -1)

    def live_rows(self) -> np.ndarray:
        """Row numbers of the live rows."""
        return np.flatnonzero(self._live[: self._n])

    def scores(self, query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(row numbers, inner products) of the live rows for one query vector."""
        n = self._n
        live = np.flatnonzero(self._live[:n])
        sims = self._rows.vecs[:n] @ np.asarray(query, np.float32).reshape(-1)
        return live, sims[live]

    def search(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(keys, scores) of the top-k rows for one query vector, best first."""
        return self.search_meta(query, k)[:2]

    def search_meta(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`search`, and the row numbers (meta) of the rows found. Keys come back as an array of
        their kind (integers, or text for a table keyed by text)."""
        rows, sims = _best(*self.candidate_scores(query, probe_size(k)), k)
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
        parts = self.partitions
        if parts is None and len(queries) == 1:
            pairs = [self.scores(queries[0])]
        elif parts is None:  # exact: one product of every row with every query
            live = self.live_rows()
            every = self._rows.vecs[: self._n] @ queries.T
            pairs = [(live, every[live, i]) for i in range(len(queries))]
        else:
            centroid_scores = queries @ parts.centroids.T
            pairs = []
            for i, q in enumerate(queries):
                rows = np.sort(parts.probe(centroid_scores[i], candidates))
                sims = self._probe_scores(rows, q)
                live = self._live[rows]
                pairs.append((rows[live], sims[live]))
        return [(rows[sims >= floor], sims[sims >= floor]) for rows, sims in pairs]

    def _probe_scores(self, rows: np.ndarray, q: np.ndarray) -> np.ndarray:
        """Inner products of `q` with `rows` (ascending): run by run of consecutive rows, read in
        place, when they form few runs (the layout partitions get); else gathered."""
        vecs = self._rows.vecs
        starts = np.flatnonzero(np.diff(rows) != 1) + 1
        if len(starts) >= _MAX_RUNS:
            return vecs[rows] @ q
        bounds = [0, *starts.tolist(), len(rows)]
        firsts = rows[bounds[:-1]].tolist()
        return np.concatenate([vecs[f: f + hi - lo] @ q
                               for f, lo, hi in zip(firsts, bounds[:-1], bounds[1:])])

    def top(self, rows: np.ndarray, sims: np.ndarray, k: int) -> list[tuple[Hashable, float]]:
        rows, sims = _best(rows, sims, k)
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
        table = self._key_rows
        inside = (keys >= 0) & (keys < len(table))
        return np.where(inside, table[np.where(inside, keys, 0)], -1)

    def _set_key_rows(self, keys: np.ndarray, rows: np.ndarray | int) -> None:
        """Write key -> row entries into this version's own copy of the key array."""
        assert self._key_rows is not None
        if len(keys) and (keys.min() < 0):
            raise ValueError("an int_keys table takes non-negative integer keys")
        need = int(keys.max()) + 1 if len(keys) else 0
        if not self._own_key_rows or need > len(self._key_rows):
            grown = np.full(max(len(self._key_rows), 2 * need), -1, np.int64)
            grown[: len(self._key_rows)] = self._key_rows
            self._key_rows, self._own_key_rows = grown, True
        self._key_rows[keys] = rows

    def row_scores(self, rows: np.ndarray, query: np.ndarray) -> np.ndarray:
        """Inner products of `query` with the given rows."""
        return self._rows.vecs[rows] @ np.asarray(query, np.float32).reshape(-1)

    def row_meta(self, rows: np.ndarray) -> np.ndarray:
        return self._rows.meta[rows]

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
            self._key_rows, self._own_key_rows = np.full(len(self._key_rows), -1, np.int64), True
            self._set_key_rows(np.asarray(keys, np.int64), np.arange(len(keys)))
        if self._parts is not None:
            new_row = np.full(len(old.vecs), -1, np.int64)
            new_row[slots] = np.arange(len(keys))
            self._writable_parts().remap(new_row)


def _given(value: Given) -> np.ndarray:
    return value() if callable(value) else value


def _given_meta(meta: Given | None) -> np.ndarray | None:
    return None if meta is None else _given(meta)


def _best(rows: np.ndarray, sims: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k best (rows, scores), best first, ties by row number."""
    if k <= 0 or not len(rows):
        return rows[:0], sims[:0]
    if k < len(rows):
        part = np.argpartition(-sims, k - 1)[:k]
        rows, sims = rows[part], sims[part]
    order = np.lexsort((rows, -sims))
    return rows[order], sims[order]
