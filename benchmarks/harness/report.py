"""The summary of one run directory, computed from its files only, and its markdown table; and the
side-by-side table of several run directories (a sweep), with each figure's 95% interval, paired
differences to a reference system and the published figure of the same system and dataset.

The run's records, builds and verdicts are typed (`analysis.records`); the scores come from
`metrics.summarize`, which takes rows (`metric_rows`: the one conversion) and returns a plain summary
block that the markdown reads through small typed views (`JudgeBlock`, `RetrievalLevel`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from analysis.intervals import Bootstrap, Interval, bootstrap_mean, format_interval, paired_difference
from analysis.records import BuildRow, JudgeVerdict, QuestionRecord, pick
from benchmarks.harness.figures import (
    TOKENS,
    BuildFigures,
    Failure,
    QueryFigures,
    build_figures,
    failed_instances,
    failures,
    query_figures,
)
from benchmarks.harness.input_kept import input_cell, input_line
from benchmarks.harness.metrics import question_recalls, question_scores, summarize
from benchmarks.harness.published import published_for
from benchmarks.harness.results import RunFiles
from benchmarks.harness.schema import BenchConfig

__all__ = ["TOKENS", "build_figures", "failed_instances", "failures", "query_figures"]
Row = Mapping[str, Any]
LOADER_COUNTS = {  # run.json's dataset counts, as the summary names them
    "duplicate_sessions_dropped": "duplicate sessions dropped by the loader",
    "sessions_renamed": "repeated sessions kept under derived ids (<id>#2)",
    "unreadable_turns_dropped": "unreadable turns dropped by the loader",
    "instances_with_unreadable_turns": "instances with unreadable turns dropped",
    "empty_sessions_dropped": "sessions left without a readable turn, dropped",
}
REFERENCE_METHOD = "memforest_embed"  # the comparison's reference system when the sweep has it
CONVERSATION_DATASETS = ("locomo",)  # questions share a conversation: intervals resample conversations


# ---------------------------------------------------------------- run.json, read through typed views


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


@dataclass(frozen=True)
class _Loaded:
    failures: Sequence[Mapping[str, Any]] = ()


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


# ---------------------------------------------------------------- the metrics' summary, typed


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
        lab = self.labels
        judges = {label: {**block, **_answered_dict(self.judges[label])}
                  for label, block in pick(_Block, self.figures).judges.items()}
        return {**self.figures, "method": lab.method, "dataset": lab.dataset, "judges": judges,
                "backbone": lab.backbone, "seed": lab.seed, "simulated": lab.simulated, "budget": lab.budget,
                "build": asdict(self.build), "query": {k: v for k, v in asdict(self.query).items()
                                                       if k != "stages"},
                "failures": [asdict(f) for f in self.failures], "loader": dict(self.loader),
                "token_counter": self.token_counter, "bootstrap": asdict(self.bootstrap),
                "markdown": markdown(self)}


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


def summarize_run(files: RunFiles, labels: RunLabels) -> dict[str, Any]:
    """The run's summary as a plain dict (the metrics' block, the build, query and failure figures, and
    its markdown)."""
    return run_summary(files, labels).to_dict()


def write_summary(files: RunFiles, labels: RunLabels) -> dict[str, Any]:
    summary = summarize_run(files, labels)
    files.summary_path.write_text(summary["markdown"], encoding="utf-8")
    return summary


# ---------------------------------------------------------------- markdown


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def pct_ci(value: float | None, bounds: Bounds) -> str:
    """`81.2% [79.1, 83.2]`, or the figure alone where the summary has no interval (older summaries)."""
    if value is None or not bounds:
        return _pct(value)
    return format_interval(Interval(float(value), float(bounds[0]), float(bounds[1]), 0))


def _num(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _accuracy_rows(judges: Mapping[str, JudgeBlock]) -> list[list[str]]:
    rows = []
    for label, j in judges.items():
        k = j.top_k()
        rows.append([f"accuracy pass@1 [{label}]", pct_ci(j.accuracy, j.accuracy_ci95)])
        if k > 1:
            rows.append([f"accuracy pass@{k} [{label}]",
                         pct_ci(j.pass_at_k.get(str(k)), j.pass_at_k_ci95.get(str(k)))])
        rows.append([f"task-averaged / abstention [{label}]",
                     f"{pct_ci(j.task_averaged, j.task_averaged_ci95)} / "
                     f"{pct_ci(j.abstention_accuracy, j.abstention_accuracy_ci95)}"])
        if j.answered_questions is not None:
            rows.append([f"accuracy pass@1 over answered questions ({j.answered_questions}) [{label}]",
                         pct_ci(j.accuracy_answered, j.accuracy_answered_ci95)])
        if j.repeats:
            r = pick(JudgeRepeats, j.repeats)
            rows.append([f"judge repeats: agreement / accuracy range over {r.repeats} [{label}]",
                         f"{_pct(r.agreement)} / {_pct(r.accuracy_min)} – {_pct(r.accuracy_max)} "
                         f"(majority {_pct(r.majority_accuracy)})"])
        if j.unparsed or j.errors:
            rows.append([f"unparsed / failed verdicts [{label}]", f"{j.unparsed} / {j.errors}"])
    return rows


RECALL_KS = (1, 5, 10)


def _recall_rows(retrieval: Retrieval, dataset: str) -> list[list[str]]:
    """LongMemEval's retrieval metrics per level (recall_any@k, recall_all@k, ndcg@k), each with its
    interval, where the summary has them; on LoCoMo the turn level's recall@k is its evidence recall."""
    rows = []
    session, turn = retrieval.level("session"), retrieval.level("turn")
    lme = ("recall_any", "recall_all", "ndcg")
    names = {"session": lme, "turn": ("recall", "recall_all", "ndcg") if dataset == "locomo" else lme}
    for level_name, level in (("session", session), ("turn", turn)):
        for name in names[level_name] if level else ():
            for k in RECALL_KS:
                metric = f"{name}@{k}"
                if level.value(metric) is None:
                    continue
                label = (f"evidence recall@{k} (dia ids)" if level_name == "turn" and name == "recall"
                         else f"{level_name} {metric}")
                rows.append([label, pct_ci(level.value(metric), level.bounds(metric))])
    if session or turn:
        rows.append(["questions with retrieval gold", str((session or turn).questions)])
    return rows


def _served_recall_rows(ranking: Retrieval, served: Retrieval) -> list[list[str]]:
    """The served evidence's own recall, where the ranking scored above went on past it."""
    if not (served.session or served.turn) or served == ranking:
        return []
    session, turn = served.level("session"), served.level("turn")
    rows = []
    if session:
        rows.append(["session recall_any@1 / @5 / @10, served evidence only",
                     " / ".join(_pct(session.value(f"recall_any@{k}")) for k in (1, 5, 10))])
    if turn:
        rows.append(["turn recall_any@10 / recall_all@10, served evidence only",
                     " / ".join(_pct(turn.value(f"recall_{m}@10")) for m in ("any", "all"))])
    return rows


def _stage_latency_rows(query: QueryFigures) -> list[list[str]]:
    """Mean, p50 and p95 of the harness's stages (retrieve, answer) where the records have them."""
    return [[f"{stage} latency mean / p50 / p95, s",
             " / ".join(_num(figures.get(stage), 3)
                        for figures in (query.latency_mean, query.latency_p50, query.latency_p95))]
            for stage in ("retrieve", "answer") if stage in query.stages]


def _cost_rows(build: BuildFigures, query: QueryFigures) -> list[list[str]]:
    stages = ", ".join(f"{s} {_num(v, 3)}" for s, v in query.latency_mean.items()
                       if s not in ("retrieve", "total"))
    return [
        ["instances built (failed)", f"{build.instances} ({build.failed})"],
        ["build seconds / instance", _num(build.build_seconds_mean)],
        ["source turns / second", _num(build.turns_per_second)],
        ["write LLM calls / instance", _num(build.llm_calls_mean, 1)],
        *([["write embedding requests / instance (proxied)", _num(build.embedding_calls_mean, 1)]]
          if build.embedding_calls_mean else []),
        ["write tokens / instance: prompt / cached / completion",
         " / ".join(_num(v, 0) for v in build.tokens_mean())],
        ["write waves / instance (critical path s)",
         f"{_num(build.waves_mean, 1)} ({_num(build.critical_path_seconds_mean)})"],
        *([["write waves from call timestamps / instance (critical path s)",
            f"{_num(build.derived_waves_mean, 1)} ({_num(build.derived_critical_path_seconds_mean)})"]]
          if build.derived_waves_mean is not None else []),
        ["degraded summaries / failed cells (all instances)",
         f"{build.degraded_total} / {build.failed_cells_total}"],
        ["query latency mean, s", _num(query.query_seconds_mean, 3)],
        ["query latency per stage, s", stages or "–"],
        *_stage_latency_rows(query),
        ["query LLM calls / question (retrieval and answers)", _num(query.llm_calls_per_question, 1)],
        ["query tokens / question: prompt / cached / completion",
         " / ".join(_num(v, 0) for v in query.tokens_per_question())],
        ["evidence tokens / question (context handed to the answer model)",
         _num(query.evidence_tokens_mean, 0)],
        *([["questions with evidence cut to the token budget", str(query.evidence_cut)]]
          if query.evidence_cut else []),
        *([["questions with evidence cut to the prompt's window (oldest first)", str(query.prompt_cut)]]
          if query.prompt_cut else []),
        ["failed records", str(query.errors)],
        ["questions failed / timed out / prompt-cut / declined",
         f"{query.failed} / {query.timed_out} / {query.prompt_cut} / {query.declined}"],
    ]


FAILURE_NOTE = ("Failed: a question with an attempt that recorded an error; timed out: one whose error says "
                "it timed out; prompt-cut: its evidence was cut to the answer prompt's window; declined: an "
                "answer says it does not know (`QuestionRecord.declined`). Accuracy over answered questions "
                "leaves the failed ones out. Intervals: 95% percentile bootstrap")


def _category_table(judges: Mapping[str, JudgeBlock]) -> list[str]:
    lines: list[str] = []
    for label, j in judges.items():
        if not j.per_category:
            continue
        k = max(int(n) for n in j.per_category_pass_at_k)
        head = ["category", "questions", "pass@1"] + ([f"pass@{k}"] if k > 1 else [])
        rows = [
            [c, str(j.per_category_questions[c]), pct_ci(v, j.per_category_ci95.get(c))]
            + ([_pct(j.per_category_pass_at_k[str(k)][c])] if k > 1 else [])
            for c, v in j.per_category.items()
        ]
        lines += ["", f"Accuracy by category, judge {label}:", "", *_table(head, rows)]
    return lines


def markdown(summary: RunSummary) -> str:
    lab = summary.labels
    title = f"## {lab.method} on {lab.dataset} (backbone {lab.backbone}, seed {lab.seed})"
    if lab.budget != "native":
        title += f" at budget {lab.budget}"
    if lab.simulated:
        title += " [simulated: latency-model server, not a real GPU run]"
    rows = [[QUESTIONS, str(summary.questions)], ["input kept (turns)", input_cell(summary.build.input)]]
    rows += _accuracy_rows(summary.judges)
    rows += _recall_rows(summary.retrieval, lab.dataset)
    rows += _served_recall_rows(summary.retrieval, summary.retrieval_served)
    rows += _cost_rows(summary.build, summary.query)
    if summary.token_counter:
        rows.append(["evidence tokens counted by", summary.token_counter.replace("|", "/")])
    rows += [[label, str(summary.loader[key])] for key, label in LOADER_COUNTS.items()
             if summary.loader.get(key)]
    not_loaded = [f for f in summary.failures if f.stage == "load"]
    if not_loaded:
        rows.append(["source entries not loaded", str(failed_instances(not_loaded))])
    boot = summary.bootstrap
    note = f"{FAILURE_NOTE} over {boot.unit}s ({boot.resamples} resamples, seed {boot.seed})."
    lines = [title, "", *_table(["metric", "value"], rows), "", note, *_category_table(summary.judges)]
    lost = input_line(summary.build.input)
    lines += ["", lost] if lost else []
    lines += _failure_lines(summary.failures)
    return "\n".join(lines) + "\n"


def _failure_lines(failed: Sequence[Failure]) -> list[str]:
    """All failures, one line each: `- <instance>: <stage>: <reason>`."""
    if not failed:
        return []
    lines = ["", f"Failed instances: {failed_instances(failed)}", ""]
    lines += [f"- {f.instance_id}: {f.stage}: {' '.join(str(f.reason).split())[:300]}" for f in failed]
    return lines


# ---------------------------------------------------------------- several runs side by side

COMPARISON_HEAD = ("method", "backbone", "seed", "questions", "input kept", "accuracy",
                   "accuracy (answered)", "Δ accuracy", "published", "recall@5", "Δ recall@5", "recall@10",
                   "failed", "timed out", "prompt-cut", "declined",
                   "build s / inst", "write LLM calls / inst",
                   "write tokens / inst (prompt / cached / completion)", "query s", "query LLM calls / q",
                   "evidence tokens / q", "budget")


@dataclass(frozen=True)
class ComparedRun:
    """One run directory of a comparison: its labels, and its summary unless it was skipped."""

    labels: RunLabels
    summary: RunSummary | None
    skipped: str | None = None
    judge_id: str | None = None  # the run's judge config id (for the published figure)


def compared_run(run_dir: str | Path) -> ComparedRun:
    files = RunFiles(run_dir, create=False)
    run = StoredRun.of(files)
    labels = RunLabels.stored(run.config)
    judge = pick(_JudgeNode, run.stored_config.judge or {}).judge_id
    if files.skipped_path.exists():
        return ComparedRun(labels, None, files.skipped_path.read_text(encoding="utf-8").strip(), judge)
    return ComparedRun(labels, run_summary(files, labels), None, judge)


@dataclass(frozen=True)
class _JudgeNode:
    judge_id: str | None = None


def reference_of(runs: Sequence[ComparedRun]) -> ComparedRun | None:
    """The comparison's reference: the `REFERENCE_METHOD` run when the sweep has one, else the first."""
    ran = [r for r in runs if r.summary is not None]
    return next((r for r in ran if r.labels.method == REFERENCE_METHOD), ran[0] if ran else None)


def _difference(a: Mapping[str, float], b: Mapping[str, float], summary: RunSummary) -> str:
    return format_interval(paired_difference(a, b, summary.bootstrap, summary.clusters))


def comparison_row(run: ComparedRun, reference: ComparedRun | None = None) -> list[str]:
    """One run of the comparison table; differences are to `reference` (paired over shared questions)."""
    labels, summary = run.labels, run.summary
    backbone = labels.backbone + (" (simulated)" if labels.simulated else "")
    names = [labels.method, backbone, str(labels.seed)]
    if summary is None:
        reason = str(run.skipped).replace("|", "/")
        return [*names, "skipped: " + reason, *["–"] * (len(COMPARISON_HEAD) - 5), labels.budget]
    judge = next(iter(summary.judges.values()), None)
    level, metric = recall_metric(labels.dataset)
    recall = summary.retrieval.level(level)
    ten = metric.replace("@5", "@10")
    ref = reference.summary if reference is not None else None
    same = reference is run or ref is None
    published = published_for(labels.method, labels.dataset, labels.backbone, run.judge_id)
    build, query = summary.build, summary.query
    return [*names, str(summary.questions), input_cell(build.input),
            pct_ci(judge.accuracy, judge.accuracy_ci95) if judge else "–",
            pct_ci(judge.accuracy_answered, judge.accuracy_answered_ci95) if judge else "–",
            "reference" if same else _difference(summary.scores, ref.scores, summary) if ref else "–",
            published.cell() if published else "–",
            pct_ci(recall.value(metric), recall.bounds(metric)),
            "reference" if same else _difference(summary.recalls, ref.recalls, summary) if ref else "–",
            pct_ci(recall.value(ten), recall.bounds(ten)),
            str(query.failed), str(query.timed_out), str(query.prompt_cut), str(query.declined),
            _num(build.build_seconds_mean), _num(build.llm_calls_mean, 1),
            " / ".join(_num(v, 0) for v in build.tokens_mean()),
            _num(query.query_seconds_mean, 3), _num(query.llm_calls_per_question, 1),
            _num(query.evidence_tokens_mean, 0), labels.budget]


def comparison_markdown(run_dirs: Iterable[str | Path]) -> str:
    """The side-by-side table of several runs, grouped by dataset; accuracy is the first judge's pass@1
    over all questions and over answered ones, recall is session recall_any@k on LongMemEval and
    evidence recall@k (dia ids) on LoCoMo, each with its 95% interval; Δ columns are the paired
    difference to the reference run over the questions both answered (`analysis.intervals`); published
    is the paper's figure for the same system and dataset (`harness/published.py`); evidence tokens are
    the mean tokens of context handed to the answer model per question, as the run's counter counted
    them (run.json `token_counter`)."""
    by_dataset: dict[str, list[ComparedRun]] = {}
    for run_dir in run_dirs:
        run = compared_run(run_dir)
        by_dataset.setdefault(run.labels.dataset, []).append(run)
    lines: list[str] = []
    for dataset, runs in by_dataset.items():
        reference = reference_of(runs)
        against = f"; Δ: paired difference to {reference.labels.method}" if reference is not None else ""
        rows = [comparison_row(run, reference) for run in runs]
        lines += [f"## {dataset}: {len(rows)} runs side by side{against}", "",
                  *_table(COMPARISON_HEAD, rows), ""]
        shown = [p for r in runs
                 if (p := published_for(r.labels.method, dataset, r.labels.backbone, r.judge_id))]
        if shown:
            sources = "; ".join(sorted({p.source for p in shown}))
            lines += [f"Published: overall pass@1 of the same system on the same dataset ({sources}; "
                      "analysis/published/accuracy.csv).", ""]
    return "\n".join(lines)
