"""Every suite of `make bench` runs on tiny inputs (the scripted model and hash embedder where a model
is needed) and returns the rows it reports; the aggregator writes one JSON file per suite."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from benchmarks.datasets.synthetic import write_longmemeval_s_sized
from benchmarks.micro import __main__ as bench
from benchmarks.micro import (
    llm_throughput,
    merge_speed,
    retrieval_latency,
    retrieval_quality,
    structure,
    write_profile,
)

FAKE = ["-o", "llm.backend=scripted", "-o", "embedder.backend=hash", "-o", "embedder.dim=64"]


def test_structure_suite() -> None:
    out = structure.main(["--sizes", "200,800"])
    for order in ("arrival", "random"):
        rows = out[order]
        assert [r["size"] for r in rows] == [200, 800]
        assert all(r["insert_us"] > 0 and r["height"] >= 2 for r in rows)
    assert out["random"][-1]["validate_s"] >= 0


def test_retrieval_latency_suite(tmp_path: Path) -> None:
    rows = retrieval_latency.main(["--forests", "1,2", "--queries", "5", "--no-instance"])["forests"]
    assert [r["forests"] for r in rows] == [1, 2]
    assert rows[1]["facts"] > rows[0]["facts"] and rows[1]["trees"] > rows[0]["trees"]
    assert all(r["browse"]["p95_ms"] >= r["browse"]["p50_ms"] > 0 for r in rows)
    data = write_longmemeval_s_sized(tmp_path / "lme.json", questions=3, sessions=6, turns=6)
    out = retrieval_latency.main(["--forests", "", "--data", str(data), "--embedder", "hash"])["instance"]
    assert out["questions"] == 3 and out["same_ranking"] == 3 and out["cells"] > 0
    for path in ("stored", "query_time"):
        stages = out["latency"][path]
        assert {"embed", "recall", "browse", "assemble", "total"} <= set(stages)
        assert all(s["p95_ms"] >= s["p50_ms"] >= 0 for s in stages.values())


@pytest.mark.slow
def test_retrieval_quality_suite(tmp_path: Path) -> None:
    out = retrieval_quality.main(["--questions", "4", "--sessions", "8", "--conversations", "1",
                                  "--methods", "memforest_sessions,flat_sessions", "--out", str(tmp_path),
                                  "-o", "embedder.backend=hash", "-o", "embedder.dim=64"])
    for method in ("memforest_sessions", "flat_sessions"):
        lme, locomo = out[method]["longmemeval_s"], out[method]["locomo"]
        assert lme["instances"] == 4 and 0 < lme["questions"] <= 4 and locomo["instances"] == 1
        assert 0 <= lme["recall_any@1"] <= lme["recall_any@5"] <= lme["recall_any@10"] <= 100
        assert 0 <= locomo["all@10turns"] <= locomo["any@10turns"] <= 100 and locomo["questions"] > 0
        assert lme["cpu_s_per_instance"] > 0 and lme["build_s_per_instance"] > 0
    assert out["memforest_sessions"]["longmemeval_s"]["embedder"]["model"] == "hash"


def test_write_profile_suite() -> None:
    row = write_profile.main(FAKE)
    assert row["cells"] > 0 and row["llm_calls"] > 0 and row["facts"] > 0
    assert 0 < row["llm_s"] <= row["wall_s"] and 0 < row["embed_s"] <= row["wall_s"]
    assert {"chunk", "extract", "route", "refresh", "commit"} <= set(row["timings"])


def test_merge_suite() -> None:
    rows = merge_speed.main(["--max-n", "2", *FAKE])
    assert [r["n"] for r in rows] == [2]
    assert rows[0]["facts_merged"] == rows[0]["facts_sequential"] > 0


def test_llm_throughput_suite() -> None:
    out = llm_throughput.main(["--calls", "3", "-o", "backend=scripted"])
    assert [r["calls"] for r in out["results"]] == [3, 3]
    assert all(r["ok"] == 3 for r in out["results"]) and out["speedup_2x1_over_1x2"] > 0


def test_the_aggregator_writes_one_file_per_suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(bench.SUITES, "structure", lambda argv: structure.main(["--sizes", "100,200"]))
    bench.main(["structure", "--out", str(tmp_path)])
    record = json.loads((tmp_path / "structure.json").read_text())
    assert record["suite"] == "structure" and record["machine"]["cpus"] >= 1
    assert [r["size"] for r in record["result"]["arrival"]] == [100, 200]


def test_one_named_suite_takes_its_own_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    given: list[list[str]] = []

    def suite(argv: list[str]) -> dict:
        given.append(argv)
        return {}
    monkeypatch.setitem(bench.SUITES, "structure", suite)
    bench.main(["structure", "--sizes", "100,200", "--out", str(tmp_path)])
    assert given == [["--sizes", "100,200"]]
    with pytest.raises(SystemExit):  # options without one suite to take them
        bench.main(["structure", "merge", "--sizes", "100", "--out", str(tmp_path)])


def test_a_base_store_is_copied_with_what_its_log_holds(tmp_path: Path) -> None:
    import sqlite3

    from benchmarks.micro.incremental_stores import USER, copy_base
    db = tmp_path / "base" / "users" / USER / "memory.sqlite"
    db.parent.mkdir(parents=True)
    writer = sqlite3.connect(db)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("PRAGMA wal_autocheckpoint=0")  # the commits stay in the log
    writer.execute("CREATE TABLE t (x)")
    writer.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(100)])
    writer.commit()
    assert (db.parent / "memory.sqlite-wal").stat().st_size > 0
    copy_base(tmp_path / "base", tmp_path / "work")
    writer.close()
    copied = tmp_path / "work" / "users" / USER
    assert not (copied / "memory.sqlite-wal").exists()
    with sqlite3.connect(copied / "memory.sqlite") as con:
        assert con.execute("SELECT count(*) FROM t").fetchone() == (100,)


def test_a_base_store_is_not_copied_onto_a_disk_without_room_for_it(tmp_path: Path, monkeypatch) -> None:
    from types import SimpleNamespace

    from benchmarks.micro import incremental_stores
    base = tmp_path / "base"
    base.mkdir()
    (base / "memory.sqlite").write_bytes(b"x" * 4096)
    monkeypatch.setattr(incremental_stores.shutil, "disk_usage", lambda path: SimpleNamespace(free=1024))
    with pytest.raises(SystemExit, match=r"needs 0\.0 GiB and 0\.0 GiB is free under .*work"):
        incremental_stores.copy_base(base, tmp_path / "deeper" / "work")
    assert not (tmp_path / "deeper" / "work").exists()


def test_incremental_suite_can_measure_a_base_store_itself(tmp_path: Path) -> None:
    from benchmarks.micro import incremental

    out = incremental.main(["--sizes", "4", "--reps", "1", "--turns", "4", "--batch", "4", "--root",
                            str(tmp_path), "--consume-base"])
    assert [r["sessions"] for r in out["rows"]] == [4]
    assert not (tmp_path / "incremental_profile_n4_t4_s0").exists()  # moved, measured, removed
    assert not (tmp_path / "incremental_work" / "n4").exists()


def test_incremental_suite_cold_rounds_and_rounds_after_the_caches_were_read(tmp_path: Path) -> None:
    from benchmarks.micro import incremental

    out = incremental.main(["--sizes", "4,8", "--reps", "1", "--warm-rounds", "2", "--cold-pages",
                            "--turns", "4", "--batch", "4", "--root", str(tmp_path)])
    ops = ("ingest", "delete", "correct", "query")
    for row in out["rows"]:
        assert row["warm"]["cache_read"]["cache_gib"] >= 0
        for op in ops:  # one measured round, two after: kept apart
            assert (row[op]["n"], row["warm"][op]["n"]) == (1, 2) and row["warm"][op]["mean_s"] > 0
        assert row["ingest"]["refreshed_nodes"] >= 1
    assert {f"{op}_warm" for op in ops} <= set(out["ratios"]) and out["warm_rounds"] == 2
    assert out["cold_pages"]


def test_incremental_suite_smoke(tmp_path) -> None:
    from benchmarks.micro import incremental

    out = incremental.main(["--sizes", "4,8", "--reps", "1", "--turns", "4", "--batch", "4", "--root",
                            str(tmp_path)])
    assert [r["sessions"] for r in out["rows"]] == [4, 8]
    for size in (4, 8):  # opened as a restarted process finds them: with the caches a query left
        user = tmp_path / f"incremental_profile_n{size}_t4_s0" / "users" / "bench"
        assert (user / "cache" / "lexical.cache").is_file()
    for row in out["rows"]:
        assert row["load_s"] > 0 and row["first_query_s"] > 0  # once per process, reported apart
        assert row["load_cpu_s"] > 0 and row["first_query_cpu_s"] > 0 and "rss_bytes_per_session" in row
        assert row["load_read_mib"] >= 0 and row["first_query_read_mib"] >= 0
        assert isinstance(row["rss_file_bytes_per_session"], int)  # (its file-mapped part, apart)
        for op in ("ingest", "delete", "correct", "query"):
            # the memory's own time, models apart
            assert row[op]["model_mean_s"] > 0 and row[op]["mean_s"] > 0
            assert (row[op]["mean_s"] + row[op]["model_mean_s"]
                    == pytest.approx(row[op]["wall_mean_s"], abs=2e-4))
            # the process's CPU time and its reads from the disk (none may be needed: page cache)
            assert row[op]["cpu_mean_s"] > 0 and row[op]["disk_read_kib"] >= 0
            stages = row[op]["stages"]
            parts = sum(v for k, v in stages.items() if k != "total")
            # the stages partition the wall time (4-decimal rounding)
            assert abs(parts - stages["total"]) <= 1e-3
        assert {"cells", "facts"} <= set(row["search"])
        # a write refreshes at least the leaves it placed or removed
        for op in ("ingest", "delete", "correct"):
            assert row[op]["refreshed_nodes"] >= 1
    ops = ("ingest", "delete", "correct", "query")
    writes = ("ingest", "delete", "correct")
    assert set(out["ratios"]) == {*ops, *(f"{op}_{kind}" for op in ops for kind in ("wall", "median", "cpu")),
                                  *(f"{op}_{kind}" for op in writes
                                    for kind in ("per_refreshed_node", "refreshed_nodes")),
                                  "memory_per_session"}
    lo, hi = out["rows"]
    assert out["ratios"]["ingest_refreshed_nodes"] == pytest.approx(
        hi["ingest"]["refreshed_nodes"] / lo["ingest"]["refreshed_nodes"], abs=0.01)


def test_a_base_store_built_across_reopens_holds_the_stream(tmp_path, monkeypatch) -> None:
    """A build that reopens its store every few sessions holds exactly the sessions of the stream."""
    from benchmarks.micro import incremental_stores as stores

    monkeypatch.setattr(stores, "REOPEN_EVERY", 3)
    path = stores.base_store(tmp_path, 7, 4, 0, 2)
    assert (path / "done").read_text() == "7"
    with stores.open_forest(path) as forest:
        held = sorted(forest.snapshot(stores.USER).state.sessions)
    assert held == sorted(s["session_id"] for s in stores.longmemeval_sessions(7, 0, 4, 0))


def test_the_session_stream_stays_within_the_dates_sessions_may_name() -> None:
    """Sessions about a day apart, then an hour apart past `DAILY_UNTIL`: a 10^5 store and the
    sessions the suite adds to it parse, in time order."""
    from benchmarks.micro import incremental_stores as stores
    from memforest.config import MemForestConfig
    from memforest.sessions import parse_sessions

    at = [0, 1, stores.DAILY_UNTIL - 1, stores.DAILY_UNTIL, 99_999, 100_000 + 100 + 60]
    raws = [stores.longmemeval_sessions(1, i, 2, 0)[0] for i in at]
    parsed = parse_sessions(raws, MemForestConfig().limits)
    hours = [stores.session_hours(i) for i in at]
    assert hours[:3] == [19 * i for i in at[:3]] and hours == sorted(hours)
    assert [s.time for s in parsed] == sorted(s.time for s in parsed)


def test_page_cache_finds_the_maps_of_a_stores_files_only() -> None:
    from benchmarks.micro.page_cache import mapped_ranges

    maps = ("7f00-7f80 r--p 00000000 fd:01 12 /data/store/users/u/cache/partitions.cache\n"
            "7f80-7fa0 rw-p 00000000 00:00 0 \n"
            "8000-9000 r--p 00000000 fd:01 13 /data/store2/users/u/cache/lexical.cache\n"
            "9000-a000 r-xp 00000000 fd:01 14 /usr/lib/libc.so.6\n")
    assert mapped_ranges(Path("/data/store"), maps) == [(0x7F00, 0x7F80)]


def test_dropping_a_stores_pages_changes_nothing_it_holds(tmp_path: Path) -> None:
    """The files under a store put out of the page cache, one of them mapped by this process: each
    file is dropped and still reads back the same, through its map and through a read."""
    import mmap

    from benchmarks.micro.page_cache import drop_pages, supported

    data = bytes(range(256)) * 4096
    (tmp_path / "cache").mkdir()
    for name in ("cache/a.cache", "b.sqlite"):
        (tmp_path / name).write_bytes(data)
    with open(tmp_path / "cache" / "a.cache", "rb") as f, \
            mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) as buf:
        assert bytes(buf[:1024]) == data[:1024]
        buf[0] = 7  # a private page written: kept
        dropped = drop_pages(tmp_path)
        assert buf[0] == 7 and bytes(buf[1:]) == data[1:]
    if supported():
        assert dropped["ranges"] == 1 and dropped["files"] == 2 and dropped["paged_out"] in (0, 1)
    assert all((tmp_path / n).read_bytes() == data for n in ("cache/a.cache", "b.sqlite"))


def test_incremental_summary_gives_the_spread_of_the_own_time() -> None:
    from benchmarks.micro.incremental import Sample, summary

    # (wall, model, stages, cpu, read): own times 1..19 ms and one outlier, 100 ms
    samples: list[Sample] = [((i + 1) / 1000 + 0.5, 0.5, {}, 0.0, 0) for i in range(19)]
    samples.append((0.6, 0.5, {}, 0.0, 0))
    row = summary(samples)
    assert row["median_s"] == pytest.approx(0.0105)
    assert row["p90_s"] == pytest.approx(0.018)  # nearest rank: the 18th of 20
    assert row["stdev_s"] == pytest.approx(statistics.stdev([*range(1, 20), 100]) / 1000, abs=1e-6)
    assert summary(samples[:1])["stdev_s"] == 0.0 and summary(samples[:1])["p90_s"] == pytest.approx(0.001)
