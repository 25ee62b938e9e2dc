"""What a GPU node offers and what would stop a GPU run there: the NVIDIA driver against the CUDA the
installed torch was built for, the GPUs CUDA_VISIBLE_DEVICES leaves visible (as many as the run spreads
over: the llm's tensor parallelism, an embedder on `cuda:1`; what each holds is
benchmarks.harness.gpu_demand's), free memory for its vLLM shares on each GPU the run uses, a C compiler and
Python's headers for the kernels vLLM's Triton compiles, writable caches (the hub cache only when a model
comes from the hub). Each problem is one line that says what to do; a warning (a proxy that
node-local and cross-node HTTP would go through, a GPU whose memory nvidia-smi cannot report) does not
fail the check.

Reads only what is at hand: `nvidia-smi` (benchmarks.harness.nvidia_smi; absent: the driver is not
checked, torch still says whether a GPU is visible), torch's CUDA facts from a child interpreter
(benchmarks.harness.torch_probe: this process never imports torch, so that a process forked from it, as
vLLM forks its engine core, can still initialise CUDA), the environment and PATH. The command is
`python -m benchmarks.harness.preflight`; the harness calls `require_gpu_for` with its configs before it
builds a model on a GPU."""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import sysconfig
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.harness.gpu_demand import Demand, demand
from benchmarks.harness.gpu_demand import gpu_shares as gpu_shares
from benchmarks.harness.nvidia_smi import Gpu, query_gpus, visible_gpus
from benchmarks.harness.torch_probe import TorchFacts, torch_facts

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
PROXIES = ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY")
NO_PROXIES = ("no_proxy", "NO_PROXY")


class PreflightError(RuntimeError):
    """The node cannot run the configured GPU backends; the message holds one line per problem."""


@dataclass(frozen=True)
class Toolchain:
    """What Triton compiles its kernels with: the C compiler (CC, else gcc, else clang; None: none
    found) and this Python's headers."""

    cc: str | None  # the CC variable, when set
    compiler: str | None
    include: str
    headers: bool


@dataclass
class Node:
    """Everything the checks read, gathered once (tests build it by hand; None: not gathered)."""

    gpus: list[Gpu] | None  # None: nvidia-smi is not at hand
    torch: TorchFacts
    env: Mapping[str, str] = field(default_factory=dict)
    toolchain: Toolchain | None = None
    host: str | None = None

    def visible(self) -> list[Gpu] | None:
        """The GPUs this process may use, in CUDA's order (None: nvidia-smi is not at hand)."""
        if self.gpus is None:
            return None
        return visible_gpus(self.gpus, self.env.get("CUDA_VISIBLE_DEVICES"))


def toolchain(env: Mapping[str, str]) -> Toolchain:
    path = env.get("PATH")
    cc = env.get("CC", "").strip() or None
    if cc is not None:
        words = shlex.split(cc)
        compiler = shutil.which(words[0], path=path) if words else None
    else:
        compiler = shutil.which("gcc", path=path) or shutil.which("clang", path=path)
    include = sysconfig.get_paths()["include"]
    return Toolchain(cc, compiler, include, os.path.isfile(os.path.join(include, "Python.h")))


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
    process holds `overhead_gib` more. None as well when nvidia-smi does not report the memory."""
    if gpu.total_mib is None or gpu.free_mib is None:
        return None
    need_mib = sum(shares) * gpu.total_mib + engines * overhead_gib * 1024
    if gpu.free_mib >= need_mib:
        return None
    return (f"{gpu.label}: {gpu.free_mib / 1024:.1f} GiB free of {gpu.total_mib / 1024:.1f} GiB, but the "
            f"configured shares {'+'.join(f'{s:g}' for s in shares) or '0'} of it and {engines} engine "
            f"process(es) at {overhead_gib:g} GiB need {need_mib / 1024:.1f} GiB: lower "
            f"llm.gpu_memory_utilization / embedder.gpu_memory_utilization or free the GPU (nvidia-smi "
            f"shows who holds it)")


def cache_path(name: str, env: Mapping[str, str]) -> Path:
    path = env.get(name) or CACHES[name].format(tmp=tempfile.gettempdir(), user=env.get("USER", "user"))
    if path.startswith("~/") and env.get("HOME"):
        return Path(env["HOME"]) / path[2:]
    return Path(os.path.expanduser(path))


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


def torch_problems(t: TorchFacts) -> list[str]:
    if t.error:
        return [f"torch could not be asked about CUDA ({t.error}): run `python -c 'import torch; "
                f"print(torch.cuda.is_available())'` in the GPU environment to see why"]
    if not t.installed:
        return ["torch is not installed: build the GPU environment with slurm/setup_env.sh"]
    if not t.cuda:
        return ["the installed torch is a CPU build: use the GPU environment that slurm/setup_env.sh "
                "builds (MEMFOREST_VENV), not the CPU one"]
    return []


def visibility_problems(node: Node, asked: Demand) -> list[str]:
    """No GPU at all, none left visible, or fewer visible than the run spreads over."""
    t, visible, spec = node.torch, node.visible(), node.env.get("CUDA_VISIBLE_DEVICES")
    if node.gpus is not None and not node.gpus:
        return ["nvidia-smi sees no GPU: run on a GPU node (sbatch --gres=gpu:1) and check "
                "CUDA_VISIBLE_DEVICES"]
    if node.gpus and not visible:
        return [f"CUDA_VISIBLE_DEVICES={spec!r} leaves none of the {len(node.gpus)} GPU(s) nvidia-smi lists "
                f"visible: unset it or name GPUs that nvidia-smi lists (indices or GPU-/MIG- UUIDs)"]
    if node.gpus is None and t.installed and t.cuda and not t.sees_gpu and not t.error:
        return ["torch sees no GPU and nvidia-smi is not installed: run on a GPU node (sbatch --gres=gpu:1)"]
    count = len(visible) if visible is not None else (t.devices if t.sees_gpu else None)
    needed = len(asked.gpus)
    if count is None or not 0 < count < needed:
        return []
    settings = ", ".join(asked.spread_by) or f"{needed} GPUs"
    return [f"the run needs {needed} GPUs ({settings}) but {count} {'is' if count == 1 else 'are'} "
            f"visible: ask for {needed} (sbatch --gres=gpu:{needed}, hydra.launcher.gpus_per_node={needed}) "
            f"or change {settings}"]


def driver_problems(node: Node) -> list[str]:
    t = node.torch
    if not node.gpus or not t.cuda:
        return []
    cuda = t.cuda
    found = sorted({p for p in (driver_problem(g.driver, cuda) for g in node.gpus if g.driver) if p})
    if not found and not t.sees_gpu and node.visible():
        found.append(f"nvidia-smi lists a GPU but torch (CUDA {cuda}) cannot use it: check "
                     f"CUDA_VISIBLE_DEVICES and that no CUDA module's libraries shadow torch's own")
    return found


def memory_problems(node: Node, asked: Demand, overhead_gib: float) -> list[str]:
    found = []
    for gpu, use in zip(node.visible() or [], asked.gpus):
        line = memory_problem(gpu, use.shares, use.processes, overhead_gib) if use.processes else None
        found += [line] if line else []
    return found


def toolchain_problems(tools: Toolchain | None) -> list[str]:
    """Triton, under vLLM, compiles kernels at run time with a C compiler against Python.h."""
    if tools is None:
        return []
    found = []
    if tools.compiler is None and tools.cc:
        found.append(f"CC={tools.cc} is not a command here, and vLLM's Triton compiles kernels with it: set "
                     f"CC to an installed C compiler")
    elif tools.compiler is None:
        found.append("no C compiler (gcc or clang) on PATH, and vLLM's Triton compiles kernels with one at "
                     "run time: load one (module load gcc), install gcc, or set CC")
    if not tools.headers:
        found.append(f"no Python.h in {tools.include}, and vLLM's Triton compiles kernels against it: "
                     f"install the headers (python3-dev / python3-devel for this Python's version), or build "
                     f"the GPU environment from a Python that has them (a cluster Python module, uv, conda)")
    return found


def check(node: Node, asked: Demand, overhead_gib: float = OVERHEAD_GIB) -> list[str]:
    """One line per problem that would stop a run asking `asked` of this node."""
    found = torch_problems(node.torch) + visibility_problems(node, asked) + driver_problems(node)
    found += memory_problems(node, asked, overhead_gib)
    if asked.vllm:
        found += toolchain_problems(node.toolchain)
    caches = [name for name in CACHES if asked.hub or name != "HF_HOME"]
    return found + [p for p in (cache_problem(name, node.env) for name in caches) if p]


def problems(node: Node, shares: Sequence[float] = (), engines: int | None = None,
             overhead_gib: float = OVERHEAD_GIB, *, tensor_parallel: int = 1, hub: bool = True,
             vllm: bool | None = None) -> list[str]:
    """`check` for a run of `engines` engine processes (default: one per share, at least one) whose vLLM
    memory shares are `shares` (the llm's first), with its llm over `tensor_parallel` GPUs; `hub`: a
    model comes from the hub cache; `vllm` (default: any share): a vLLM engine runs in this job."""
    return check(node, Demand.by_hand(shares, engines, tensor_parallel, hub, vllm), overhead_gib)


def bypassed(host: str, no_proxy: str) -> bool:
    """Whether the no_proxy list `no_proxy` sends `host` around the proxy (an exact name, a domain
    suffix or `*`)."""
    host = host.lower()
    for entry in (e.strip().lower() for e in no_proxy.split(",")):
        domain = entry.lstrip(".")
        if entry == "*" or (domain and (host == domain or host.endswith("." + domain))):
            return True
    return False


def proxy_warning(env: Mapping[str, str], host: str | None) -> str | None:
    """A proxy that node-local health checks, or clients of a server on another node, would go through."""
    proxies = [name for name in PROXIES if env.get(name)]
    if not proxies:
        return None
    lists = [env[name] for name in NO_PROXIES if env.get(name)] or [""]
    targets = {"localhost": "localhost", "127.0.0.1": "127.0.0.1"}
    if host:
        targets[host] = host
        if "." in host:
            targets[f"the node domain .{host.split('.', 1)[1]}"] = f"node.{host.split('.', 1)[1]}"
    missing = [label for label, probe in targets.items() if not all(bypassed(probe, ls) for ls in lists)]
    if not missing:
        return None
    return (f"{'/'.join(proxies)} is set but no_proxy/NO_PROXY does not cover {', '.join(missing)}: health "
            f"checks of this node's servers and clients of servers on other nodes would go through the "
            f"proxy; add localhost,127.0.0.1,::1,$(hostname) and the cluster's node domain (or the server "
            f"node's name) to both no_proxy and NO_PROXY (slurm/env.sh adds this node's names)")


def warnings(node: Node, gpus_used: int = 1) -> list[str]:
    """One line per thing that may go wrong but does not stop the run (the check still passes)."""
    found = [f"{gpu.label}: nvidia-smi does not report its memory (a MIG instance or a virtual GPU): free "
             f"memory for the shares is not checked" for gpu in (node.visible() or [])[:max(gpus_used, 1)]
             if gpu.total_mib is None or gpu.free_mib is None]
    proxy = proxy_warning(node.env, node.host)
    return found + ([proxy] if proxy else [])


def gather(env: Mapping[str, str] | None = None) -> Node:
    """The node as this process sees it (`env`: the environment to read, default this process's)."""
    read = dict(os.environ if env is None else env)
    return Node(query_gpus(), torch_facts(read), read, toolchain(read), socket.gethostname())


def require_gpu_for(llm: Any, embedder: Any, node: Node | None = None) -> None:
    """Raise PreflightError, one line per problem, when the node cannot run the GPU backends among an
    `llm` and an `embedder` config (the GPUs each uses, the hub cache only when a model comes from the
    hub)."""
    found = check(gather() if node is None else node, demand(llm, embedder))
    if found:
        raise PreflightError("GPU preflight failed:\n" + "\n".join(f"  {p}" for p in found))
