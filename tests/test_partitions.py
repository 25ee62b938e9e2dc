"""A vector table past EXACT_ROWS live rows searches the partitions nearest the query: versions stay
independent through splits and compactions, results are live rows with exact scores, and on
clustered vectors the top-k match exact search up to ties."""

from __future__ import annotations

import numpy as np
import pytest

import memforest.resident.vector_search as vs
import memforest.resident.vector_table as vt
from memforest.resident.vector_table import VectorTable


@pytest.fixture(autouse=True)
def small_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vt, "EXACT_ROWS", 300)
    monkeypatch.setattr(vt, "PARTITION_ROWS", 40)
    monkeypatch.setattr(vt, "PROBE_MIN", 120)
    monkeypatch.setattr(vt, "PROBE_FACTOR", 8)


def clustered(n: int, dim: int = 16, clusters: int = 30, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(clusters, dim))
    x = centres[rng.integers(0, clusters, n)] + 0.35 * rng.normal(size=(n, dim))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def exact_kth(vecs: np.ndarray, live: list[int], q: np.ndarray, k: int) -> float:
    return float(np.sort(vecs[live] @ q)[-k])


def test_a_large_table_is_partitioned_and_finds_the_exact_top_k_up_to_ties() -> None:
    vecs = clustered(2000)
    table = VectorTable(16)
    for lo in range(0, 2000, 25):  # as a memory grows: a few rows per operation
        table.upsert(list(range(lo, lo + 25)), vecs[lo: lo + 25])
    assert table._parts is not None and len(table._parts) > 2000 // 40
    assert all(len(m) <= 40 for m in table._parts.members)
    bulk = VectorTable(16)
    bulk.upsert(list(range(2000)), vecs)  # built at once (a store loaded): no partition over the bound either
    assert bulk._parts is not None and max(map(len, bulk._parts.members)) <= 40
    assert bulk._parts.sizes.tolist() == [len(m) for m in bulk._parts.members]
    rng = np.random.default_rng(1)
    queries = vecs[rng.integers(0, 2000, 50)] + 0.3 * rng.normal(size=(50, 16)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    found = []
    for q in queries:
        ids, scores = table.search(q, 10)
        assert np.allclose(scores, vecs[ids] @ q, atol=1e-5) and list(scores) == sorted(scores, reverse=True)
        found.append(np.mean(vecs[ids] @ q >= exact_kth(vecs, list(range(2000)), q, 10) - 1e-6))
    assert np.mean(found) >= 0.95
    assert table.candidate_scores(queries[0], 120)[0].size < 2000 // 2  # a probe, not a scan


def test_partitioned_versions_are_independent_through_splits_removals_and_compaction() -> None:
    vecs = clustered(1500, seed=2)
    table = VectorTable(16)
    table.upsert(list(range(400)), vecs[:400])
    old = table
    before = [old.search(q, 5) for q in vecs[:20]]
    new = old.fork()
    for lo in range(400, 1500, 50):
        new.upsert(list(range(lo, lo + 50)), vecs[lo: lo + 50])
    new.remove(range(0, 200))
    for _ in range(8):  # rewrite the same keys: retired rows outnumber live ones, the table compacts
        new.upsert(list(range(200, 400)), vecs[200:400])
    for q, (ids, scores) in zip(vecs[:20], before):
        again = old.search(q, 5)
        assert again[0].tolist() == ids.tolist() and np.array_equal(again[1], scores)
    live = set(range(200, 1500))
    for q in vecs[200:240]:
        ids, _ = new.search(q, 10)
        assert set(ids.tolist()) <= live
    ids, _ = new.search(vecs[300], 1)
    assert ids.tolist() == [300] and len(new) == 1300 and len(old) == 400


def test_near_duplicates_above_a_floor_are_found_in_a_partitioned_table() -> None:
    vecs = clustered(1200, seed=3)
    table = VectorTable(16)
    for lo in range(0, 1200, 100):
        table.upsert(list(range(lo, lo + 100)), vecs[lo: lo + 100])
    for i in (5, 500, 1100):
        rows, sims = table.above(vecs[i: i + 1] * 1.0, 0.999, 64)[0]
        assert i in [table.row_key(r) for r in rows.tolist()] and (sims >= 0.999).all()


def test_either_side_of_a_fork_may_change_without_touching_the_other() -> None:
    vecs = clustered(900, seed=4)
    table = VectorTable(16)
    table.upsert(list(range(600)), vecs[:600])
    fork = table.fork()
    shared = fork._parts
    assert shared is not None
    members = [m.copy() for m in shared.members]
    table.upsert(list(range(600, 900)), vecs[600:900])  # the original changes after the fork
    assert fork._parts is shared and table._parts is not shared
    assert [m.tolist() for m in shared.members] == [m.tolist() for m in members]
    ids, _ = fork.search(vecs[700], 5)
    assert max(ids.tolist()) < 600 and len(fork) == 600


def test_partitions_are_laid_out_as_runs_of_rows_and_read_in_place_with_the_gathered_scores() -> None:
    vecs = clustered(1000, seed=5)
    table = VectorTable(16)
    table.upsert(list(range(1000)), vecs)  # built at once: laid out partition by partition
    parts = table._parts
    assert parts is not None
    for members in parts.members:
        assert members.tolist() == list(range(int(members.min()), int(members.min()) + len(members)))
    assert all(table.vector(k).tolist() == vecs[k].tolist() for k in (0, 499, 999))  # keys follow their rows
    table.upsert(list(range(1000, 1040)), clustered(40, seed=6))  # later rows join the runs' ends
    q = vecs[7]
    rows = np.sort(parts.probe(parts.centroids @ q, 120))
    assert len(np.flatnonzero(np.diff(rows) != 1)) < vs._MAX_RUNS
    vecs = table._rows.vecs
    assert np.allclose(vs.probe_scores(vecs, rows, q), vecs[rows] @ q, atol=1e-6)
    scattered = np.arange(0, 1040, 3)  # more runs than the bound: gathered
    assert np.allclose(vs.probe_scores(vecs, scattered, q), vecs[scattered] @ q, atol=1e-6)


def test_a_table_may_be_searched_exactly_up_to_a_lower_bound_of_its_own() -> None:
    vecs = clustered(250, seed=7)
    own, default = VectorTable(16, exact_rows=100), VectorTable(16)
    own.upsert(list(range(250)), vecs)
    default.upsert(list(range(250)), vecs)
    assert own.partitions is not None and own.fork().partitions is not None
    assert default.partitions is None  # 250 rows: below the default bound (300 here)


def test_an_int_keys_table_finds_the_rows_of_many_keys_as_row_of_does_in_every_version() -> None:
    vecs = clustered(1200, seed=5)
    table = VectorTable(16, int_keys=True)
    table.upsert(list(range(0, 400)), vecs[:400])
    versions = [table]
    rng = np.random.default_rng(6)
    for step in range(12):  # grow past the exact bound (partitions, compactions), rewrite and remove keys
        new = versions[-1].fork()
        lo = 400 + 60 * step
        new.upsert(list(range(lo, lo + 60)), vecs[lo: lo + 60])
        again = rng.choice(lo, 80, replace=False).tolist()
        new.upsert(again, vecs[again][::-1])
        new.remove(rng.choice(lo, 15, replace=False).tolist())
        versions.append(new)
    assert versions[-1]._parts is not None
    probe = np.array([-3, *range(0, 1300, 7), 10**6], np.int64)
    for v in versions:  # every version, old ones included, answers from its own rows
        expected = [-1 if (r := v.row_of(int(k))) is None else r for k in probe.tolist()]
        assert v.rows_of(probe).tolist() == expected
        held = [k for k in probe.tolist() if v.row_of(k) is not None]
        assert np.allclose(v.row_scores(v.rows_of(np.array(held)), vecs[0]),
                           [v.vector(k) @ vecs[0] for k in held], atol=1e-6)
    plain = VectorTable(16)
    plain.upsert([3, 5], vecs[:2])
    assert plain.rows_of(np.array([5, 4, 3])).tolist() == [1, -1, 0]
    with pytest.raises(ValueError, match="non-negative"):
        VectorTable(16, int_keys=True).upsert([-1], vecs[:1])


@pytest.mark.parametrize("seed", range(6))
def test_a_probe_takes_the_nearest_partitions_as_a_full_sort_orders_them(seed: int) -> None:
    """The partitions a probe selects first (ties included: scores drawn from a few values) are
    those a stable sort of every partition's score gives, in its order."""
    from memforest.resident.partitions import Partitions

    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 60))
    members = [np.arange(10 * p, 10 * p + int(rng.integers(0, 9))) for p in range(n)]
    parts = Partitions(np.zeros((n, 2), np.float32), members, max_size=16)
    for _ in range(30):
        scores = rng.choice(np.linspace(-1, 1, int(rng.integers(1, 6))), n).astype(np.float32)
        candidates = int(rng.integers(1, 80))
        order = np.argsort(-scores, kind="stable")
        take = int(np.searchsorted(np.cumsum(parts.sizes[order]), candidates)) + 1
        want = np.concatenate([members[p] for p in order[:take].tolist()])
        assert parts.probe(scores, candidates).tolist() == want.tolist()
