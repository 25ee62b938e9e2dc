"""The summary of one run directory, computed from its files only: the metrics' block
(`metrics.summarize`, which takes rows: `metric_rows` is the one conversion) read through small typed
views (`JudgeBlock`, `RetrievalLevel`), with the build, query and failure figures, and per question
the scores the comparison table pairs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from analysis.intervals import Bootstrap, bootstrap_mean
from analysis.records import BuildRow, JudgeVerdict, QuestionRecord, pick
from benchmarks.harness.figures import (
    BuildFigures,
    Failure,
    QueryFigures,
    build_figures,
    failures,
    query_figures,
)
from benchmarks.harness.metrics import question_recalls, question_scores, summarize
from benchmarks.harness.results import RunFiles
from benchmarks.harness.stored_run import RunLabels, dataset_load, token_counter_name

LOADER_COUNTS = {  # run.json's dataset counts, as the summary names them
    "duplicate_sessions_dropped": "duplicate sessions dropped by the loader",
    "sessions_renamed": "repeated sessions kept under derived ids (<id>#2)",
    "unreadable_turns_dropped": "unreadable turns dropped by the loader",
    "instances_with_unreadable_turns": "instances with unreadable turns dropped",
    "empty_sessions_dropped": "sessions left without a readable turn, dropped",
}
CONVERSATION_DATASETS = ("locomo",)  # questions share a conversation: intervals resample conversations


Bounds = Sequence[float] | None  # a `<figure>_ci95` entry: [low, high]


@dataclass(frozen=True)
class JudgeRepeats:
    """A judge asked several times per answer (`judge.repeats`): how often its repeats agree and how far
    the accuracy moves between them (`metrics._repeat_figures`)."""

    repeats: int = 0
    agreement: float | None = None
    accuracy_min: float | None = None
    accuracy_max: float | None = None
    majority_accuracy: float | None = None


@dataclass(frozen=True)
class JudgeBlock:
    """One judge's figures of a summary block (`metrics.summarize`), with their intervals where the
    summary has them, and the accuracy over answered questions that the report adds."""

    accuracy: float | None = None
    accuracy_ci95: Bounds = None
    task_averaged: float | None = None
    task_averaged_ci95: Bounds = None
    abstention_accuracy: float | None = None
    abstention_accuracy_ci95: Bounds = None
    pass_at_k: Mapping[str, float | None] = field(default_factory=dict)
    pass_at_k_ci95: Mapping[str, Bounds] = field(default_factory=dict)
    per_category: Mapping[str, float] = field(default_factory=dict)
    per_category_ci95: Mapping[str, Bounds] = field(default_factory=dict)
    per_category_questions: Mapping[str, int] = field(default_factory=dict)
    per_category_pass_at_k: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    unparsed: int = 0
    errors: int = 0
    accuracy_answered: float | None = None
    accuracy_answered_ci95: Bounds = None
    answered_questions: int | None = None
    repeats: Mapping[str, Any] | None = None  # a judge asked several times: agreement, accuracy range

    def top_k(self) -> int:
        return max((int(n) for n in self.pass_at_k), default=1)


QUESTIONS = "questions"  # the count beside a level's retrieval figures
CI = "_ci95"


@dataclass(frozen=True)
class RetrievalLevel:
    """The recall and nDCG figures of one level (session | turn): `recall_any@5`, `ndcg@10`...,
    each with `<figure>_ci95` where the summary has it."""

    figures: Mapping[str, Any] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.figures)

    @property
    def questions(self) -> int:
        return int(self.figures.get(QUESTIONS) or 0)

    def value(self, metric: str) -> float | None:
        value = self.figures.get(metric)
        return None if value is None else float(value)

    def bounds(self, metric: str) -> Bounds:
        bounds = self.figures.get(metric + CI)
        return None if bounds is None else list(bounds)


@dataclass(frozen=True)
class Retrieval:
    session: Mapping[str, Any] = field(default_factory=dict)
    turn: Mapping[str, Any] = field(default_factory=dict)

    def level(self, name: str) -> RetrievalLevel:
        return RetrievalLevel(getattr(self, name) or {})


@dataclass(frozen=True)
class _Block:
    judges: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    retrieval: Mapping[str, Any] = field(default_factory=dict)
    retrieval_served: Mapping[str, Any] = field(default_factory=dict)
    questions: int = 0


def metric_rows(records: Iterable[QuestionRecord], verdicts: Iterable[JudgeVerdict],
                builds: Iterable[BuildRow] = ()) -> tuple[list[dict[str, Any]], list[dict[str, Any]],
                                                         list[dict[str, Any]]]:
    """The rows `metrics` takes: records, verdicts (each under its judge's label, `JudgeVerdict.label`)
    and builds, as written."""
    return ([r.to_row() for r in records], [{**v.to_row(), "judge_id": v.label} for v in verdicts],
            [b.to_row() for b in builds])


@dataclass(frozen=True)
class _Loaded:
    failures: Sequence[Mapping[str, Any]] = ()


# ---------------------------------------------------------------- one run


@dataclass(frozen=True)
class RunSummary:
    """A run's figures: the metrics' block (`figures`, plain, as the summary dict carries it), typed
    views of it, the build, query and failure figures, and per question the first judge's pass@1 and
    the recall@5 figure the comparison table shows (for paired differences)."""

    labels: RunLabels
    figures: Mapping[str, Any]
    judges: Mapping[str, JudgeBlock]
    retrieval: Retrieval
    retrieval_served: Retrieval
    build: BuildFigures
    query: QueryFigures
    failures: Sequence[Failure]
    loader: Mapping[str, int]
    token_counter: str | None
    bootstrap: Bootstrap
    scores: Mapping[str, float] = field(default_factory=dict)
    recalls: Mapping[str, float] = field(default_factory=dict)
    clusters: Mapping[str, str] = field(default_factory=dict)

    @property
    def questions(self) -> int:
        return int(pick(_Block, self.figures).questions)

    def to_dict(self) -> dict[str, Any]:
        """The plain summary (`report.summarize_run` adds its markdown)."""
        lab = self.labels
        judges = {label: {**block, **_answered_dict(self.judges[label])}
                  for label, block in pick(_Block, self.figures).judges.items()}
        return {**self.figures, "method": lab.method, "dataset": lab.dataset, "judges": judges,
                "backbone": lab.backbone, "seed": lab.seed, "simulated": lab.simulated, "budget": lab.budget,
                "build": asdict(self.build), "query": {k: v for k, v in asdict(self.query).items()
                                                       if k != "stages"},
                "failures": [asdict(f) for f in self.failures], "loader": dict(self.loader),
                "token_counter": self.token_counter, "bootstrap": asdict(self.bootstrap)}


def _answered_dict(judge: JudgeBlock) -> dict[str, Any]:
    return {"accuracy_answered": judge.accuracy_answered,
            "accuracy_answered_ci95": judge.accuracy_answered_ci95,
            "answered_questions": judge.answered_questions}


def bootstrap_for(dataset: str) -> Bootstrap:
    """Questions resampled alone, or with their conversation where questions share one (LoCoMo)."""
    return Bootstrap(unit="conversation" if dataset in CONVERSATION_DATASETS else "question")


def recall_metric(dataset: str) -> tuple[str, str]:
    """The level and figure the comparison table's recall@5 is: LoCoMo's evidence recall (dia ids),
    else LongMemEval's session recall_any."""
    return ("turn", "recall@5") if dataset == "locomo" else ("session", "recall_any@5")


def run_summary(files: RunFiles, labels: RunLabels) -> RunSummary:
    """Accuracy, recall, build and query figures of a run directory."""
    records = files.latest_records()
    verdicts = files.judgments()
    builds = list(files.builds().values())
    loaded = dataset_load(files)
    boot = bootstrap_for(labels.dataset)
    record_rows, verdict_rows, build_rows = metric_rows(records, verdicts, builds)
    blocks = summarize(record_rows, verdict_rows, build_rows, bootstrap=boot)
    key = f"{labels.method}/{labels.dataset}"
    figures = dict(blocks.get(key) or {"method": labels.method, "dataset": labels.dataset,
                                       QUESTIONS: 0, "judges": {}, "retrieval": {}})
    block = pick(_Block, figures)
    clusters = {str(r.question_id): str(r.instance_id) for r in records}
    answered = [row for row, r in zip(record_rows, records) if not r.failed]
    judges = {}
    for label, judge in block.judges.items():
        answered_iv = bootstrap_mean(question_scores(answered, verdict_rows, label), boot, clusters)
        judges[label] = pick(JudgeBlock, {
            **judge, "accuracy_answered": answered_iv.value if answered_iv else None,
            "accuracy_answered_ci95": [answered_iv.low, answered_iv.high] if answered_iv else None,
            "answered_questions": answered_iv.n if answered_iv else 0})
    first_judge = next(iter(block.judges), None)
    level, metric = recall_metric(labels.dataset)
    not_loaded = [pick(Failure, f) for f in pick(_Loaded, loaded).failures]
    return RunSummary(
        labels=labels, figures=figures, judges=judges, retrieval=pick(Retrieval, block.retrieval),
        retrieval_served=pick(Retrieval, block.retrieval_served or {}), build=build_figures(builds),
        query=query_figures(records), failures=failures(records, builds, not_loaded),
        loader={key: int(loaded.get(key) or 0) for key in LOADER_COUNTS},
        token_counter=token_counter_name(files), bootstrap=boot,
        scores=question_scores(record_rows, verdict_rows, first_judge) if first_judge else {},
        recalls=question_recalls(record_rows, level, metric) if record_rows else {}, clusters=clusters)
