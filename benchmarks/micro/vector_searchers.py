"""The rows, the versioned writes and the search structures the vector-search suite compares
(`benchmarks.micro.vector_search`): MemForest's tables, numpy floors and faiss (where installed)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from benchmarks.micro.vector_rows import DIM, Shape, Write
from memforest.index.forest_index import ROOTS_EXACT_ROWS
from memforest.resident.vector_table import EXACT_ROWS, PARTITION_ROWS, VectorTable

VECTOR_FLAGS = {"avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "amx_tile"}
INSTALL_FAISS = "faiss is not installed (pip install faiss-cpu==1.15.1): its methods are left out"


class Searcher(Protocol):
    def write(self, w: Write) -> None: ...

    def search(self, queries: np.ndarray, shape: Shape) -> list[np.ndarray]:
        """The keys found for each query (best first for a top-k)."""
        ...


class TableVersions:
    """A `VectorTable`, forked at every write; the previous version is kept, as a reader holds it."""

    def __init__(self, keys: np.ndarray, vecs: np.ndarray, exact_rows: int) -> None:
        self.table = VectorTable(DIM, exact_rows=exact_rows)
        self.table.fill(keys.tolist(), vecs)
        self.previous: VectorTable | None = None

    def write(self, w: Write) -> None:
        nxt = self.table.fork()
        nxt.upsert([*w.changed.tolist(), *w.added.tolist()], np.concatenate([w.changed_vecs, w.added_vecs]))
        nxt.remove(w.removed.tolist())
        self.previous, self.table = self.table, nxt

    def search(self, queries: np.ndarray, shape: Shape) -> list[np.ndarray]:
        t = self.table
        if shape.floor is not None:
            return [np.array([t.row_key(r) for r in rows.tolist()], np.int64)
                    for rows, _ in t.above(queries, shape.floor, shape.candidates)]
        if len(queries) == 1:
            return [t.search_meta(queries[0], shape.k)[0]]
        return [np.array([key for key, _ in t.top(rows, sims, shape.k)], np.int64)
                for rows, sims in t.above(queries, -np.inf, shape.candidates)]


class AppendLog:
    """Every row any version wrote, in write order (storage doubling as it fills, as a table's does),
    with the keys and the newest version's live mask."""

    def __init__(self, keys: np.ndarray, vecs: np.ndarray) -> None:
        self.n = len(keys)
        self._vecs = np.zeros((max(1024, 2 * self.n), DIM), np.float32)
        self._keys = np.zeros(len(self._vecs), np.int64)
        self._vecs[: self.n], self._keys[: self.n] = vecs, keys
        self.live = np.ones(self.n, bool)
        self.row_of = dict(zip(keys.tolist(), range(self.n)))

    @property
    def vecs(self) -> np.ndarray:
        return self._vecs[: self.n]

    @property
    def keys(self) -> np.ndarray:
        return self._keys[: self.n]

    def write(self, w: Write) -> np.ndarray:
        """Apply `w` (the live mask copied, as a new version's); the rows appended."""
        keys = np.concatenate([w.changed, w.added])
        new = np.concatenate([w.changed_vecs, w.added_vecs])
        lo, hi = self.n, self.n + len(keys)
        if hi > len(self._vecs):
            self._vecs = np.concatenate([self._vecs, np.zeros_like(self._vecs)])
            self._keys = np.concatenate([self._keys, np.zeros_like(self._keys)])
        self._vecs[lo:hi], self._keys[lo:hi], self.n = new, keys, hi
        live = np.ones(hi, bool)
        live[:lo] = self.live
        live[[self.row_of[k] for k in [*w.changed.tolist(), *w.removed.tolist()]]] = False
        self.live = live
        self.row_of.update(zip(keys.tolist(), range(lo, hi)))
        for k in w.removed.tolist():
            del self.row_of[k]
        return new

    def live_rows(self) -> tuple[np.ndarray, np.ndarray]:
        return self.keys[self.live], self.vecs[self.live]


def _top(scores: np.ndarray, k: int) -> np.ndarray:
    """Positions of the k best scores of each column, best first."""
    k = min(k, len(scores))
    part = np.argpartition(-scores, k - 1, axis=0)[:k]
    best = np.take_along_axis(scores, part, axis=0)
    return np.take_along_axis(part, np.argsort(-best, axis=0, kind="stable"), axis=0)


class NumpyFlat:
    """A contiguous matrix of the live rows, rebuilt at every version: the floor, without versions."""

    def __init__(self, keys: np.ndarray, vecs: np.ndarray) -> None:
        self.log = AppendLog(keys, vecs)
        self.keys, self.vecs = self.log.live_rows()

    def write(self, w: Write) -> None:
        self.log.write(w)
        self.keys, self.vecs = self.log.live_rows()

    def search(self, queries: np.ndarray, shape: Shape) -> list[np.ndarray]:
        scores = self.vecs @ queries.T
        if shape.floor is not None:
            return [self.keys[np.flatnonzero(scores[:, i] >= shape.floor)] for i in range(len(queries))]
        at = _top(scores, shape.k)
        return [self.keys[at[:, i]] for i in range(len(queries))]


class NumpyMasked:
    """The same storage as `FaissKnn` (every row written, the version's live mask), searched with
    numpy: one product with every row, retired rows set to -inf, then a partial sort."""

    def __init__(self, keys: np.ndarray, vecs: np.ndarray) -> None:
        self.log = AppendLog(keys, vecs)

    def write(self, w: Write) -> None:
        self.log.write(w)

    def search(self, queries: np.ndarray, shape: Shape) -> list[np.ndarray]:
        scores = self.log.vecs @ queries.T
        scores[~self.log.live] = -np.inf
        keys = self.log.keys
        if shape.floor is not None:
            return [keys[np.flatnonzero(scores[:, i] >= shape.floor)] for i in range(len(queries))]
        at = _top(scores, shape.k)
        return [keys[at[:, i]] for i in range(len(queries))]


class FaissIndex:
    """A faiss index kept in step with the versions in one of three ways (`how`): rebuilt from the live
    rows ("flat"), or changed in place ("flat_idmap"; "ivf": `nlist` lists trained on the first
    version's rows)."""

    def __init__(self, faiss: Any, how: str, keys: np.ndarray, vecs: np.ndarray, nlist: int = 1) -> None:
        self.faiss, self.how, self.nlist = faiss, how, nlist
        self.log = AppendLog(keys, vecs) if how == "flat" else None
        if how == "ivf":
            self.index = faiss.IndexIVFFlat(faiss.IndexFlatIP(DIM), DIM, nlist, faiss.METRIC_INNER_PRODUCT)
            self.index.cp.min_points_per_centroid = 1
            self.index.train(vecs)
            self.index.add_with_ids(vecs, keys)
        elif how == "flat_idmap":
            self.index = faiss.IndexIDMap2(faiss.IndexFlatIP(DIM))
            self.index.add_with_ids(vecs, keys)
        else:
            self.index, self.keys = faiss.IndexFlatIP(DIM), keys
            self.index.add(vecs)

    def write(self, w: Write) -> None:
        if self.log is not None:
            self.log.write(w)
            self.keys, vecs = self.log.live_rows()
            self.index = self.faiss.IndexFlatIP(DIM)
            self.index.add(vecs)
            return
        self.index.remove_ids(np.concatenate([w.changed, w.removed]))
        self.index.add_with_ids(np.concatenate([w.changed_vecs, w.added_vecs]),
                                np.concatenate([w.changed, w.added]))

    def search(self, queries: np.ndarray, shape: Shape) -> list[np.ndarray]:
        params = self.faiss.SearchParametersIVF(nprobe=self.nprobe(shape)) if self.how == "ivf" else None
        if shape.floor is not None:
            lims, _, ids = self.index.range_search(queries, shape.floor, params=params)
            found = [ids[lims[i]: lims[i + 1]] for i in range(len(queries))]
        else:
            found = list(self.index.search(queries, shape.k, params=params)[1])
        return [self.keys[f[f >= 0]] if self.how == "flat" else f[f >= 0] for f in found]

    def nprobe(self, shape: Shape) -> int:
        """Lists probed: as many as hold the rows a partitioned table scores, at the mean list size."""
        return max(1, min(self.nlist, math.ceil(shape.candidates * self.nlist / max(1, self.index.ntotal))))


class FaissKnn:
    """No index: faiss's search functions (`knn_inner_product`, `range_search_inner_product`) over
    the rows every version wrote, in place (an `AppendLog`, stored as a table stores them), through the
    version's live mask (`IDSelectorBitmap`, packed at each write)."""

    def __init__(self, faiss: Any, keys: np.ndarray, vecs: np.ndarray) -> None:
        self.faiss, self.log = faiss, AppendLog(keys, vecs)
        self._mask()

    def _mask(self) -> None:
        self.bitmap = np.packbits(self.log.live, bitorder="little")
        self.selector = self.faiss.IDSelectorBitmap(len(self.log.live), self.faiss.swig_ptr(self.bitmap))

    def write(self, w: Write) -> None:
        self.log.write(w)
        self._mask()

    def search(self, queries: np.ndarray, shape: Shape) -> list[np.ndarray]:
        f, rows, q = self.faiss, self.log.vecs, np.ascontiguousarray(queries, np.float32)
        if shape.floor is None:
            dist = np.empty((len(q), shape.k), np.float32)
            at = np.empty((len(q), shape.k), np.int64)
            f.knn_inner_product(f.swig_ptr(q), f.swig_ptr(rows), DIM, len(q), len(rows), shape.k,
                                f.swig_ptr(dist), f.swig_ptr(at), self.selector)
            return [self.log.keys[a[a >= 0]] for a in at]
        res = f.RangeSearchResult(len(q))
        f.range_search_inner_product(f.swig_ptr(q), f.swig_ptr(rows), DIM, len(q), len(rows), shape.floor,
                                     res, self.selector)
        lims = f.rev_swig_ptr(res.lims, len(q) + 1).copy()
        found = f.rev_swig_ptr(res.labels, int(lims[-1])).copy() if lims[-1] else np.zeros(0, np.int64)
        return [self.log.keys[found[lims[i]: lims[i + 1]]] for i in range(len(q))]


def import_faiss() -> Any | None:
    try:
        import faiss
    except ImportError:
        return None
    return faiss


# ---- measuring ------------------------------------------------------------------------------

EXACT = ("table_exact", "numpy_flat", "numpy_masked", "faiss_flat", "faiss_knn_masked", "faiss_flat_idmap")
APPROXIMATE = ("table_partitioned", "faiss_ivf")


def partition_bound(n: int) -> int | None:
    """The library's exact bound below which a table of n rows is searched exactly: the roots table's
    past `ROOTS_EXACT_ROWS`, every table's past `EXACT_ROWS` (None: no table of n rows is partitioned)."""
    return EXACT_ROWS if n > EXACT_ROWS else ROOTS_EXACT_ROWS if n > ROOTS_EXACT_ROWS else None


def build_searchers(keys: np.ndarray, vecs: np.ndarray, most: int, faiss: Any | None,
                    ) -> tuple[dict[str, Searcher], dict[str, float]]:
    """Every method over the first version (`most`: an exact bound no version reaches), and the
    milliseconds each took to build."""
    bound = partition_bound(len(keys))
    makers: dict[str, Callable[[], Searcher]] = {
        "table_exact": lambda: TableVersions(keys, vecs, most),
        "numpy_flat": lambda: NumpyFlat(keys, vecs),
        "numpy_masked": lambda: NumpyMasked(keys, vecs),
    }
    if bound is not None:
        makers["table_partitioned"] = lambda: TableVersions(keys, vecs, bound)
    if faiss is not None:
        for how in ("flat", "flat_idmap"):
            makers[f"faiss_{how}"] = _faiss_maker(faiss, how, keys, vecs)
        makers["faiss_knn_masked"] = lambda: FaissKnn(faiss, keys, vecs)
        if bound is not None:  # as many lists as `Partitions.build` trains partitions
            makers["faiss_ivf"] = _faiss_maker(faiss, "ivf", keys, vecs, -(-2 * len(keys) // PARTITION_ROWS))
    out, build_ms = {}, {}
    for name, make in makers.items():
        t = time.perf_counter()
        out[name] = make()
        build_ms[name] = round(1000 * (time.perf_counter() - t), 2)
    return out, build_ms


def _faiss_maker(faiss: Any, how: str, keys: np.ndarray, vecs: np.ndarray,
                 nlist: int = 1) -> Callable[[], Searcher]:
    return lambda: FaissIndex(faiss, how, keys, vecs, nlist)
