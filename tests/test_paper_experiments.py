"""The paper's experiments inside the harness: derived waves, the write-path table, migration and
scaling tasks, composed memories, the ablation subset, stores reused across a sweep."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from benchmarks.datasets import load_dataset
from benchmarks.datasets.compose import compose
from benchmarks.datasets.subsets import subset_ids
from benchmarks.harness import runner, write_path
from benchmarks.harness.app import compose_config
from benchmarks.harness.results import read_jsonl
from benchmarks.harness.schema import BenchConfig, bench_config
from benchmarks.harness.tasks.scaling import level_parallel_times
from benchmarks.harness.waves import derived_waves
from memforest.llm.calllog import CallRecord

FAKE = ["llm.backend=scripted", "llm.responder=responders:harness_responder", "embedder.backend=hash",
        "embedder.dim=64", "progress=false"]


def _config(tmp_path: Path, *overrides: str) -> BenchConfig:
    return bench_config(compose_config([*FAKE, f"output_root={tmp_path}", *overrides]))


def _call(start: float, end: float, stage: str = "chat", level: int = 0) -> CallRecord:
    return CallRecord(id=0, stage=stage, prompt_id="p", prompt_version=1, wave=0, level=level, start=start,
                      end=end)


def test_overlapping_calls_form_one_wave():
    calls = [_call(0, 2), _call(1, 3), _call(2.5, 4), _call(5, 6), _call(7, 7.5), _call(7.1, 9),
             _call(0, 50, "embed")]
    w = derived_waves(calls)
    assert w["calls"] == 6 and w["waves"] == 3 and w["max_in_flight"] == 2
    assert w["critical_path_seconds"] == pytest.approx(2 + 1 + 1.9)
    assert w["busy_seconds"] == pytest.approx(4 + 1 + 2)


def test_sequential_calls_are_one_wave_each_and_parallel_ones_a_single_wave():
    sequential = derived_waves([_call(i, i + 0.5) for i in range(5)])
    assert sequential["waves"] == 5 and sequential["critical_path_seconds"] == pytest.approx(2.5)
    parallel = derived_waves([_call(0, 1 + i) for i in range(5)])
    assert (parallel["waves"] == 1 and parallel["critical_path_seconds"] == pytest.approx(5)
            and parallel["max_in_flight"] == 5)


def test_level_parallel_refresh_speeds_up_with_slots_until_the_longest_call():
    calls = [_call(0, 1, "summarize", 1) for _ in range(8)] + [_call(0, 2, "summarize", 2) for _ in range(2)]
    times = level_parallel_times(calls, [1, 2, 4, 8, 64])
    assert times == {1: 12.0, 2: 6.0, 4: 4.0, 8: 3.0, 64: 3.0}


def test_the_ablation_subset_is_sixty_questions_ten_per_type():
    ids = subset_ids("ablation60")
    assert len(ids) == len(set(ids)) == 60
    assert sum(i.endswith("_abs") for i in ids) == 3
    with pytest.raises(ValueError, match="unknown dataset subset"):
        subset_ids("nope")


def test_a_subset_filter_refuses_ids_the_dataset_lacks(tmp_path):
    with pytest.raises(ValueError, match="unknown instance ids"):
        runner.run_benchmark(_config(tmp_path, "dataset.subset=ablation60"))


def test_composed_memories_hold_n_haystacks():
    sample = load_dataset("sample")
    two = compose(sample, 2)
    for one, both, other in zip(sample.instances, two.instances, sample.instances[1:] + sample.instances[:1]):
        assert both.questions == one.questions
        assert len(both.sessions) == len(one.sessions) + len(other.sessions)
        assert {s.session_id for s in one.sessions} <= {s.session_id for s in both.sessions}
    with pytest.raises(ValueError, match="needs at least"):
        compose(sample, 7)


def test_migration_task_writes_one_row_per_n(tmp_path):
    cfg = _config(tmp_path, "experiment=migration", "task_options.max_n=3")
    summary = runner.run_benchmark(cfg)
    rows = read_jsonl(Path(cfg.run_dir) / "migration.jsonl")
    assert [r["n"] for r in rows] == [1, 2, 3] and summary["rows"] == rows
    for r in rows:
        assert (r["facts_merged"] > 0 and r["facts_sequential"] > 0 and r["merge_s"] > 0
                and r["sequential_s"] > 0)
        assert r["simulated"] is False
    assert rows[-1]["facts_sequential"] > rows[0]["facts_sequential"]
    assert "migration" in (Path(cfg.run_dir) / "summary.md").read_text()


def test_scaling_task_counts_eager_and_batched_refreshes(tmp_path):
    cfg = _config(tmp_path, "experiment=scaling", "task_options.parallelism=[1,2,4]")
    runner.run_benchmark(cfg)
    (row,) = read_jsonl(Path(cfg.run_dir) / "scaling.jsonl")
    assert row["eager_calls"] > row["batched_calls"] > 0 and row["refresh_calls"] > 0
    assert set(row["speedup"]) == {"1", "2", "4"} and row["speedup"]["1"] == 1.0
    assert row["refresh_s"]["4"] <= row["refresh_s"]["2"] <= row["refresh_s"]["1"]


def test_tasks_need_a_memforest_method(tmp_path):
    summary = runner.run_benchmark(_config(tmp_path, "experiment=migration", "method=flat_rag"))
    assert "needs a MemForest method" in summary["skipped"]


def test_write_path_table_ranks_systems_against_the_slowest(tmp_path):
    dirs = []
    for method in ("memforest_embed", "flat_rag"):
        cfg = _config(tmp_path, "experiment=write_path", f"method={method}", "dataset.limit=1")
        runner.run_benchmark(cfg)
        dirs.append(cfg.run_dir)
    data = write_path.write(dirs, tmp_path / "table")
    rows = {r["system"]: r for r in data["rows"]}
    assert set(rows) == {"memforest_embed", "flat_rag"}
    slowest = max(rows.values(), key=lambda r: r["build_seconds"])
    assert slowest["speedup_vs_slowest"] == 1.0 and data["slowest"] == slowest["system"]
    assert rows["memforest_embed"]["llm_calls"] > 0 and rows["memforest_embed"]["waves"] >= 1
    assert rows["memforest_embed"]["recorded_waves"] >= 1  # the library's own wave ids
    assert json.loads((tmp_path / "table" / "write_path.json").read_text())["rows"]
    assert "| memforest_embed |" in (tmp_path / "table" / "write_path.md").read_text()
    note = write_path.closing_note(data)
    if data["slowest"] == "flat_rag":  # MemForest faster: its ratio to the slowest closes the table
        ratio = rows["memforest_embed"]["speedup_vs_slowest"]
        assert note == [f"memforest_embed writes at {ratio}x the slowest system's (flat_rag) rate, measured."]
    else:
        assert note == []


def test_the_closing_note_gives_memforests_ratio_to_mem0_and_to_the_slowest():
    rows = [{"system": "memforest_embed", "ratio_to_mem0": 2.5, "speedup_vs_slowest": 10.0,
             "modelled_ratio_to_mem0": 3.0, "modelled_speedup_vs_slowest": 12.0},
            {"system": "mem0", "ratio_to_mem0": 1.0, "speedup_vs_slowest": 4.0},
            {"system": "zep_local", "ratio_to_mem0": 0.25, "speedup_vs_slowest": 1.0}]
    assert write_path.closing_note({"slowest": "zep_local", "rows": rows}) == [
        "memforest_embed writes at 2.5x Mem0's, 10.0x the slowest system's (zep_local) rate, measured; "
        "on modelled build seconds 3.0x Mem0's, 12.0x the slowest."]


def test_the_modelled_critical_path_leaves_out_an_interrupted_earlier_attempt(tmp_path):
    finished = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
    end = finished.timestamp()
    calls = [(end - 3600.0, 5.0), (end - 8.0, 2.0), (end - 4.0, 3.0)]  # (start, modelled seconds)
    tags = {"phase": "build", "instance": "i1"}
    (tmp_path / "llm_calls.jsonl").write_text("".join(json.dumps(
        {"id": i, "stage": "chat", "prompt_id": "p", "prompt_version": 1, "wave": 0, "level": 0,
         "start": start, "end": start + 1.0, "tags": tags}) + "\n" for i, (start, _) in enumerate(calls)))
    (tmp_path / "served_calls.jsonl").write_text("".join(json.dumps(
        {"arrival": start, "queue_s": 0.0, "service_s": seconds}) + "\n" for start, seconds in calls))
    build = {"instance_id": "i1", "build_seconds": 10.0, "finished": finished.strftime("%Y-%m-%dT%H:%M:%S%z")}
    assert write_path.modelled_critical_path(tmp_path, [build]) == 5.0  # 2 + 3, not the first attempt's 5
    assert write_path.modelled_critical_path(tmp_path, [{**build, "finished": None}]) == 10.0
