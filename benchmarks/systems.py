"""Registry of the memory systems the harness can run, keyed by the method config's `kind`.

A method config is a plain mapping: `name`, `kind`, and whatever its builder reads. Builders get the
models the harness built (the chat model only when `needs_chat_model` says so) and return a
`MemorySystem`. Baselines register here as they are added.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from baselines.base import MemorySystem
from baselines.memforest_method import MemForestSystem
from benchmarks.datasets.records import Session
from memforest.config import MemForestConfig, from_dict
from memforest.llm.base import ChatModel, Embedder
from memforest.llm.calllog import CallLog

Config = Mapping[str, Any]


@dataclass(frozen=True)
class Models:
    """What the harness hands a system: the embedder, and the backbone chat model when needed."""

    embedder: Embedder
    llm: ChatModel | None
    call_log: CallLog


@dataclass(frozen=True)
class SystemSpec:
    build: Callable[[Config, Config, Config, Models], MemorySystem]  # (method, llm, embedder, models)
    needs_chat_model: Callable[[Config], bool]  # on the write or retrieval path


SYSTEMS: dict[str, SystemSpec] = {}


def register(kind: str, spec: SystemSpec) -> None:
    SYSTEMS[kind] = spec


def spec_for(method: Config) -> SystemSpec:
    kind = str(method.get("kind", ""))
    if kind not in SYSTEMS:
        raise ValueError(f"unknown method kind {kind!r}; registered: {', '.join(sorted(SYSTEMS))}")
    return SYSTEMS[kind]


def build_system(method: Config, llm: Config, embedder: Config, models: Models) -> MemorySystem:
    return spec_for(method).build(method, llm, embedder, models)


def needs_chat_model(method: Config) -> bool:
    return spec_for(method).needs_chat_model(method)


def model_fields(group: Config) -> dict[str, Any]:
    """A model config group without its harness-only `name`: the fields of LLMConfig/EmbedderConfig."""
    return {key: value for key, value in group.items() if key != "name"}


def attach(system: MemorySystem, instance_id: str, workdir: Path, sessions: Sequence[Session]) -> bool:
    """Reopen a completed store instead of rebuilding it; False when the system cannot."""
    reopen = getattr(system, "attach", None)
    if reopen is None:
        return False
    reopen(instance_id, workdir, sessions)
    return True


# ---------------------------------------------------------------- MemForest


def memforest_config(method: Config, llm: Config, embedder: Config) -> MemForestConfig:
    """MemForestConfig from the method's overrides, with the llm and embedder groups beneath them."""
    overrides = {key: dict(value) if isinstance(value, Mapping) else value
                 for key, value in dict(method.get("memforest") or {}).items()}
    merged: dict[str, Any] = dict(overrides)
    merged["llm"] = {**model_fields(llm), **overrides.get("llm", {})}
    merged["embedder"] = {**model_fields(embedder), **overrides.get("embedder", {})}
    return from_dict(MemForestConfig, merged)


def _memforest_needs_llm(method: Config) -> bool:
    return bool(method.get("generate", True)) or method.get("mode", "embed") == "planner"


def _build_memforest(method: Config, llm: Config, embedder: Config, models: Models) -> MemorySystem:
    return MemForestSystem(
        memforest_config(method, llm, embedder),
        models.llm,
        models.embedder,
        models.call_log,
        mode=str(method.get("mode", "embed")),
        generate=bool(method.get("generate", True)),
        name=str(method.get("name", "memforest")),
    )


register("memforest", SystemSpec(_build_memforest, _memforest_needs_llm))


# ---------------------------------------------------------------- baselines (benchmarks/baseline_systems.py)

from benchmarks.baseline_systems import register_baselines  # noqa: E402

register_baselines()
