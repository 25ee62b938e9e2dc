"""What a GPU node offers and what would stop a GPU run there: the NVIDIA driver against the CUDA the
installed torch was built for, a GPU visible, free memory for the configured vLLM shares, writable caches.
Each problem is one line that says what to do. Reads only what is at hand: `nvidia-smi` (absent: the
driver is not checked, torch still says whether a GPU is visible) and torch's `version.cuda` and
`cuda.is_available()`, imported only when asked. The command is `python -m benchmarks.harness.preflight`;
the harness calls `require_gpu` before it builds a model on a GPU."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# What one engine process holds beyond its configured share: the CUDA context and cuBLAS workspace
# (about 0.7 GiB per process, measured on an H200).
OVERHEAD_GIB = 0.7
# NVIDIA's minimum driver for each CUDA major release under minor-version compatibility (Linux): torch's
# wheels carry their own CUDA runtime, so the driver is all the node has to provide.
MIN_DRIVER = {13: (580,), 12: (525, 60, 13), 11: (450, 80, 2)}
# The caches a GPU run writes: the hub (weights), vLLM's compile cache, Triton's and Inductor's kernels.
CACHES = {
    "HF_HOME": "~/.cache/huggingface",
    "VLLM_CACHE_ROOT": "~/.cache/vllm",
    "TRITON_CACHE_DIR": "~/.triton/cache",
    "TORCHINDUCTOR_CACHE_DIR": "{tmp}/torchinductor_{user}",
}
NVIDIA_SMI_QUERY = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,memory.free",
                    "--format=csv,noheader,nounits"]
MIB = 1024 * 1024


class PreflightError(RuntimeError):
    """The node cannot run the configured GPU backends; the message holds one line per problem."""


@dataclass(frozen=True)
class Gpu:
    name: str
    driver: str
    total_mib: int
    free_mib: int


@dataclass(frozen=True)
class TorchFacts:
    """What the installed torch says: the CUDA it was built for (None: a CPU build; `installed` False:
    no torch at all) and whether it sees a GPU."""

    installed: bool
    cuda: str | None
    sees_gpu: bool


@dataclass
class Node:
    """Everything the checks read, gathered once (tests build it by hand)."""

    gpus: list[Gpu] | None  # None: nvidia-smi is not at hand
    torch: TorchFacts
    env: Mapping[str, str] = field(default_factory=dict)


def parse_nvidia_smi(text: str) -> list[Gpu]:
    """The GPUs of `nvidia-smi --query-gpu=name,driver_version,memory.total,memory.free
    --format=csv,noheader,nounits`."""
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 4:
            raise ValueError(f"unexpected nvidia-smi line: {line.strip()!r}")
        name, driver, total, free = parts
        gpus.append(Gpu(name, driver, int(float(total)), int(float(free))))
    return gpus


def query_gpus(run: Callable[..., Any] = subprocess.run) -> list[Gpu] | None:
    """The GPUs nvidia-smi lists; None when nvidia-smi is not installed; [] when it finds none."""
    if shutil.which(NVIDIA_SMI_QUERY[0]) is None:
        return None
    done = run(NVIDIA_SMI_QUERY, capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        return []
    return parse_nvidia_smi(done.stdout)


def torch_facts() -> TorchFacts:
    try:
        import torch
    except ImportError:
        return TorchFacts(False, None, False)
    cuda = getattr(torch.version, "cuda", None)
    return TorchFacts(True, cuda, bool(cuda) and bool(torch.cuda.is_available()))


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.strip().split(".") if part.isdigit())


def driver_problem(driver: str, torch_cuda: str) -> str | None:
    major = version_tuple(torch_cuda)[0]
    needed = MIN_DRIVER.get(major)
    if needed is None or version_tuple(driver) >= needed:
        return None
    want = ".".join(map(str, needed))
    return (f"NVIDIA driver {driver} is too old for torch built with CUDA {torch_cuda} (needs >= {want}): "
            f"run on nodes with a newer driver, or install a torch built for the driver's CUDA (README, "
            f"'On a SLURM cluster'); loading a CUDA module does not help")


def memory_problem(gpu: Gpu, shares: Sequence[float], engines: int, overhead_gib: float) -> str | None:
    """vLLM asks for `share` of the GPU's total memory to be free when an engine starts; each engine
    process holds `overhead_gib` more."""
    need_mib = sum(shares) * gpu.total_mib + engines * overhead_gib * 1024
    if gpu.free_mib >= need_mib:
        return None
    return (f"GPU {gpu.name}: {gpu.free_mib / 1024:.1f} GiB free of {gpu.total_mib / 1024:.1f} GiB, but the "
            f"configured shares {'+'.join(f'{s:g}' for s in shares) or '0'} of it and {engines} engine "
            f"process(es) at {overhead_gib:g} GiB need {need_mib / 1024:.1f} GiB: lower "
            f"llm.gpu_memory_utilization / embedder.gpu_memory_utilization or free the GPU (nvidia-smi "
            f"shows who holds it)")


def cache_path(name: str, env: Mapping[str, str]) -> Path:
    default = CACHES[name].format(tmp=tempfile.gettempdir(), user=env.get("USER", "user"))
    return Path(os.path.expanduser(env.get(name) or default))


def offline(env: Mapping[str, str]) -> bool:
    return env.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def cache_problem(name: str, env: Mapping[str, str]) -> str | None:
    """None when the cache `name` points to (or its default) can be created and written; the hub cache of
    an offline job (HF_HUB_OFFLINE) only has to be there and readable (a cluster's shared, read-only
    copy of the weights is fine)."""
    path = cache_path(name, env)
    if name == "HF_HOME" and offline(env):
        if not path.is_dir() or not os.access(path, os.R_OK | os.X_OK):
            return (f"cache HF_HOME at {path} is not a readable directory, and HF_HUB_OFFLINE is set: point "
                    f"HF_HOME at the hub cache that slurm/setup_env.sh filled")
        return None
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".preflight-"):
            pass
    except OSError as exc:
        return (f"cache {name} at {path} is not writable ({exc.strerror or exc}): set {name} to a "
                f"writable directory (compile caches node-local, e.g. under $TMPDIR; slurm/env.sh does)")
    return None


def problems(node: Node, shares: Sequence[float] = (), engines: int | None = None,
             overhead_gib: float = OVERHEAD_GIB) -> list[str]:
    """One line per problem that would stop a GPU run of `engines` engine processes (default: one per
    share, at least one) whose vLLM memory shares are `shares`."""
    engines = max(len(shares), 1) if engines is None else engines
    found: list[str] = []
    t = node.torch
    if not t.installed:
        found.append("torch is not installed: build the GPU environment with slurm/setup_env.sh")
    elif not t.cuda:
        found.append("the installed torch is a CPU build: use the GPU environment that slurm/setup_env.sh "
                     "builds (MEMFOREST_VENV), not the CPU one")
    if node.gpus is not None and not node.gpus:
        found.append("nvidia-smi sees no GPU: run on a GPU node (sbatch --gres=gpu:1) and check "
                     "CUDA_VISIBLE_DEVICES")
    elif node.gpus is None and t.installed and t.cuda and not t.sees_gpu:
        found.append("torch sees no GPU and nvidia-smi is not installed: run on a GPU node "
                     "(sbatch --gres=gpu:1)")
    if node.gpus and t.cuda:
        drivers = [p for p in {driver_problem(g.driver, t.cuda) for g in node.gpus} if p]
        found += drivers
        if not drivers and not t.sees_gpu:
            found.append(f"nvidia-smi lists a GPU but torch (CUDA {t.cuda}) cannot use it: check "
                         f"CUDA_VISIBLE_DEVICES and that no CUDA module's libraries shadow torch's own")
    if node.gpus:
        memory = memory_problem(node.gpus[0], shares, engines, overhead_gib)
        if memory:
            found.append(memory)
    found += [p for p in (cache_problem(name, node.env) for name in CACHES) if p]
    return found


def gather(env: Mapping[str, str] | None = None) -> Node:
    return Node(query_gpus(), torch_facts(), dict(os.environ if env is None else env))


def gpu_shares(llm: Any, embedder: Any) -> tuple[list[float], int]:
    """The vLLM memory shares and engine processes of an `llm` and an `embedder` config (library or
    harness nodes): vLLM engines take their share, a sentence-transformers embedder on CUDA only its
    process overhead."""
    shares, engines = [], 0
    for node in (llm, embedder):
        if node is None:
            continue
        backend = getattr(node, "backend", None)
        if backend == "vllm":
            shares.append(float(node.gpu_memory_utilization))
            engines += 1
        elif backend == "sentence_transformers" and str(getattr(node, "device", "")).startswith("cuda"):
            engines += 1
    return shares, engines


def uses_gpu(llm: Any, embedder: Any) -> bool:
    return gpu_shares(llm, embedder)[1] > 0


def require_gpu(shares: Sequence[float], engines: int, node: Node | None = None) -> None:
    """Raise PreflightError, one line per problem, when the node cannot run these engines."""
    found = problems(gather() if node is None else node, shares, engines)
    if found:
        raise PreflightError("GPU preflight failed:\n" + "\n".join(f"  {p}" for p in found))
