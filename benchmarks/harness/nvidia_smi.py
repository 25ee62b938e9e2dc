"""The GPUs of a node as `nvidia-smi` lists them, and those of them CUDA_VISIBLE_DEVICES leaves to this
process. A field nvidia-smi cannot fill (`[N/A]`, `[Not Supported]` on MIG and some virtual GPUs) is
unknown (None), never an error.

CUDA_VISIBLE_DEVICES is read as CUDA reads it: unset, every GPU; empty, `-1` or SLURM's `NoDevFiles`, none;
otherwise a comma-separated list of indices, GPU UUIDs (`GPU-...`, a unique prefix will do) or MIG
instances (`MIG-...`), read up to its first entry that names no device. An index is a place in
nvidia-smi's list (which inside a job confined to its GPUs holds only those), the order CUDA uses when
the GPUs are of one model (or with CUDA_DEVICE_ORDER=PCI_BUS_ID). A MIG instance's memory is not the
GPU's: it stays unknown."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

QUERY = ["nvidia-smi", "--query-gpu=index,uuid,name,driver_version,memory.total,memory.free",
         "--format=csv,noheader,nounits"]
NO_DEVICES = ("", "-1", "NoDevFiles")


@dataclass(frozen=True)
class Gpu:
    """One GPU; None where nvidia-smi could not say. `index`: nvidia-smi's (-1: not known)."""

    name: str
    driver: str | None
    total_mib: int | None
    free_mib: int | None
    index: int = 0
    uuid: str | None = None

    @property
    def label(self) -> str:
        return f"GPU {self.index} ({self.name})" if self.index >= 0 else f"{self.name} {self.uuid}"


def _known(text: str) -> str | None:
    text = text.strip()
    return None if not text or text.startswith("[") or text.upper() in ("N/A", "NA") else text


def _mib(text: str) -> int | None:
    known = _known(text)
    try:
        return None if known is None else int(float(known))
    except ValueError:
        return None


def parse_nvidia_smi(text: str) -> list[Gpu]:
    """The GPUs of `nvidia-smi --query-gpu=index,uuid,name,driver_version,memory.total,memory.free
    --format=csv,noheader,nounits`, or of the same query without index and uuid; ValueError on any
    other line."""
    gpus: list[Gpu] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 4:
            parts = [str(len(gpus)), "", *parts]
        if len(parts) != 6 or not parts[0].isdigit():
            raise ValueError(f"unexpected nvidia-smi line: {line.strip()!r}")
        index, uuid, name, driver, total, free = parts
        driver_known = _known(driver)
        gpus.append(Gpu(name, driver_known if driver_known and driver_known[0].isdigit() else None,
                        _mib(total), _mib(free), int(index), _known(uuid)))
    return gpus


def query_gpus(run: Callable[..., Any] = subprocess.run) -> list[Gpu] | None:
    """The GPUs nvidia-smi lists; None when nvidia-smi is not installed or answers what no GPU list
    looks like; [] when it finds none."""
    if shutil.which(QUERY[0]) is None:
        return None
    try:
        done = run(QUERY, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return []
    try:
        return parse_nvidia_smi(done.stdout)
    except ValueError:
        return None


def _by_uuid(gpus: Sequence[Gpu], entry: str) -> Gpu | None:
    matches = [g for g in gpus if g.uuid and g.uuid.lower().startswith(entry.lower())]
    return matches[0] if len(matches) == 1 else None


def _mig(gpus: Sequence[Gpu], entry: str) -> Gpu:
    """A MIG instance: its parent's name and driver when the id names the parent (`MIG-GPU-<uuid>/..`),
    its memory unknown."""
    parent = _by_uuid(gpus, entry[len("MIG-"):].split("/")[0]) if entry.startswith("MIG-GPU-") else None
    driver = parent.driver if parent else (gpus[0].driver if gpus else None)
    name = f"MIG instance of {parent.name}" if parent else "MIG instance"
    return Gpu(name, driver, None, None, parent.index if parent else -1, entry)


def visible_gpus(gpus: Sequence[Gpu], spec: str | None) -> list[Gpu]:
    """The GPUs of `gpus` (nvidia-smi's list) that CUDA_VISIBLE_DEVICES=`spec` leaves visible, in its
    order (None: every GPU)."""
    if spec is None:
        return list(gpus)
    if spec.strip() in NO_DEVICES:
        return []
    seen: list[Gpu] = []
    for raw in spec.split(","):
        entry = raw.strip()
        found: Gpu | None
        if entry.isdigit():
            found = gpus[int(entry)] if int(entry) < len(gpus) else None
        elif entry.startswith("MIG-"):
            found = _mig(gpus, entry)
        elif entry.startswith("GPU-"):
            known = any(g.uuid for g in gpus)  # without uuids (an older query), the GPU is not known
            found = _by_uuid(gpus, entry) if known else Gpu("GPU", gpus[0].driver if gpus else None,
                                                            None, None, -1, entry)
        else:
            found = None
        if found is None or found in seen:
            break
        seen.append(found)
    return seen

