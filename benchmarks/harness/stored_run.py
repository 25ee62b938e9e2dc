"""A run directory's run.json read through small typed views (runs of any harness version), and the
labels that name a run in its summary and in the comparison table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from analysis.records import pick
from benchmarks.harness.results import RunFiles
from benchmarks.harness.schema import BenchConfig

Row = Mapping[str, Any]


@dataclass(frozen=True)
class _Node:
    name: str = ""


@dataclass(frozen=True)
class LlmNode:
    """The stored `llm` config node, as far as the tables read it."""

    name: str = ""
    model: str | None = None
    backend: str | None = None
    latency_model: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class _Budget:
    mode: str | None = None
    evidence: Any = None
    evidence_tokens: Any = None


@dataclass(frozen=True)
class StoredConfig:
    """The plain configuration a run.json records (runs of any harness version)."""

    method: Mapping[str, Any] = field(default_factory=dict)
    dataset: Mapping[str, Any] = field(default_factory=dict)
    llm: Mapping[str, Any] = field(default_factory=dict)
    judge: Mapping[str, Any] | None = None
    seed: int = 0
    budget: Mapping[str, Any] | None = None

    @property
    def llm_node(self) -> LlmNode:
        return pick(LlmNode, self.llm)

    @property
    def method_name(self) -> str:
        return str(pick(_Node, self.method).name)

    @property
    def dataset_name(self) -> str:
        return str(pick(_Node, self.dataset).name)


@dataclass(frozen=True)
class StoredRun:
    """A run.json: its configuration, whether it was simulated, and what each invocation noted."""

    config: Mapping[str, Any] = field(default_factory=dict)
    simulated: bool = False
    dataset: Mapping[str, Any] | None = None
    token_counter: Mapping[str, Any] | None = None
    invocations: Sequence[Mapping[str, Any]] = ()

    @classmethod
    def of(cls, files: RunFiles) -> StoredRun:
        return pick(cls, files.load_run()) if files.run_json.exists() else cls()

    @property
    def stored_config(self) -> StoredConfig:
        return pick(StoredConfig, self.config)

    def latest(self, name: str) -> Any:
        """What the latest invocation noted under `name`, else the run's first note of it."""
        noted = self.invocations[-1] if self.invocations else {}
        return noted.get(name) or getattr(self, name)


@dataclass(frozen=True)
class _Counter:
    name: str = ""
    exact: bool = False


def dataset_load(files: RunFiles) -> dict[str, Any]:
    """The dataset as the latest invocation loaded it (run.json): counts and entries not loaded."""
    return dict(StoredRun.of(files).latest("dataset") or {})


def token_counter_name(files: RunFiles) -> str | None:
    """What counted the evidence tokens (run.json's `token_counter`, the latest invocation's)."""
    noted = StoredRun.of(files).latest("token_counter")
    if not noted:
        return None
    counter = pick(_Counter, noted)
    return counter.name + ("" if counter.exact else " (not the answer model's tokenizer)")


@dataclass(frozen=True)
class RunLabels:
    """What names a run in its summary and in the comparison table."""

    method: str
    dataset: str
    backbone: str  # the llm config's name
    seed: int
    simulated: bool  # the backbone was the latency-model server
    budget: str = "native"  # `native`, `shared <units>` or `tokens <tokens>`

    @classmethod
    def of(cls, cfg: BenchConfig) -> RunLabels:
        simulated = cfg.llm.latency_model is not None
        return cls(cfg.method.name, cfg.dataset.name, cfg.llm.name, cfg.seed, simulated,
                   budget_label(asdict(cfg.budget)))

    @classmethod
    def stored(cls, config: Row) -> RunLabels:
        """From the plain configuration a stored run.json records (runs of any harness version)."""
        stored = pick(StoredConfig, config)
        llm = stored.llm_node
        return cls(stored.method_name, stored.dataset_name, str(llm.name), int(stored.seed),
                   bool(llm.latency_model), budget_label(stored.budget or {}))


def budget_label(budget: Row) -> str:
    """The budget a run answered under, from its (plain) budget node."""
    node = pick(_Budget, budget)
    mode = str(node.mode or "native")
    if mode == "shared":
        return f"shared {node.evidence}"
    if mode == "tokens":
        return f"tokens {node.evidence_tokens}"
    return mode
