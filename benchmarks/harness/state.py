"""The state of one open run: its configuration, files, dataset, system, models and what earlier
invocations finished. The runner opens it; building, the question loop and the tasks work on it."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from baselines.base import MemorySystem
from benchmarks.datasets import Dataset
from benchmarks.harness.infrastructure import INFRASTRUCTURE, ServerProbe
from benchmarks.harness.results import RunCallLog, RunFiles
from benchmarks.harness.schema import BenchConfig
from benchmarks.harness.simulation import Simulation
from benchmarks.harness.tokens import TokenCounter, estimating_counter
from benchmarks.harness.wandb_logger import WandbLogger
from benchmarks.judging.judges import Judge
from memforest.llm.base import Embedder
from memforest.llm.scheduler import Scheduler

PairKey = tuple[str, int]  # (question id, attempt)
log = logging.getLogger(__name__)


def close_all(closers: Iterable[Callable[[], object]]) -> None:
    """Call every closer in order, even after one raised; then raise the first error, so that one failed
    close never leaves the objects after it (a GPU engine, a file) open."""
    first: BaseException | None = None
    for close in closers:
        try:
            close()
        except BaseException as exc:  # kept, and raised once everything is closed
            if first is None:
                first = exc
    if first is not None:
        raise first


def close_after_failure(closers: Iterable[Callable[[], object]]) -> None:
    """`close_all` while another error is on its way out: a failed close is logged, not raised, so that
    the error that ended the work is the one reported."""
    try:
        close_all(closers)
    except Exception:  # the caller re-raises the error that matters
        log.exception("closing after a failure failed too")


@dataclass
class Harness:
    cfg: BenchConfig
    files: RunFiles
    dataset: Dataset
    system: MemorySystem
    answerer: Scheduler | None
    judge: Judge | None
    wandb: WandbLogger
    records: dict[PairKey, dict[str, Any]] = field(default_factory=dict)
    judged: set[PairKey] = field(default_factory=set)
    builds: dict[str, dict[str, Any]] = field(default_factory=dict)
    closing: list[Any] = field(default_factory=list)  # schedulers and models to close, in order
    bar: Any = None
    embedder: Embedder | None = None
    simulation: Simulation | None = None  # the latency-model server of a simulated run
    # counts the context handed to the answer model (the token budget, the prompt's window)
    tokens: TokenCounter = field(default_factory=lambda: estimating_counter("no answer model"))
    probe: ServerProbe | None = None  # the served models' servers, asked before each build and question

    def check_servers(self) -> None:
        """Raise ModelUnavailableError when a served model's server no longer answers."""
        if self.probe is not None:
            self.probe()

    @property
    def call_log(self) -> RunCallLog:
        return self.files.call_log

    @property
    def attempts(self) -> int:
        return max(1, self.cfg.attempts) if self.answerer is not None else 1

    def finished(self, key: PairKey) -> bool:
        """Whether an earlier invocation finished this pair: a record without error, or with the
        system's own error unless `retry_errors` (an infrastructure failure is always redone)."""
        row = self.records.get(key)
        if row is None or (row.get("error") and (self.cfg.retry_errors
                                                  or row.get("error_kind") == INFRASTRUCTURE)):
            return False
        return self.answerer is None or "response" in row

    def close(self) -> None:
        """Close the system, the schedulers and models in `closing`, wandb and the run's files, each even
        when one before it raised; the first error is raised after all are closed."""
        simulation = self.simulation
        notes = ([lambda: self.files.note_invocation(latency_model=simulation.summary())]
                 if simulation is not None else [])
        probe = [self.probe.close] if self.probe is not None else []
        close_all([*notes, self.system.close, *(obj.close for obj in self.closing), *probe, self.wandb.finish,
                   self.files.close])
