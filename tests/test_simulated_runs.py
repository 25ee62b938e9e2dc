"""Simulated runs: every system reaches the backbone through the latency-model server and one logging
proxy, each call is counted once, and every result is labelled simulated."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from benchmarks.harness import runner, write_path
from benchmarks.harness.app import compose_config
from benchmarks.harness.results import read_jsonl
from benchmarks.harness.schema import BenchConfig, bench_config

SIMULATED = ["llm=qwen3_30b_a3b_simulated", "llm.backend=scripted",
             "llm.responder=responders:harness_responder", "embedder.backend=hash", "embedder.dim=64",
             "llm.latency_model.ttft_base_s=0.002", "llm.latency_model.decode_s_per_token=0.0001",
             "dataset.limit=1", "progress=false"]


def _config(tmp_path: Path, *overrides: str) -> BenchConfig:
    return bench_config(compose_config([*SIMULATED, f"output_root={tmp_path}", *overrides]))


def test_the_named_config_composes_with_its_latency_parameters() -> None:
    llm = bench_config(compose_config(["llm=qwen3_30b_a3b_simulated"])).llm
    assert llm.name == "qwen3_30b_a3b_simulated" and llm.backend == "llamacpp"
    assert llm.latency_model is not None
    assert llm.latency_model.max_concurrency == 256 and llm.latency_model.source == "model"
    assert bench_config(compose_config([])).llm.latency_model is None


def test_memforest_through_the_latency_server_is_counted_once_and_labelled(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    runner.run_benchmark(cfg)
    out = Path(cfg.run_dir)
    run = json.loads((out / "run.json").read_text())
    assert run["simulated"] is True
    assert run["latency_model"]["params"]["name"] == "qwen3_30b_a3b_h100"
    served = read_jsonl(out / "served_calls.jsonl")
    calls = read_jsonl(out / "llm_calls.jsonl")
    client = read_jsonl(out / "llm_calls_client.jsonl")
    chat = [c for c in calls if c["stage"] == "chat"]
    assert calls and all(c["stage"] in ("chat", "embed") for c in calls)  # proxy records only
    # each call once in each log (a client record counts its retries: one request each)
    assert len(chat) == len(served) == sum(1 + r["retries"] for r in client)
    assert {c["tags"]["phase"] for c in chat} >= {"build", "answer", "judge"}
    assert {s["source"] for s in served} == {"model"} and all(s["service_s"] > 0 for s in served)
    (build,) = read_jsonl(out / "builds.jsonl")
    assert (build["simulated"] is True
            and build["llm"]["calls"] == len([c for c in chat if c["tags"]["phase"] == "build"]))
    waves = build["call_waves"]
    assert 1 <= waves["waves"] <= waves["calls"] == build["llm"]["calls"]
    assert 0 < waves["critical_path_seconds"] <= waves["call_seconds"] + 1e-6
    assert all(r["simulated"] is True for r in read_jsonl(out / "records.jsonl"))
    assert "simulated" in (out / "summary.md").read_text()
    (row,) = write_path.table([out])["rows"]
    assert row["simulated"] and row["served_calls"] == len(served) and row["overrun_calls"] >= 0
    modelled = sum(s["queue_s"] + s["service_s"] for s in served)
    assert 0 < row["modelled_critical_path_seconds"] <= modelled + 1e-6
    assert row["modelled_build_seconds"] > 0 and row["modelled_speedup_vs_slowest"] == 1.0
    assert row["capped_calls"] == sum(s["capped"] for s in served) and row["output_caps"]["default"] > 0
    # MemForest bounds its own schemas: the source decodes them as sent
    assert row["bounded_calls"] == 0 and row["source_bounds"] == {"items": 8, "chars": 400}
    assert run["latency_model"]["source_bounds"] == {"items": 8, "chars": 400}
    title = write_path.markdown(write_path.table([out])).splitlines()[0]
    assert ("simulated latency: qwen3_30b_a3b_h100" in title and "content source: model:" in title
            and "instance: sample (1 instances" in title and "output caps: extract_facts 872" in title
            and "at most: items 8, chars 400" in title), title


def test_replay_answers_without_the_model(tmp_path: Path) -> None:
    first = _config(tmp_path, "answer.enabled=false", "judge.enabled=false")
    runner.run_benchmark(first)
    recorded = Path(first.run_dir) / "served_calls.jsonl"
    second = _config(tmp_path, "answer.enabled=false", "judge.enabled=false", "experiment_name=replayed",
                     "llm.latency_model.source=replay", f"llm.latency_model.replay_path={recorded}",
                     "llm.latency_model.fallback=false")
    runner.run_benchmark(second)
    served = read_jsonl(Path(second.run_dir) / "served_calls.jsonl")
    assert served and {s["source"] for s in served} == {"replay"} and not any(s["error"] for s in served)
    (a,), (b,) = (read_jsonl(Path(first.run_dir) / "builds.jsonl"),
                  read_jsonl(Path(second.run_dir) / "builds.jsonl"))
    assert a["system"]["new_facts"] == b["system"]["new_facts"] and a["llm"]["calls"] == b["llm"]["calls"]


@pytest.mark.skipif(importlib.util.find_spec("mem0") is None, reason="mem0ai not installed")
def test_a_library_baseline_reaches_the_same_server(tmp_path: Path) -> None:
    cfg = _config(tmp_path, "method=mem0", "answer.enabled=false", "judge.enabled=false")
    runner.run_benchmark(cfg)
    out = Path(cfg.run_dir)
    chat = [c for c in read_jsonl(out / "llm_calls.jsonl") if c["stage"] == "chat"]
    served = read_jsonl(out / "served_calls.jsonl")
    assert chat and len(chat) == len(served)
    assert all(c["tags"]["system"] == "mem0" for c in chat)
    (build,) = read_jsonl(out / "builds.jsonl")
    assert build["simulated"] is True and build["call_waves"]["calls"] == len(chat)
