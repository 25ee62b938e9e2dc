"""Inner-product search over the rows of a vector table (`vector_table`), given as arrays: every live
row scored exactly, or, past the table's exact bound, the live rows of the partitions nearest the
query (`partitions`). Partitions are laid out as runs of consecutive rows, so a probe reads them in
place, run by run, instead of gathering scattered rows."""

from __future__ import annotations

import numpy as np

from memforest.resident.partitions import Partitions
from memforest.resident.prefetch import runs_of, will_need

_MAX_RUNS = 64  # a probe over more runs of consecutive rows than this gathers them instead


def exact_scores(vecs: np.ndarray, n: int, live: np.ndarray,
                 query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row numbers, inner products) of the live rows among the first `n` rows of `vecs` (`live`:
    the mask of live rows) for one query vector."""
    rows = np.flatnonzero(live[:n])
    sims = vecs[:n] @ np.asarray(query, np.float32).reshape(-1)
    return rows, sims[rows]


def scores_above(vecs: np.ndarray, n: int, live: np.ndarray, parts: Partitions | None, queries: np.ndarray,
                 floor: float, candidates: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """For each row of `queries` (float32, one query a row), (row numbers, inner products) of the
    live rows scoring at least `floor`: among every live row of the first `n` when `parts` is None,
    else among the `candidates` rows of the partitions nearest the query."""
    if parts is None and len(queries) == 1:
        pairs = [exact_scores(vecs, n, live, queries[0])]
    elif parts is None:  # exact: one product of every row with every query
        rows = np.flatnonzero(live[:n])
        every = vecs[:n] @ queries.T
        pairs = [(rows, every[rows, i]) for i in range(len(queries))]
    else:
        centroid_scores = queries @ parts.centroids.T
        probes = [np.sort(parts.probe(scores, candidates)) for scores in centroid_scores]
        runs = [runs_of(probed) for probed in probes]
        for each in runs:  # every query's rows asked for before the first is scored
            _ask_ahead(vecs, each)
        pairs = []
        for probed, each, q in zip(probes, runs, queries):
            sims = probe_scores(vecs, probed, q, each)
            alive = live[probed]
            pairs.append((probed[alive], sims[alive]))
    return [(rows[sims >= floor], sims[sims >= floor]) for rows, sims in pairs]


def probe_scores(vecs: np.ndarray, rows: np.ndarray, q: np.ndarray,
                 runs: list[tuple[int, int]] | None = None) -> np.ndarray:
    """Inner products of `q` with `rows` of `vecs` (ascending): run by run of consecutive rows, read
    in place, when they form few runs (the layout partitions get); else gathered. `runs`: the runs of
    `rows` (`runs_of`), already asked for ahead by the caller; else they are asked for here."""
    if runs is None:
        runs = runs_of(rows)
        _ask_ahead(vecs, runs)
    if len(runs) > _MAX_RUNS:
        return vecs[rows] @ q
    return np.concatenate([vecs[f: f + n] @ q for f, n in runs])


def _ask_ahead(vecs: np.ndarray, runs: list[tuple[int, int]]) -> None:
    """Ask for the runs a probe reads in place (rows of a mapped file: read at once, ahead of the
    faults); runs too many to read in place are gathered, not asked for."""
    if len(runs) <= _MAX_RUNS:
        will_need(vecs, runs)


def best(rows: np.ndarray, sims: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k best (rows, scores), best first, ties by row number."""
    if k <= 0 or not len(rows):
        return rows[:0], sims[:0]
    if k < len(rows):
        part = np.argpartition(-sims, k - 1)[:k]
        rows, sims = rows[part], sims[part]
    order = np.lexsort((rows, -sims))
    return rows[order], sims[order]
