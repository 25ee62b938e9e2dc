"""Optional mirror of a run's metrics to Weights & Biases (offline unless configured online).

The run directory stays the source of truth: nothing here is read back, and analysis never needs
wandb. `wandb` is imported only when `wandb.enabled` is true.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.harness.schema import WandbNode

INSTALL_HINT = "pip install 'memforest[wandb]'"


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """Numeric leaves of a nested mapping as `a/b/c` keys."""
    out: dict[str, float] = {}
    for key, value in data.items():
        name = f"{prefix}/{key}" if prefix else str(key)
        if isinstance(value, Mapping):
            out.update(flatten(value, name))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = float(value)
    return out


class WandbLogger:
    """Logs build rows, question records and the final summary; a no-op when disabled."""

    def __init__(self, cfg: WandbNode, run_dir: Path, config: Mapping[str, Any]) -> None:
        """`config`: the run's resolved configuration as plain containers (run.json's), for wandb."""
        self._run: Any = None
        self._questions = 0
        if not cfg.enabled:
            return
        try:
            import wandb
        except ImportError as exc:
            raise RuntimeError(f"wandb.enabled=true needs the wandb package: {INSTALL_HINT}") from exc
        # One wandb run per run directory, so a resumed run continues the same wandb run.
        run_id = hashlib.sha1(str(Path(run_dir).resolve()).encode()).hexdigest()[:16]
        self._run = wandb.init(
            project=cfg.project,
            entity=cfg.entity,
            mode=cfg.mode,
            dir=str(run_dir),
            id=run_id,
            resume="allow",
            name="/".join(Path(run_dir).parts[-5:]),
            tags=list(cfg.tags),
            config=dict(config),
        )

    def log_build(self, row: Mapping[str, Any]) -> None:
        if self._run is not None:
            self._run.log({"build/" + k: v for k, v in flatten(row).items()})

    def log_records(self, rows: Sequence[Mapping[str, Any]]) -> None:
        if self._run is None or not rows:
            return
        self._questions += 1
        first = rows[0]
        data = {"query/" + k: v for k, v in flatten({"latency": first.get("latency", {})}).items()}
        data["query/questions"] = float(self._questions)
        self._run.log(data)

    def log_summary(self, summary: Mapping[str, Any]) -> None:
        if self._run is not None:
            for key, value in flatten({k: v for k, v in summary.items() if k != "markdown"}).items():
                self._run.summary[key] = value

    def finish(self) -> None:
        if self._run is not None:
            self._run.finish()
            self._run = None
