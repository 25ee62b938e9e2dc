"""EverMemOS through a subprocess worker in the user's own EverMemOS checkout and environment."""

from __future__ import annotations

from pathlib import Path

from baselines.base import Endpoints, SystemUnavailable
from baselines.worker import WorkerSystem

WORKER = Path(__file__).with_name("worker.py")


def evermemos_system(endpoints: Endpoints, *, python: str | None = None, checkout: str | None = None,
                     system_config: str | None = None, log_path: str | Path | None = None,
                     name: str = "evermemos") -> WorkerSystem:
    """`python`: the interpreter of the EverMemOS environment (Python 3.12, its requirements installed);
    `checkout`: a checkout of github EverMind-AI/EverMemOS; `system_config`: its evaluation system YAML
    (default evaluation/config/systems/evermemos.yaml in the checkout)."""
    if not checkout:
        raise SystemUnavailable(f"{name}: no EverMemOS checkout configured (method.system.checkout); it installs only "
                                "from github EverMind-AI/EverMemOS, in its own Python 3.12 environment")
    root = Path(checkout)
    config = Path(system_config) if system_config else root / "evaluation" / "config" / "systems" / "evermemos.yaml"
    if not config.is_file():
        raise SystemUnavailable(f"{name}: EverMemOS system config {config} not found")
    options = {"system_config": str(config), "llm_base_url": endpoints.base_url, "llm_model": endpoints.chat_model,
               "api_key": endpoints.api_key}
    return WorkerSystem(name, python, WORKER, options, cwd=root, pythonpath=[root, root / "src"], log_path=log_path)
