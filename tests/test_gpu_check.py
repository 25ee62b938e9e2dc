"""slurm/gpu_check.sh, the retrieval experiment without Hydra, vLLM or the hub, run on the CPU over the
tiny LongMemEval file in an interpreter that cannot import Hydra, OmegaConf or vLLM; its GPU preflight on
a made-up node (the fork check after it: tests/test_preflight_fork.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.harness.gpu_check import preflight
from benchmarks.harness.gpu_node import Node, TorchFacts
from benchmarks.harness.nvidia_smi import parse_nvidia_smi
from memforest.config import EmbedderConfig
from memforest.llm.embedders import PACKAGED_MINILM

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
    assert "fork check: skipped on --device cpu" in out


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


def test_the_gpu_checks_preflight_passes_on_a_fresh_home_offline(tmp_path: Path) -> None:
    """gpu_check.sh sets HF_HUB_OFFLINE=1 and loads its model from a directory: no hub cache needed."""
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "HF_HUB_OFFLINE": "1", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    smi = parse_nvidia_smi("0, GPU-aaaa, NVIDIA H100 80GB HBM3, 580.65.06, 81559, 81000\n")
    fresh = Node(smi, TorchFacts(True, "13.0", True, 1), env)
    for model in (str(tmp_path / "all-MiniLM-L6-v2"), PACKAGED_MINILM):
        cfg = EmbedderConfig(backend="sentence_transformers", model=model, device="cuda")
        assert preflight(fresh, cfg) == []
    assert not (home / ".cache" / "huggingface").exists()
    on_second = EmbedderConfig(backend="sentence_transformers", model=PACKAGED_MINILM, device="cuda:1")
    [line] = preflight(fresh, on_second)
    assert line.startswith("the run needs 2 GPUs (embedder.device=cuda:1) but 1 is visible")
