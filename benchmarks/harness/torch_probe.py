"""torch's CUDA facts (the CUDA it was built for, whether it sees a GPU, how many), asked in a child
interpreter with PYTORCH_NVML_BASED_CUDA_CHECK=1 so that the asking process never imports torch.

torch counts GPUs with the CUDA runtime unless that variable is set, and a process that has done so marks
any child it forks as unable to initialise CUDA ("Cannot re-initialize CUDA in forked subprocess"): vLLM
forks its engine core from the process that builds it, so a preflight that asked torch in-process would
break the run it checks. With the variable set, torch counts through NVML and leaves CUDA untouched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from memforest.errors import error_line

# torch counts GPUs through NVML with this set, which leaves CUDA uninitialised and fork safe.
NVML_CHECK = "PYTORCH_NVML_BASED_CUDA_CHECK"
TORCH_TIMEOUT_S = 300  # importing torch from a cold shared filesystem can take minutes
TORCH_MARK = "torch-facts "
TORCH_PROBE = f"""
import json, sys
try:
    import torch
except ModuleNotFoundError as exc:
    if exc.name != "torch":
        raise
    print({TORCH_MARK!r} + json.dumps({{"installed": False}}))
    sys.exit(0)
cuda = getattr(torch.version, "cuda", None)
sees = bool(cuda) and bool(torch.cuda.is_available())
count = getattr(torch.cuda, "device_count", None)
print({TORCH_MARK!r} + json.dumps({{"installed": True, "cuda": cuda, "sees_gpu": sees,
                                    "devices": int(count()) if sees and count else None}}))
"""


@dataclass(frozen=True)
class TorchFacts:
    """What the installed torch says: the CUDA it was built for (None: a CPU build; `installed` False:
    no torch at all), whether it sees a GPU and how many (None: not known); `error`: why torch could not
    be asked."""

    installed: bool
    cuda: str | None
    sees_gpu: bool
    devices: int | None = None
    error: str | None = None


def torch_facts(env: Mapping[str, str] | None = None, timeout_s: float = TORCH_TIMEOUT_S) -> TorchFacts:
    """torch's facts, asked in a child interpreter (with `env` and NVML-based counting)."""
    child_env = {**(os.environ if env is None else env), NVML_CHECK: "1"}
    try:
        done = subprocess.run([sys.executable, "-c", TORCH_PROBE], env=child_env, capture_output=True,
                              text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return TorchFacts(True, None, False, error=f"importing torch took over {timeout_s:g} s")
    except OSError as exc:
        return TorchFacts(True, None, False, error=error_line(exc, 300))
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(TORCH_MARK):
            try:
                facts = json.loads(line[len(TORCH_MARK):])
                return TorchFacts(bool(facts["installed"]), facts.get("cuda"), bool(facts.get("sees_gpu")),
                                  facts.get("devices"))
            except (ValueError, KeyError, TypeError):
                break
    last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
    return TorchFacts(True, None, False, error=error_line(last, 300))
