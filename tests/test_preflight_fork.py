"""The GPU preflight leaves fork usable: a process forked after it (as vLLM forks its engine core) can
still initialise CUDA. The `torch` here behaves as the real one at start-up: counting GPUs through the
CUDA runtime (`cuda.is_available()` without PYTORCH_NVML_BASED_CUDA_CHECK=1) marks every child forked
afterwards as unable to initialise CUDA; counting through NVML (with the variable set) does not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RE_INIT = ("Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you must use "
           "the 'spawn' start method")
FAKE_TORCH = """
import types

from torch import cuda

version = types.SimpleNamespace(cuda="13.0")


def zeros(*size, device="cpu"):
    if str(device).startswith("cuda"):
        cuda.init()
    return [0.0] * (size[0] if size else 1)
"""
FAKE_TORCH_CUDA = f"""
import os

NVML_DEVICES = 1
_in_bad_fork = False
_fork_poisoned = False


def _mark_bad_fork():
    global _in_bad_fork
    _in_bad_fork = True


def _runtime_device_count():
    global _fork_poisoned
    if not _fork_poisoned:
        os.register_at_fork(after_in_child=_mark_bad_fork)
        _fork_poisoned = True
    return NVML_DEVICES


def device_count():
    return NVML_DEVICES


def is_available():
    if os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK") == "1":
        return device_count() > 0
    return _runtime_device_count() > 0


def init():
    if _in_bad_fork:
        raise RuntimeError({RE_INIT!r})
    _runtime_device_count()
"""
# Runs STEP in a fresh interpreter, then forks: the child initialises CUDA (exit 0) or cannot (exit 1).
FORK_AFTER = """
import json, os, sys
{step}
pid = os.fork()
if pid == 0:
    import torch
    try:
        torch.cuda.init()
    except RuntimeError:
        os._exit(1)
    os._exit(0)
print("FORKED " + json.dumps({{"child": os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), **facts}}))
"""
STEPS = {
    "gather": ("from benchmarks.harness import gpu_node\n"
               "t = gpu_node.gather().torch\n"
               "facts = {'cuda': t.cuda, 'sees_gpu': t.sees_gpu, 'devices': getattr(t, 'devices', None)}"),
    "command": ("from benchmarks.harness import preflight\n"
                "facts = {'status': preflight.main(['--share', '0.5'])}"),
    "torch in-process": "import torch\nfacts = {'sees_gpu': torch.cuda.is_available()}",
}


def fake_torch_env(tmp_path: Path) -> dict[str, str]:
    """This environment without PYTORCH_NVML_BASED_CUDA_CHECK, the fake torch and this checkout on
    PYTHONPATH, and caches under `tmp_path`."""
    (tmp_path / "site" / "torch").mkdir(parents=True)
    (tmp_path / "site" / "torch" / "__init__.py").write_text(FAKE_TORCH)
    (tmp_path / "site" / "torch" / "cuda.py").write_text(FAKE_TORCH_CUDA)
    left_out = ("PYTORCH_NVML_BASED_CUDA_CHECK", "CUDA_VISIBLE_DEVICES")
    env = {k: v for k, v in os.environ.items() if k not in left_out}
    caches = {name: str(tmp_path / "caches" / name.lower())
              for name in ("HF_HOME", "VLLM_CACHE_ROOT", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR")}
    return {**env, **caches, "HF_HUB_OFFLINE": "0",
            "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(REPO)])}


def run_python(env: dict[str, str], code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300, check=False)


def fork_after(env: dict[str, str], step: str) -> dict[str, object]:
    done = run_python(env, FORK_AFTER.format(step=step))
    assert done.returncode == 0, done.stdout + done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith("FORKED ")]
    result: dict[str, object] = json.loads(line[len("FORKED "):])
    return result


def test_the_fake_torch_poisons_fork_as_the_real_one_does(tmp_path: Path) -> None:
    env = fake_torch_env(tmp_path)
    assert fork_after(env, STEPS["torch in-process"]) == {"child": 1, "sees_gpu": True}
    nvml = {**env, "PYTORCH_NVML_BASED_CUDA_CHECK": "1"}
    assert fork_after(nvml, STEPS["torch in-process"]) == {"child": 0, "sees_gpu": True}


def test_a_child_forked_after_the_preflight_initialises_cuda(tmp_path: Path) -> None:
    env = fake_torch_env(tmp_path)
    assert fork_after(env, STEPS["gather"]) == {"child": 0, "cuda": "13.0", "sees_gpu": True, "devices": 1}


def test_a_child_forked_after_the_preflight_command_initialises_cuda(tmp_path: Path) -> None:
    assert fork_after(fake_torch_env(tmp_path), STEPS["command"]) == {"child": 0, "status": 0}


def test_the_preflight_imports_no_torch_and_sets_no_variable_here(tmp_path: Path) -> None:
    done = run_python(fake_torch_env(tmp_path), "import os, sys\nfrom benchmarks.harness import gpu_node\n"
                      "gpu_node.gather()\nsys.exit('torch' in sys.modules or "
                      "'PYTORCH_NVML_BASED_CUDA_CHECK' in os.environ)")
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(("poison", "expected"), [
    ("", "None\nfork check: a child forked after the preflight initialised CUDA"),
    ("import torch\ntorch.cuda.is_available()", RE_INIT)])
def test_the_gpu_checks_fork_check_reports_a_poisoned_parent(
    tmp_path: Path, poison: str, expected: str,
) -> None:
    code = ("from benchmarks.harness import gpu_check, gpu_node\ngpu_node.gather()\n" + poison +
            "\nprint(repr(gpu_check.fork_check('cuda', 120)))\npassed, line = gpu_check.fork_line('cuda')\n"
            "print(line)\nprint(passed)")
    done = run_python(fake_torch_env(tmp_path), code)
    assert done.returncode == 0, done.stderr
    *shown, passed = done.stdout.strip().splitlines()
    assert expected in "\n".join(shown) and passed == str(not poison)
    if poison:
        assert "PYTORCH_NVML_BASED_CUDA_CHECK=1" in shown[-1] and shown[-1].startswith("fork check: ")
