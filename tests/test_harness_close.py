"""Harness.close: every owned object is closed even when one close raises; the first error is raised."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks.harness.results import RunFiles
from benchmarks.harness.state import Harness, close_all


class Owned:
    def __init__(self, name: str, log: list[str], fails: bool = False) -> None:
        self.name, self.log, self.fails = name, log, fails

    def close(self) -> None:
        self.log.append(self.name)
        if self.fails:
            raise RuntimeError(f"{self.name} would not close")

    def finish(self) -> None:  # as WandbLogger ends a run
        self.close()


class Files(RunFiles):
    def __init__(self, root: Path, log: list[str]) -> None:
        super().__init__(root)
        self.log = log

    def close(self) -> None:
        self.log.append("files")
        super().close()


def harness(tmp_path: Path, log: list[str], failing: set[str]) -> Harness:
    def owned(name: str) -> Any:
        return Owned(name, log, name in failing)

    return Harness(cfg=None, files=Files(tmp_path / "run", log), dataset=None,  # type: ignore[arg-type]
                   system=owned("system"), answerer=None, judge=None, wandb=owned("wandb"),
                   closing=[owned("scheduler"), owned("chat engine"), owned("embedder")])


EVERYTHING = ["system", "scheduler", "chat engine", "embedder", "wandb", "files"]


@pytest.mark.parametrize("failing", [set(), {"system"}, {"system", "embedder"}, {"chat engine"}, {"wandb"}])
def test_every_owned_object_is_closed_and_the_first_error_raised(tmp_path: Path, failing: set[str]) -> None:
    log: list[str] = []
    h = harness(tmp_path, log, failing)
    if failing:
        first = next(name for name in EVERYTHING if name in failing)
        with pytest.raises(RuntimeError, match=f"^{first} would not close$"):
            h.close()
    else:
        h.close()
    assert log == EVERYTHING


def test_close_all_keeps_going_after_an_interrupt_too() -> None:
    log: list[str] = []

    def interrupted() -> None:
        log.append("interrupted")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        close_all([interrupted, lambda: log.append("after")])
    assert log == ["interrupted", "after"]
