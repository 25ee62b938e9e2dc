"""The vector search suite end to end at a tiny size: its result's structure, and exact methods that
find the exact top k (never its timings)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from benchmarks.micro import vector_search, vector_searchers
from benchmarks.micro.vector_rows import Reference, Rows, Shape, make_writes, parse_shapes
from benchmarks.micro.vector_searchers import AppendLog

TINY = ["--sizes", "500,5000", "--queries", "8", "--reps", "1", "--writes", "3", "--changed", "16",
        "--questions-asked", "0"]


@pytest.fixture(scope="module")
def result() -> dict[str, Any]:
    return vector_search.main(TINY)


def test_result_structure(result: dict[str, Any]) -> None:
    assert result["machine"]["threads"] == 1
    assert [(r["rows"], r["n"]) for r in result["sizes"]] == [
        ("random", 500), ("random", 5000), ("clustered", 500), ("clustered", 5000)]
    for row in result["sizes"]:
        assert row["live"] == row["n"]  # each version removes as many keys as it adds
        assert set(row["write_ms"]) == set(row["build_ms"])
        assert [s["shape"] for s in row["searches"]] == ["1x10", "1x200", "32x10", "32@0.93"]
        for search in row["searches"]:
            for timed in search["us_per_query"].values():
                assert {"median", "p25", "p75", "ratio_to_table_exact", "agreement", "recall"} <= set(timed)
    small, large = result["sizes"][0], result["sizes"][1]
    assert small["partitions"] is None and "table_partitioned" not in small["write_ms"]
    assert large["partition_bound"] == 4096 and large["partitions"] > 1  # the roots table's bound
    assert result["retrieval"] == []


def test_exact_methods_find_the_exact_top_k(result: dict[str, Any]) -> None:
    faiss = vector_searchers.import_faiss() is not None
    exact = [m for m in vector_searchers.EXACT if faiss or not m.startswith("faiss")]
    for row in result["sizes"]:
        for search in row["searches"]:
            methods = search["us_per_query"]
            assert set(exact) <= set(methods)
            for name in exact:
                assert methods[name]["agreement"] == 1.0, (row["rows"], row["n"], search["shape"], name)


def test_exact_methods_agree_on_the_same_keys() -> None:
    """The table, the numpy floor and (when installed) faiss give the same top-k keys on a versioned
    table whose retired rows sit behind its live mask."""
    rows = Rows("clustered", 0, 500)
    keys, first = np.arange(500, dtype=np.int64), rows.take(500)
    writes = make_writes(rows, 500, 4, 16, 0)
    queries = rows.take(6)
    searchers, _ = vector_searchers.build_searchers(keys, first, 10_000, vector_searchers.import_faiss())
    for w in writes:
        for s in searchers.values():
            s.write(w)
    for shape in (Shape(1, 10), Shape(6, 10), Shape(1, 200), Shape(6, 0, 0.5)):
        asked = queries if shape.batch > 1 else queries[:1]
        found = {name: [set(f.tolist()) for f in s.search(asked, shape)]
                 for name, s in searchers.items() if name in vector_searchers.EXACT}
        assert len(found) >= 3
        assert all(f == found["table_exact"] for f in found.values()), shape


def test_append_log_follows_the_writes() -> None:
    rows = Rows("random", 1, 40)
    keys, first = np.arange(40, dtype=np.int64), rows.take(40)
    log = AppendLog(keys, first)
    writes = make_writes(rows, 40, 5, 8, 1)
    for w in writes:
        log.write(w)
    live_keys, live_vecs = log.live_rows()
    assert sorted(live_keys.tolist()) == sorted(log.row_of)
    last = writes[-1]
    assert not set(last.removed.tolist()) & set(live_keys.tolist())
    at = {k: i for i, k in enumerate(live_keys.tolist())}
    assert np.array_equal(live_vecs[[at[k] for k in last.added.tolist()]], last.added_vecs)


def test_reference_tolerates_ties_only() -> None:
    ref = Reference(np.array([10, 11, 12]), np.array([[0.9], [0.5], [0.5]]))
    assert ref.quality([np.array([10, 12])], Shape(1, 2))["agreement"] == 1.0  # 11 and 12 tie
    assert ref.quality([np.array([11, 12])], Shape(1, 2))["agreement"] == 0.0
    assert ref.quality([np.array([10])], Shape(1, 0, 0.8))["recall"] == 1.0


def test_shapes_parse() -> None:
    assert parse_shapes("1x10,32@0.93") == [Shape(1, 10), Shape(32, 0, 0.93)]
    assert Shape(32, 0, 0.93).candidates == 256
