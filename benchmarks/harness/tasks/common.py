"""What the tasks share: the MemForest of a run and the dataset's sessions as library payloads."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from baselines.base import SystemUnavailable
from benchmarks.datasets import Instance
from memforest.api import MemForest

_UNSAFE = re.compile(r"[^A-Za-z0-9_.:-]+")


def open_forest(system: Any, path: Path) -> MemForest:
    """A MemForest at `path` with the run's method configuration, models and call log."""
    needed = ("config", "llm", "embedder", "log")
    if not all(hasattr(system, n) for n in needed) or getattr(system, "generate", True) is False:
        raise SystemUnavailable("this task needs a MemForest method with a chat model (e.g. "
                                "method=memforest_embed)")
    return MemForest(path, system.config, llm=system.llm, embedder=system.embedder, call_log=system.log)


def payload(instance: Instance, prefix: str) -> list[dict[str, Any]]:
    """The instance's sessions as library input; session ids get `prefix` so that instances whose
    haystacks share sessions stay distinct; turns without text are left out."""
    out = []
    for s in instance.sessions:
        turns = [{"role": t.role, "content": t.content,
                  "timestamp": t.timestamp.isoformat() if t.timestamp else None}
                 for t in s.turns if t.content.strip()]
        if turns:
            sid = _UNSAFE.sub("_", f"{prefix}{s.session_id}")[:120]
            out.append({"session_id": sid, "timestamp": s.timestamp.isoformat(), "turns": turns})
    return out
