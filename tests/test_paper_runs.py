"""`make paper-runs` (benchmarks.paper_runs): its steps, their configurations, resumption by step, and a
clear failure when the data file is absent."""

from pathlib import Path

import pytest

from benchmarks import paper_runs
from benchmarks.harness.app import compose_config
from benchmarks.harness.schema import bench_config


def _names(plan):
    return [s.name for s in plan]


def test_the_plan_runs_the_write_path_then_the_recall_sweeps_on_each_file(tmp_path):
    plan = paper_runs.steps(tmp_path, tmp_path / "lme.json", tmp_path / "locomo.json", "1,2,0", 10, 30, 1)
    assert _names(plan) == ["write_path", "evidence_budget_recall", "ablation_retrieval_recall",
                            "chunk_size_recall", "evidence_budget_recall_locomo",
                            "ablation_retrieval_recall_locomo", "chunk_size_recall_locomo"]
    by_name = {s.name: s for s in plan}
    assert "llm=qwen3_30b_a3b_simulated" in by_name["write_path"].overrides
    assert by_name["write_path"].needs is None and "dataset.limit=1" in by_name["write_path"].overrides
    full = paper_runs.steps(tmp_path, tmp_path / "lme.json", None, "2", None)[0]
    assert not any(o.startswith("dataset.limit") for o in full.overrides)
    assert full.estimate_s == 6 * by_name["write_path"].estimate_s
    chunk = by_name["chunk_size_recall"].overrides
    assert "dataset.limit=10" in chunk and "dataset.limit=30" not in chunk
    assert "method.memforest.chunk.max_turns=1,2,0" in chunk
    # the retrieval-mode ablation reads the evidence-budget sweep's memories (k does not change a build)
    (stores,) = [o for o in by_name["ablation_retrieval_recall"].overrides if o.startswith("stores_from=")]
    assert stores.endswith("evidence_budget_recall/longmemeval_s/memforest_sessions/smollm2_cpu/k5/seed0")
    assert all(s.estimate_s > 0 for s in plan)


@pytest.mark.parametrize("experiment", ["evidence_budget_recall", "ablation_retrieval_recall",
                                        "chunk_size_recall"])
def test_each_recall_sweep_composes_without_a_generator(experiment, tmp_path):
    plan = {s.name: s for s in paper_runs.steps(tmp_path, tmp_path / "lme.json", None, "2", None)}
    overrides = [o for o in plan[experiment].overrides if "," not in o.split("=", 1)[1]]
    cfg = bench_config(compose_config(overrides))
    assert cfg.method.name == "memforest_sessions" and not cfg.answer.enabled and not cfg.judge.enabled
    assert cfg.run_dir.startswith(str(tmp_path / experiment / "longmemeval_s" / "memforest_sessions"))


def test_a_missing_data_file_fails_its_steps_clearly_and_done_steps_are_skipped(tmp_path, capsys):
    state = tmp_path / "paper_runs"
    state.mkdir()
    (state / "write_path.done").write_text("1 s\n")
    code = paper_runs.main(["--results", str(tmp_path), "--data", str(tmp_path / "absent.json.xz"),
                            "--only", "write_path", "evidence_budget_recall"])
    out, err = capsys.readouterr()
    assert code == 1
    assert "1 of 2 steps to run" in out and "done steps skipped: write_path" in out
    assert f"data file {tmp_path / 'absent.json.xz'} not found" in err and "PAPER_DATA" in err
    assert not (state / "evidence_budget_recall.done").exists()


def test_an_unknown_step_is_refused(tmp_path, capsys):
    assert paper_runs.main(["--results", str(tmp_path), "--only", "tables"]) == 2
    assert "no step named tables" in capsys.readouterr().err


def test_the_default_data_path_is_the_shared_slice_beside_the_checkout():
    assert Path(paper_runs.REPO).parent / "shared/data/longmemeval_s_slice.json.xz" == paper_runs.DEFAULT_DATA
