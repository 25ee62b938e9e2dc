"""What the tasks share: the MemForest of a run and the dataset's sessions as library payloads."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from baselines.base import MemorySystem, SystemUnavailable
from baselines.memforest_method.system import MemForestSystem, StoredSessions
from benchmarks.datasets import Instance
from memforest.api import MemForest


def open_forest(system: MemorySystem, path: Path) -> MemForest:
    """A MemForest at `path` with the run's method configuration, models and call log."""
    if not isinstance(system, MemForestSystem) or not system.generate:
        raise SystemUnavailable("this task needs a MemForest method with a chat model (e.g. "
                                "method=memforest_embed)")
    return MemForest(path, system.config, llm=system.llm, embedder=system.embedder, call_log=system.log)


def payload(instance: Instance, prefix: str) -> list[dict[str, Any]]:
    """The instance's sessions as library input, converted as the MemForest adapter converts them
    (`StoredSessions`: a named speaker as a `Name: ` prefix, unreadable turns left out, ids made safe);
    session ids get `prefix` so that instances whose haystacks share sessions stay distinct."""
    sessions = [replace(s, session_id=f"{prefix}{s.session_id}") for s in instance.sessions]
    return StoredSessions().payload(sessions)
