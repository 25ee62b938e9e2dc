"""slurm/gpu_check.sh, the retrieval experiment without Hydra, vLLM or the hub, run on the CPU over the
tiny LongMemEval file in an interpreter that cannot import Hydra, OmegaConf or vLLM."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "tests" / "fixtures" / "longmemeval_tiny.json"
BLOCKED = ("hydra", "omegaconf", "vllm")


def bare_node(tmp_path: Path) -> dict[str, str]:
    """PYTHONPATH shadowing Hydra, OmegaConf and vLLM with packages that refuse to import."""
    for name in BLOCKED:
        (tmp_path / "blocked" / name).mkdir(parents=True)
        (tmp_path / "blocked" / name / "__init__.py").write_text(
            f"raise ImportError('{name} is not installed on this node')\n")
    return {**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(tmp_path / "blocked")}


def gpu_check(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "slurm/gpu_check.sh", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600, check=False)


@pytest.mark.integration
def test_the_gpu_check_runs_the_retrieval_experiment_on_the_cpu_without_hydra(tmp_path: Path) -> None:
    done = gpu_check(bare_node(tmp_path), str(TINY), "--device", "cpu")
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "memforest_sessions over" in out and "(3 instances, 3 questions)" in out and "on cpu" in out
    assert re.search(r"wall \d+\.\d s; build \d+\.\d\d s per instance; query \d+\.\d{3} s per question; "
                     r"3 built, 0 failed", out), out
    # the two questions with gold evidence find their session first (the third is an abstention)
    assert "session R@1 100.0  R@5 100.0  R@10 100.0 (2 questions with gold)" in out
    assert re.search(r"turn recall_any@10 \d+\.\d  recall_all@10 \d+\.\d \(2 questions with gold\)", out)


def test_the_gpu_check_says_what_is_missing(tmp_path: Path) -> None:
    env = bare_node(tmp_path)
    missing = gpu_check(env, str(tmp_path / "none.json"))
    assert missing.returncode == 2 and "no LongMemEval file" in missing.stderr
    no_model = gpu_check(env, str(TINY), "--device", "cpu", "--model", str(tmp_path / "no-model"))
    assert no_model.returncode == 2 and len(no_model.stderr.strip().splitlines()) == 1, no_model.stderr
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text("import types\nversion = types.SimpleNamespace(cuda=None)\n"
                                      "cuda = types.SimpleNamespace(is_available=lambda: False)\n")
    cpu_torch = {**env, "PYTHONPATH": os.pathsep.join([env["PYTHONPATH"], str(tmp_path)])}
    on_cuda = gpu_check(cpu_torch, str(TINY), "--device", "cuda")
    assert on_cuda.returncode == 1 and "preflight: the installed torch is a CPU build" in on_cuda.stderr
