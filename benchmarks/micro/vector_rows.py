"""The rows and versioned writes the vector-search suite measures on (random, clustered or real
MiniLM vectors), its search shapes, and the exact answers it checks every method against."""

from __future__ import annotations

import contextlib
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from memforest.resident.vector_table import probe_size
from memforest.state import NEAR_DUPLICATE_CANDIDATES

DIM = 384


@dataclass(frozen=True)
class Shape:
    """`batch` queries for their top `k`, or (with `floor`) for every row scoring at least `floor`."""

    batch: int
    k: int = 0
    floor: float | None = None

    @property
    def name(self) -> str:
        return f"{self.batch}@{self.floor}" if self.floor is not None else f"{self.batch}x{self.k}"

    @property
    def candidates(self) -> int:
        """Rows a partitioned table (and the comparable IVF probe) scores per query."""
        return NEAR_DUPLICATE_CANDIDATES if self.floor is not None else probe_size(self.k)


def parse_shapes(text: str) -> list[Shape]:
    out = []
    for part in filter(None, text.split(",")):
        if "@" in part:
            batch, floor = part.split("@")
            out.append(Shape(int(batch), 0, float(floor)))
        else:
            batch, k = part.split("x")
            out.append(Shape(int(batch), int(k)))
    return out


# ---- rows -------------------------------------------------------------------------------------

def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


class Rows:
    """Draws rows and queries of one kind for a table of about `n` rows: `take(m)` gives the next m,
    never the same twice. Clustered rows are shaped after MiniLM vectors of LongMemEval turns: a shared
    direction, a covariance spectrum falling as 1/i (fitted to theirs), and groups of about 8 rows
    around a centre (a row's nearest other row ~0.73 at 1e4 rows, its 10th ~0.5, its 200th ~0.34;
    the real ones: 0.66, 0.46, 0.28)."""

    def __init__(self, kind: str, seed: int, n: int, pool: np.ndarray | None = None) -> None:
        self.kind, self._rng = kind, np.random.default_rng(seed)
        self._pool, self._at = pool, 0
        if kind == "clustered":
            rotation = np.linalg.qr(self._rng.standard_normal((DIM, DIM)))[0]
            scale = np.sqrt(0.186 * np.arange(1, DIM + 1) ** -0.96)[:, None]
            self._basis = (scale * rotation.T).astype(np.float32)
            self._shared = 0.3 * unit(self._rng.standard_normal(DIM))
            self._centres = self._gaussian(n // 8 + 1)
        elif kind != "random" and pool is None:
            raise ValueError(f"unknown kind of rows {kind!r} (random, clustered)")

    def _gaussian(self, m: int) -> np.ndarray:
        return self._rng.standard_normal((m, DIM)).astype(np.float32) @ self._basis

    def take(self, n: int) -> np.ndarray:
        if self._pool is not None:
            if self._at + n > len(self._pool):
                raise ValueError(f"{len(self._pool)} real vectors are too few for {self._at + n} rows")
            out, self._at = self._pool[self._at: self._at + n], self._at + n
            return out
        if self.kind == "random":
            return unit(self._rng.standard_normal((n, DIM)))
        centres = self._centres[self._rng.integers(len(self._centres), size=n)]
        return unit(self._shared + 0.8 * centres + 0.6 * self._gaussian(n))


def load_vectors(path: Path) -> np.ndarray:
    """Unit rows of width DIM from an .npy file or an embedding cache (`vectors.sqlite`), shuffled
    deterministically (a cache's rows come in key order)."""
    if path.suffix == ".npy":
        vecs = np.load(path).astype(np.float32)
    else:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as con:
            blobs = [b for (b,) in con.execute("SELECT vec FROM vectors ORDER BY key")]
        vecs = np.stack([np.frombuffer(b, np.float32) for b in blobs if len(b) == 4 * DIM])
    vecs = vecs[np.linalg.norm(vecs, axis=1) > 0]
    return unit(vecs[np.random.default_rng(0).permutation(len(vecs))])


# ---- writes -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Write:
    """One version's changes: keys given new vectors, keys removed, keys added."""

    changed: np.ndarray
    changed_vecs: np.ndarray
    removed: np.ndarray
    added: np.ndarray
    added_vecs: np.ndarray


def make_writes(rows: Rows, n: int, writes: int, changed: int, seed: int) -> list[Write]:
    """`writes` versions over keys 0..n-1: each changes changed/2 live keys, removes changed/4 and adds
    changed/4 new ones."""
    rng = np.random.default_rng(seed)
    live, nxt, out = list(range(n)), n, []
    for _ in range(writes):
        pick = rng.choice(len(live), size=changed // 2 + changed // 4, replace=False)
        chosen = [live[i] for i in pick.tolist()]
        up, gone = np.array(chosen[: changed // 2], np.int64), np.array(chosen[changed // 2:], np.int64)
        added = np.arange(nxt, nxt + changed // 4, dtype=np.int64)
        nxt += len(added)
        dead = set(gone.tolist())
        live = [k for k in live if k not in dead] + added.tolist()
        out.append(Write(up, rows.take(len(up)), gone, added, rows.take(len(added))))
    return out


@dataclass
class Reference:
    """Exact float64 scores of the live rows for each query."""

    keys: np.ndarray
    scores: np.ndarray  # live rows x queries
    at: dict[int, int] = field(init=False)

    def __post_init__(self) -> None:
        self.at = dict(zip(self.keys.tolist(), range(len(self.keys))))

    def quality(self, found: list[np.ndarray], shape: Shape, tol: float = 1e-5) -> dict[str, Any]:
        """Whether each query's keys are an exact answer (ties within `tol` either way), and the recall
        of the exact answer (over every query's: top k, or every row at or above the floor)."""
        agree, hit, wanted = 0, 0, 0
        for i, keys in enumerate(found):
            col, got = self.scores[:, i], set(keys.tolist())
            if shape.floor is not None:
                cut, truth = shape.floor, np.flatnonzero(col >= shape.floor)
                size_ok = True
            else:
                truth = np.argsort(-col, kind="stable")[: shape.k]
                cut = float(col[truth[-1]]) if len(truth) else np.inf
                size_ok = len(keys) == len(truth)
            scored = col[[self.at[k] for k in got]]
            must = set(self.keys[col > cut + tol].tolist())
            agree += size_ok and len(got) == len(keys) and bool((scored >= cut - tol).all()) and must <= got
            hit += len(set(self.keys[truth].tolist()) & got)
            wanted += len(truth)
        return {"agreement": round(agree / len(found), 4),
                "recall": round(hit / wanted, 4) if wanted else None, "exact_hits": wanted}
