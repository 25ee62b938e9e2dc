"""Harness tasks other than question answering (`task=` in the run config), each writing its
measurements into the run directory beside run.json and summary.md:

    migration  merge N materialised forests vs writing their sessions sequentially (migration.jsonl)
    scaling    eager per-insert vs batched refresh calls, and level-parallel refresh speedup vs P
               (scaling.jsonl)

A task runs on a MemForest method (its library configuration, the run's models and call log)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from benchmarks.harness.state import Harness

TASKS = ("qa", "migration", "scaling")


def task_runner(name: str) -> Callable[[Harness], dict[str, Any]]:
    if name == "migration":
        from benchmarks.harness.tasks.migration import run_migration

        return run_migration
    if name == "scaling":
        from benchmarks.harness.tasks.scaling import run_scaling

        return run_scaling
    raise ValueError(f"unknown task {name!r} (one of {', '.join(TASKS)})")


def run_task(h: Harness, task: str) -> dict[str, Any]:
    """Run `task` on an open harness and close it; the task's table becomes summary.md."""
    try:
        summary = task_runner(task)(h)
    finally:
        h.close()
    h.files.summary_path.write_text(summary["markdown"], encoding="utf-8")
    print(summary["markdown"])
    return summary


def option(options: Mapping[str, Any], name: str, default: Any) -> Any:
    """A task's setting from `task_options` (each task names its own; see its module)."""
    value = options.get(name, default)
    return default if value is None else value
