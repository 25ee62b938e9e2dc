"""Mem0 2.x (PyPI `mem0ai>=2,<3`) through a subprocess worker in its own environment: 2.x has the same
package name as the 1.x installed here, so the two cannot share one environment."""

from __future__ import annotations

from pathlib import Path

from baselines.base import Endpoints, SystemUnavailable
from baselines.worker import WorkerSystem

WORKER = Path(__file__).with_name("additive_worker.py")
INSTALL_HINT = (
    'python -m venv /opt/mem0-2 && /opt/mem0-2/bin/pip install "mem0ai>=2,<3", '
    "then method.system.python=/opt/mem0-2/bin/python"
)


def mem0_additive_system(
    endpoints: Endpoints,
    *,
    python: str | None = None,
    top_k: int = 10,
    batch_turns: int = 2,
    threshold: float = 0.0,
    temperature: float = 0.0,
    max_tokens: int = 2000,
    log_path: str | Path | None = None,
    name: str = "mem0_additive",
) -> WorkerSystem:
    """`python`: the interpreter of an environment with mem0ai 2.x. `threshold` is the minimum cosine
    similarity of a search hit (Mem0 2.x accepts 0 to 1; its own default is 0.1): 0 keeps every hit
    that is not negative, the nearest Mem0 2.x comes to the fixed `top_k` budget of Mem0 1.x."""
    if not python:
        raise SystemUnavailable(
            f"{name}: no interpreter configured (method.system.python); Mem0 2.x needs an "
            f"environment of its own: {INSTALL_HINT}"
        )
    options = {
        "llm_base_url": endpoints.base_url,
        "llm_model": endpoints.chat_model,
        "embed_base_url": endpoints.base_url,
        "embed_model": endpoints.embed_model,
        "embed_dims": endpoints.embed_dim,
        "api_key": endpoints.api_key,
        "top_k": top_k,
        "batch_turns": batch_turns,
        "threshold": threshold,
        "temperature": temperature,
        "max_tokens": max_tokens,
    }
    return WorkerSystem(name, python, WORKER, options, log_path=log_path)
