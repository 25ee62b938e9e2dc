"""LightMem through a subprocess worker in the user's own LightMem checkout and environment."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from baselines.base import Endpoints, SystemUnavailable
from baselines.worker import WorkerSystem

WORKER = Path(__file__).with_name("worker.py")


def lightmem_system(endpoints: Endpoints, *, python: str | None = None, checkout: str | None = None,
                    config: Mapping[str, Any] | None = None, limit: int = 10, offline_update: bool = True,
                    log_path: str | Path | None = None, name: str = "lightmem") -> WorkerSystem:
    """`python`: the interpreter of an environment where LightMem is installed (`pip install -e .` in a
    checkout of github zjunlp/LightMem); `checkout`: that checkout (added to the worker's path)."""
    if not checkout:
        raise SystemUnavailable(f"{name}: no LightMem checkout configured (method.system.checkout); it installs "
                                "only from github zjunlp/LightMem, in its own environment (it pins torch 2.8)")
    options = {"config": dict(config or {}), "llm_base_url": endpoints.base_url, "llm_model": endpoints.chat_model,
               "api_key": endpoints.api_key, "limit": limit, "offline_update": offline_update}
    root = Path(checkout)
    return WorkerSystem(name, python, WORKER, options, cwd=root, pythonpath=[root / "src", root], log_path=log_path)
