"""A run's judge pinned and repeated, and dataset errata, end to end through the harness on the sample
with the scripted model: run.json's judge descriptor, every verdict's hash and repeat, the summary's
repeat row, and both scores side by side when an erratum changed a gold answer."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.harness import runner
from benchmarks.harness.app import compose_config
from benchmarks.harness.results import read_jsonl
from benchmarks.harness.schema import bench_config

FAKE_MODELS = ["llm.backend=scripted", "llm.responder=responders:harness_responder", "embedder.backend=hash",
               "embedder.dim=256"]


def run(tmp_path: Path, *overrides: str) -> Path:
    cfg = bench_config(compose_config([*FAKE_MODELS, f"output_root={tmp_path}", "progress=false",
                                       "dataset.limit=2", *overrides]))
    runner.run_benchmark(cfg)
    return Path(cfg.run_dir)


def test_a_repeated_judge_is_pinned_and_its_repeats_are_reported(tmp_path: Path) -> None:
    out = run(tmp_path, "judge.repeats=3")
    descriptor = json.loads((out / "run.json").read_text())["judge"]
    assert len(descriptor["judge_hash"]) == 64
    verdicts = read_jsonl(out / "judgments.jsonl")
    assert len(verdicts) == 2 * 3
    assert sorted(v["repeat"] for v in verdicts) == [0, 0, 1, 1, 2, 2]
    assert {v["judge_hash"] for v in verdicts} == {descriptor["judge_hash"]}
    summary = (out / "summary.md").read_text()
    # the scripted judge is deterministic: its repeats agree by construction
    assert "judge repeats: agreement / accuracy range over 3" in summary and "| 100.0% / " in summary


def test_errata_show_the_corrected_and_the_official_score(tmp_path: Path) -> None:
    errata = tmp_path / "errata.yaml"
    errata.write_text("version: 7\ndataset: sample\nentries:\n"
                      "  - question_id: sample_ku_001\n    source: https://example.org/audit\n"
                      "    answer: Lisbon\n", encoding="utf-8")
    out = run(tmp_path, f"dataset.errata={errata}")
    run_json = json.loads((out / "run.json").read_text())
    applied = run_json["dataset"]["errata"]
    assert applied["version"] == "7" and applied["errata_answers_changed"] == 1
    assert run_json["fingerprint"]["errata_sha256"] == applied["sha256"]
    changed = [r for r in read_jsonl(out / "records.jsonl") if r["question_id"] == "sample_ku_001"]
    assert changed and all(r["answer"] == "Lisbon" and r["answer_official"] == "Miami" for r in changed)
    summary = (out / "summary.md").read_text()
    assert "accuracy pass@1 [longmemeval (scripted)]" in summary
    assert "accuracy pass@1 [longmemeval (scripted), official gold]" in summary
