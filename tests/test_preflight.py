"""The GPU preflight on fake nodes: nvidia-smi output and torch's CUDA facts made up, no GPU needed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.harness import gpu_node, models
from benchmarks.harness.gpu_node import Gpu, Node, TorchFacts, parse_nvidia_smi, problems
from memforest.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
H100 = "NVIDIA H100 80GB HBM3, 570.86.15, 81559, 81000\n"
CUDA13 = TorchFacts(True, "13.0", True)


def node(tmp_path: Path, smi: str | None = H100, torch: TorchFacts = CUDA13) -> Node:
    env = {name: str(tmp_path / name.lower()) for name in gpu_node.CACHES}
    return Node(None if smi is None else parse_nvidia_smi(smi), torch, env)


def with_driver(driver: str, free_mib: int = 81000) -> str:
    return f"NVIDIA H100 80GB HBM3, {driver}, 81559, {free_mib}\n"


def test_nvidia_smi_lines_are_read_and_a_strange_line_is_refused() -> None:
    assert parse_nvidia_smi(H100 + "\n") == [Gpu("NVIDIA H100 80GB HBM3", "570.86.15", 81559, 81000)]
    with pytest.raises(ValueError, match="unexpected nvidia-smi line"):
        parse_nvidia_smi("No devices were found, really\n")


@pytest.mark.parametrize(("cuda", "driver", "needs"), [
    ("13.0", "570.86.15", "580"), ("13.0", "575.57.08", "580"), ("12.8", "520.61.05", "525.60.13"),
    ("12.1", "470.256.02", "525.60.13"), ("11.8", "450.51.06", "450.80.2")])
def test_a_driver_older_than_torchs_cuda_needs_is_one_line_that_says_what_to_do(
    tmp_path: Path, cuda: str, driver: str, needs: str,
) -> None:
    [line] = problems(node(tmp_path, with_driver(driver), TorchFacts(True, cuda, False)), [0.5])
    assert f"driver {driver}" in line and f"CUDA {cuda}" in line and f">= {needs}" in line
    assert "newer driver" in line and "\n" not in line


@pytest.mark.parametrize(("cuda", "driver"), [("13.0", "580.65.06"), ("13.1", "590.44.01"),
                                              ("12.8", "570.86.15"), ("12.4", "525.60.13")])
def test_a_recent_enough_driver_passes(tmp_path: Path, cuda: str, driver: str) -> None:
    assert problems(node(tmp_path, with_driver(driver), TorchFacts(True, cuda, True)), [0.85, 0.08]) == []


def test_free_memory_must_hold_every_share_and_each_engine_process_overhead(tmp_path: Path) -> None:
    shares = [0.85, 0.08]  # 75,850 MiB of 81,559, plus 2 x 0.7 GiB = 77,284 MiB
    assert problems(node(tmp_path, with_driver("580.65.06", 77300)), shares) == []
    [line] = problems(node(tmp_path, with_driver("580.65.06", 77200)), shares)
    assert "75.4 GiB free" in line and "0.85+0.08" in line and "2 engine" in line
    assert "gpu_memory_utilization" in line
    # a sentence-transformers embedder on CUDA: no share, one process
    assert problems(node(tmp_path, with_driver("580.65.06", 600)), [], 1)
    assert problems(node(tmp_path, with_driver("580.65.06", 800)), [], 1) == []


def test_no_gpu_a_cpu_torch_and_no_torch_are_each_named(tmp_path: Path) -> None:
    [line] = problems(node(tmp_path, ""), [0.5])
    assert "sees no GPU" in line and "--gres=gpu" in line
    [line] = problems(node(tmp_path, None, TorchFacts(True, "13.0", False)), [0.5])
    assert "torch sees no GPU" in line
    [line] = problems(node(tmp_path, torch=TorchFacts(True, None, False)), [0.5])
    assert "CPU build" in line and "setup_env.sh" in line
    [line] = problems(node(tmp_path, torch=TorchFacts(False, None, False)), [0.5])
    assert "torch is not installed" in line
    # nvidia-smi absent but torch sees a GPU: the driver goes unchecked, nothing fails
    assert problems(node(tmp_path, None, CUDA13), [0.5]) == []


def test_a_cache_that_cannot_be_written_names_its_variable(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    fake = node(tmp_path, with_driver("580.65.06"))
    fake.env = {**fake.env, "TRITON_CACHE_DIR": str(blocker / "triton")}
    [line] = problems(fake, [0.5])
    assert line.startswith("cache TRITON_CACHE_DIR at ") and "$TMPDIR" in line
    assert (tmp_path / "vllm_cache_root").is_dir()  # the others were created and written


def test_an_offline_job_only_reads_the_hub_cache(tmp_path: Path) -> None:
    """HF_HUB_OFFLINE: the hub cache must be there (it holds the weights) but need not be writable."""
    fake = node(tmp_path, with_driver("580.65.06"))
    shared = tmp_path / "shared-hub"
    shared.mkdir()
    fake.env = {**fake.env, "HF_HOME": str(shared), "HF_HUB_OFFLINE": "1"}
    assert problems(fake, [0.5]) == []
    assert list(shared.iterdir()) == []  # nothing written to a shared cache
    fake.env = {**fake.env, "HF_HOME": str(tmp_path / "missing")}
    [line] = problems(fake, [0.5])
    assert line.startswith("cache HF_HOME at ") and "HF_HUB_OFFLINE" in line
    assert not (tmp_path / "missing").exists()


def fake_node_env(tmp_path: Path, smi: str, cuda: str | None, available: bool) -> dict[str, str]:
    """PATH with an `nvidia-smi` printing `smi`, PYTHONPATH with a `torch` reporting `cuda`."""
    bin_dir, site = tmp_path / "bin", tmp_path / "site" / "torch"
    bin_dir.mkdir()
    site.mkdir(parents=True)
    (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\nprintf '%s' '{smi}'\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    (site / "__init__.py").write_text(
        "import types\n"
        f"version = types.SimpleNamespace(cuda={cuda!r})\n"
        f"cuda = types.SimpleNamespace(is_available=lambda: {available!r})\n")
    caches = {name: str(tmp_path / "caches" / name.lower()) for name in gpu_node.CACHES}
    Path(caches["HF_HOME"]).mkdir(parents=True)  # filled by setup_env.sh (the jobs run offline)
    return {**os.environ, **caches, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(REPO)])}


def run_preflight(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "benchmarks.harness.preflight", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_the_command_fails_with_one_line_per_problem_and_passes_a_good_node(tmp_path: Path) -> None:
    old = fake_node_env(tmp_path, with_driver("550.54.15", 1000), "13.0", False)
    done = run_preflight(old, "--share", "0.85", "--share", "0.08")
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 2 and all(line.startswith("preflight: ") for line in lines)
    assert ">= 580" in lines[0] and "GiB free" in lines[1]
    (tmp_path / "new").mkdir()
    new = fake_node_env(tmp_path / "new", with_driver("580.65.06"), "13.0", True)
    good = run_preflight(new, "--share", "0.85", "--share", "0.08")
    assert good.returncode == 0 and "preflight: ok (NVIDIA H100 80GB HBM3, driver 580.65.06" in good.stdout


def test_the_command_reads_the_shares_from_the_configs(tmp_path: Path) -> None:
    env = fake_node_env(tmp_path, with_driver("580.65.06", 77200), "13.0", True)
    done = run_preflight(env, "llm=qwen3_30b_a3b", "embedder=qwen3_embedding_0p6b")
    assert done.returncode == 1 and "0.85+0.08" in done.stderr and "2 engine" in done.stderr
    cpu = run_preflight(env, "llm=smollm2_cpu", "embedder=minilm_cpu")
    assert cpu.returncode == 0 and "nothing to check" in cpu.stdout
    bad = run_preflight(env, "llm=no_such_model")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_the_harness_builds_no_gpu_model_on_a_node_that_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    built: list[object] = []
    monkeypatch.setattr(models, "build_chat_model", built.append)
    monkeypatch.setattr(models, "build_embedder", built.append)
    monkeypatch.setattr(gpu_node, "gather", lambda: node(tmp_path, with_driver("570.86.15")))
    with pytest.raises(ConfigError, match="driver 570.86.15 is too old"):
        models.chat_model(backend="vllm", model="m", gpu_memory_utilization=0.5)
    with pytest.raises(ConfigError, match="GPU preflight failed"):
        models.embedder(backend="sentence_transformers", model="m", device="cuda")
    assert built == []
    models.embedder(backend="sentence_transformers", model="m", device="cpu")  # no GPU: no preflight
    monkeypatch.setattr(gpu_node, "gather", lambda: node(tmp_path, with_driver("580.65.06")))
    models.chat_model(backend="vllm", model="m", gpu_memory_utilization=0.5)
    assert len(built) == 2
