"""Canonicalisation looks for candidates a block of rows at a time: the same pairs as the full
similarity matrix, with memory bounded by the block."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from memforest.config import CanonConfig
from memforest.facts.canonical import _pairs_to_check, matrix_neighbours


def dense_pairs(pending: list[int], existing_ids: list[str], existing: np.ndarray, emb: np.ndarray,
                cfg: CanonConfig, within_batch: bool) -> list[tuple[int, str]]:
    """The reference: the whole pending x (existing + pending) similarity matrix at once."""
    pairs: list[tuple[int, str]] = []
    if not pending:
        return pairs
    sub = emb[pending]
    sims_old = sub @ existing.T if len(existing_ids) else np.zeros((len(pending), 0), np.float32)
    sims_new = sub @ sub.T
    for row, i in enumerate(pending):
        scored = [(float(s), existing_ids[j]) for j, s in enumerate(sims_old[row]) if s >= cfg.min_cosine]
        if within_batch:
            scored += [(float(sims_new[row, c]), f"#{pending[c]}") for c in range(row)
                       if sims_new[row, c] >= cfg.min_cosine]
        scored.sort(key=lambda x: -x[0])
        pairs.extend((i, ref) for _, ref in scored[: cfg.candidates][: cfg.max_llm_checks])
    return pairs


def unit_rows(rng: np.random.Generator, n: int, dim: int, groups: int) -> np.ndarray:
    """Rows clustered around `groups` centres (many pairs above the threshold), some exact copies."""
    centres = rng.normal(size=(groups, dim))
    rows = centres[rng.integers(0, groups, n)] + rng.normal(scale=0.05, size=(n, dim))
    rows[rng.random(n) < 0.2] = centres[0]
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("within_batch", [True, False])
def test_blockwise_candidates_equal_the_dense_matrix(seed: int, within_batch: bool) -> None:
    rng = np.random.default_rng(seed)
    n_old, n_new, dim = int(rng.integers(0, 30)), int(rng.integers(1, 40)), 16
    existing = unit_rows(rng, n_old, dim, 3)
    emb = unit_rows(rng, n_new, dim, 3)
    pending = sorted(rng.choice(n_new, size=int(rng.integers(1, n_new + 1)), replace=False).tolist())
    ids = [f"f{j}" for j in range(n_old)]
    cfg = CanonConfig(candidates=int(rng.integers(1, 10)), min_cosine=0.9,
                      max_llm_checks=int(rng.integers(1, 6)))
    want = dense_pairs(pending, ids, existing, emb, cfg, within_batch)
    assert want or not within_batch or seed > 2  # the clustered inputs do produce pairs
    for block_cells in (1, 7, 64, 1000, 1 << 22):
        got = _pairs_to_check(pending, matrix_neighbours(ids, existing), emb, cfg, within_batch,
                              block_cells=block_cells)
        assert got == want, block_cells


def test_candidate_search_memory_is_bounded_by_the_block() -> None:
    n, dim = 3000, 8  # the dense matrix would be 3000 x 3000 float32 = 34 MiB
    emb = unit_rows(np.random.default_rng(0), n, dim, 50)
    cfg = CanonConfig(min_cosine=0.999, candidates=2, max_llm_checks=1)
    tracemalloc.start()
    _pairs_to_check(list(range(n)), matrix_neighbours([], np.zeros((0, dim), np.float32)), emb, cfg, True,
                    block_cells=1 << 17)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 8 * 2**20, peak  # a few blocks of 0.5 MiB plus the pairs, far below the 34 MiB matrix
