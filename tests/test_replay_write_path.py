"""The `replay` source end to end: the served calls of a real simulated write-path run (SmolLM2 as the
content source, recorded by tests/make_replay_fixture.py into tests/fixtures/replay/) are played back
through the latency-model server without any model, and the write-path table comes out as recorded:
the same calls, charged tokens, capped answers, modelled critical path and ratios between systems."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from make_replay_fixture import OUT, VARIANTS, overrides

from benchmarks.harness import runner, write_path
from benchmarks.harness.app import compose_config
from benchmarks.harness.results import read_jsonl
from benchmarks.harness.schema import bench_config
from benchmarks.harness.simulation import SERVED_LOG

EXPECTED = OUT / "expected.json"
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not EXPECTED.exists(), reason="replay fixture not recorded")]


def _replayed(tmp_path: Path, variant: str) -> Path:
    cfg = bench_config(compose_config([
        *overrides(tmp_path, variant), "llm.latency_model.source=replay", "llm.latency_model.fallback=false",
        f"llm.latency_model.replay_path={OUT / f'{variant}.{SERVED_LOG}'}"]))
    runner.run_benchmark(cfg)
    return Path(cfg.run_dir)


def test_replaying_the_recorded_log_reproduces_the_write_path_table(tmp_path: Path) -> None:
    expected = json.loads(EXPECTED.read_text())
    run_dirs = [_replayed(tmp_path, variant) for variant in VARIANTS]
    for variant, run_dir in zip(VARIANTS, run_dirs):
        recorded = read_jsonl(OUT / f"{variant}.{SERVED_LOG}")
        served = read_jsonl(run_dir / SERVED_LOG)
        assert {s["source"] for s in served} == {"replay"} and not any(s["error"] for s in served)
        assert [s["key"] for s in served] == [s["key"] for s in recorded]
        for key in ("prompt_tokens", "cached_tokens", "completion_tokens", "capped", "running", "service_s"):
            assert [s[key] for s in served] == [s[key] for s in recorded], key
    data = write_path.table(run_dirs)
    for variant, row in zip(VARIANTS, data["rows"]):
        want = expected[variant]
        assert {key: row[key] for key in want} == want, variant
    ratios = [row["llm_path_speedup_vs_slowest"] for row in data["rows"]]
    assert min(ratios) == 1.0 and max(ratios) > 1.0  # the two write paths differ, as recorded
    assert data["simulated"] and "content source: replay" in write_path.markdown(data)


def test_a_request_the_log_never_saw_fails_without_a_fallback_model(tmp_path: Path) -> None:
    log = tmp_path / SERVED_LOG
    first = (OUT / f"all_families.{SERVED_LOG}").read_text().splitlines(True)[0]
    log.write_text(first)
    cfg = bench_config(compose_config([
        *overrides(tmp_path, "all_families"), "llm.latency_model.source=replay",
        "llm.latency_model.fallback=false", f"llm.latency_model.replay_path={log}"]))
    runner.run_benchmark(cfg)
    served = read_jsonl(Path(cfg.run_dir) / SERVED_LOG)
    assert served[0]["source"] == "replay" and not served[0]["error"]
    assert any(s["error"] and "no recorded answer" in s["error"] for s in served[1:])
