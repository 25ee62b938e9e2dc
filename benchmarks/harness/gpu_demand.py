"""What a run asks of a GPU node, read from its `llm` and `embedder` configs (library or harness nodes):
for each GPU it uses, in CUDA's order, the vLLM memory shares and the processes it holds; the settings
that spread it over more than one GPU; whether a model comes from the hub; whether a vLLM engine runs.

A vLLM engine takes its share (`gpu_memory_utilization`) of the first GPU, and with
`tensor_parallel_size` N of each of the first N; a sentence-transformers model on CUDA holds only its
process on the GPU its device names (`cuda:1`: the second)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness.hub_models import is_hub_id


@dataclass(frozen=True)
class GpuUse:
    """What one GPU holds: vLLM memory shares and engine (or worker) processes."""

    shares: tuple[float, ...] = ()
    processes: int = 0

    def plus(self, shares: Sequence[float], processes: int) -> GpuUse:
        return GpuUse(self.shares + tuple(shares), self.processes + processes)


@dataclass(frozen=True)
class Demand:
    """`gpus`: what each GPU the run uses holds, in CUDA's order; `spread_by`: the settings that make it
    more than one (`llm.tensor_parallel_size=2`); `hub`: a model comes from the hub cache; `vllm`: a vLLM
    engine runs in this job (and Triton compiles kernels)."""

    gpus: tuple[GpuUse, ...] = ()
    spread_by: tuple[str, ...] = ()
    hub: bool = False
    vllm: bool = False

    @classmethod
    def by_hand(cls, shares: Sequence[float], engines: int | None = None, tensor_parallel: int = 1,
                hub: bool = True, vllm: bool | None = None) -> Demand:
        """Every share and `engines` processes (default: one per share, at least one) on the first GPU;
        with tensor parallelism, the first share (the llm's) and one worker on each further GPU."""
        first = GpuUse(tuple(shares), max(len(shares), 1) if engines is None else engines)
        rest = (GpuUse(tuple(shares[:1]), 1),) * (tensor_parallel - 1)
        spread = (f"llm.tensor_parallel_size={tensor_parallel}",) if tensor_parallel > 1 else ()
        return cls((first, *rest), spread, hub, bool(shares) if vllm is None else vllm)

    def plus(self, shares: Sequence[float], processes: int) -> Demand:
        """This demand with `shares` and `processes` more on the first GPU."""
        gpus = self.gpus or (GpuUse(),)
        return Demand((gpus[0].plus(shares, processes), *gpus[1:]), self.spread_by, self.hub,
                      self.vllm or bool(shares))


def gpu_shares(llm: Any, embedder: Any) -> tuple[list[float], int]:
    """The vLLM memory shares and engine processes of an `llm` and an `embedder` config: vLLM engines
    take their share, a sentence-transformers model on CUDA only its process overhead."""
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


def from_hub(model: Any) -> bool:
    """A hub id (`org/name`) that is not a local directory of that name."""
    return is_hub_id(model) and not Path(os.path.expanduser(str(model))).exists()


def cuda_place(device: Any) -> int:
    """The GPU a torch device string names: `cuda` and `cuda:0` the first, `cuda:1` the second."""
    _, _, index = str(device).partition(":")
    return int(index) if index.isdigit() else 0


def demand(llm: Any, embedder: Any) -> Demand:
    """What the GPU backends among an `llm` and an `embedder` config ask of the node."""
    uses: dict[int, GpuUse] = {}
    spread: list[str] = []
    hub = False
    for label, node in (("llm", llm), ("embedder", embedder)):
        shares, processes = gpu_shares(node, None)
        if not processes:
            continue
        hub = hub or from_hub(getattr(node, "model", None))
        if shares:
            tp = max(int(getattr(node, "tensor_parallel_size", 1) or 1), 1)
            places = range(tp)
            spread += [f"{label}.tensor_parallel_size={tp}"] if tp > 1 else []
        else:
            places = range(cuda_place(node.device), cuda_place(node.device) + 1)
            spread += [f"{label}.device={node.device}"] if places[0] > 0 else []
        for place in places:
            uses[place] = uses.get(place, GpuUse()).plus(shares, 1)
    gpus = tuple(uses.get(place, GpuUse()) for place in range(max(uses) + 1)) if uses else ()
    return Demand(gpus, tuple(spread), hub, bool(gpu_shares(llm, embedder)[0]))
