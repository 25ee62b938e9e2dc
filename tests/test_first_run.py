"""A newcomer's first run: an estimate before any work, the libraries quiet unless asked, and a run that
ends by naming its results, its HTML page and what to run next."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from analysis.records import BuildRow
from benchmarks.harness.app import NOISY_LIBRARIES, main, quiet_libraries
from benchmarks.harness.estimate import REFERENCE, estimate

FAKE_MODELS = ["llm.backend=scripted", "llm.responder=responders:harness_responder", "embedder.backend=hash",
               "embedder.dim=256"]


def test_the_estimate_scales_the_reference_rates_and_prefers_this_runs_own() -> None:
    per_turn, per_question, start = REFERENCE["llamacpp"]
    two = estimate("llamacpp", 32, 1, cores=2)
    assert two.seconds == pytest.approx(start + 32 * per_turn + per_question)
    four = estimate("llamacpp", 32, 1, cores=4)
    assert four.seconds is not None and two.seconds is not None and four.seconds < two.seconds
    own = estimate("llamacpp", 10, 0, [BuildRow(instance_id="a", turns=20, build_seconds=40.0)])
    assert own.seconds == pytest.approx(20.0) and "this run's 1 finished build" in own.basis
    assert estimate("scripted", 32, 1).seconds is None
    assert estimate("vllm", 32, 1).seconds is None  # no reference: said, not guessed
    assert two.line(1, 32, 1).endswith(" min (reference rates of the CPU default on 2 cores, "
                                       "scaled to 2 here)")


def test_library_noise_is_off_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)
    assert quiet_libraries(["method=flat_rag"]) == ["method=flat_rag"]
    assert os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"
    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS")
    loud = quiet_libraries(["-v", "method=flat_rag"])
    assert loud == ["method=flat_rag", f"hydra.verbose=[{','.join(NOISY_LIBRARIES)}]"]
    assert "HF_HUB_DISABLE_PROGRESS_BARS" not in os.environ


def test_a_run_says_its_estimate_and_ends_with_results_and_next_commands(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["memforest-bench", *FAKE_MODELS, "progress=false", "dataset.limit=1"])
    main()
    out, err = capsys.readouterr()
    assert err.startswith("estimate: 1 instance(s), 32 turns to build, 1 question(s) to answer")
    run_dir = Path("results/default/sample/memforest_embed/smollm2_cpu/seed0")  # as the config names it
    assert f"results: {run_dir}" in out
    assert f"report:  {run_dir / 'report.html'}" in out and (tmp_path / run_dir / "report.html").exists()
    assert "make run RUN_ARGS=" in out and "memforest-bench -m method=" in out and "make paper" in out
