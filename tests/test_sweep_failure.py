"""A sweep run in one process (Hydra's basic launcher) whose job fails: the later jobs still get the GPU
(the failed job's engines are released), and comparison.md holds the jobs that finished even though
Hydra never calls on_multirun_end; `memforest-bench compare SWEEP_DIR` rebuilds it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import vllm_stub

from baselines.flat_rag.system import FlatRAGSystem
from benchmarks.harness import gpu_node, report
from benchmarks.harness.app import compare_command, main
from benchmarks.harness.results import read_jsonl

# an in-process vLLM engine that takes 60% of the stub GPU: a leaked one leaves no room for the next
SWEEP = ["-m", "method=flat_rag,full_context", "llm.backend=vllm", "llm.model=m",
         "llm.gpu_memory_utilization=0.6", "llm.context_tokens=100000", "embedder.backend=hash",
         "embedder.dim=256", "judge.enabled=false", "progress=false", "dataset.limit=1"]


def sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[vllm_stub.StubState, Path]:
    """Run SWEEP in tmp_path against the stub vLLM; a failed job ends it with exit status 1."""
    stub = vllm_stub.install(monkeypatch, "0.33.0")
    monkeypatch.setattr(gpu_node, "require_gpu_for", lambda *args, **kwargs: None)  # the stub's GPU
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["memforest-bench", *SWEEP])
    with pytest.raises(SystemExit) as ended:
        main()
    assert ended.value.code == 1
    [sweep_dir] = {p.parent for p in (tmp_path / "results/hydra/multirun").glob("*/*/0")}
    return stub, sweep_dir


def run_dirs(sweep_dir: Path) -> list[Path]:
    return [Path((sweep_dir / job / "run_dir.txt").read_text().strip()) for job in ("0", "1")]


def test_a_job_whose_system_fails_to_close_releases_its_engine_for_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(self: FlatRAGSystem) -> None:
        raise RuntimeError("flat_rag would not close")

    monkeypatch.setattr(FlatRAGSystem, "close", refuse)
    stub, sweep_dir = sweep(tmp_path, monkeypatch)
    assert len(stub.engines) == 2  # one per job
    assert [e.llm_engine.engine_core.shutdowns for e in stub.engines] == [1, 1]
    assert stub.device.held == {} and stub.cleanups == 2
    second = read_jsonl(run_dirs(sweep_dir)[1] / "records.jsonl")
    assert second and all(r["response"].startswith("echo: ") and not r.get("error") for r in second)
    table = (sweep_dir / "comparison.md").read_text()
    assert "| flat_rag |" in table and "| full_context |" in table  # both runs wrote their results


def test_a_job_that_raises_leaves_the_table_of_the_jobs_that_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    write_summary = report.write_summary

    def fail_flat_rag(files: Any, labels: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        if labels.method == "flat_rag":
            raise RuntimeError("flat_rag job died")
        return write_summary(files, labels, *args, **kwargs)

    monkeypatch.setattr(report, "write_summary", fail_flat_rag)
    stub, sweep_dir = sweep(tmp_path, monkeypatch)
    assert stub.device.held == {}
    table = (sweep_dir / "comparison.md").read_text()
    flat_rag, full_context = run_dirs(sweep_dir)
    assert "| full_context |" in table and "| flat_rag |" not in table
    assert f"- job 0: {flat_rag}" in table
    assert table.startswith(report.comparison_markdown([full_context]))
    (sweep_dir / "comparison.md").unlink()
    capsys.readouterr()
    assert compare_command([str(sweep_dir)]) == 0
    assert capsys.readouterr().out == table == (sweep_dir / "comparison.md").read_text()
