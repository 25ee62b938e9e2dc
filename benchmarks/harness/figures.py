"""The cost and failure figures of one run, from its typed records and build rows: write-path cost per
instance, query cost per question (mean, p50 and p95 latency per stage), the questions that failed,
timed out, had their evidence cut to the prompt's window or were declined, and every failure listed."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import quantiles
from typing import Any

from analysis.records import BuildRow, QuestionRecord, pick
from analysis.rows import mean
from benchmarks.harness.input_kept import input_figures

TOKENS = ("prompt_tokens", "cached_prompt_tokens", "completion_tokens")


def percentile(values: Sequence[float], p: int) -> float | None:
    """The p-th percentile (1..99) of `values` (`statistics.quantiles`, inclusive method; the value itself
    for one value); None without values."""
    if not values:
        return None
    if len(values) == 1:
        return float(values[0])
    return quantiles(values, n=100, method="inclusive")[p - 1]


@dataclass(frozen=True)
class BuildFigures:
    """Write-path cost per instance over the completed builds (means), and totals."""

    instances: int
    failed: int
    build_seconds_mean: float | None
    build_seconds_total: float
    turns_per_second: float | None
    llm_calls_mean: float | None
    embedding_calls_mean: float | None
    waves_mean: float | None
    critical_path_seconds_mean: float | None
    derived_waves_mean: float | None
    derived_critical_path_seconds_mean: float | None
    derived_busy_seconds_mean: float | None
    derived_max_in_flight_mean: float | None
    prompt_tokens_mean: float | None
    cached_prompt_tokens_mean: float | None
    completion_tokens_mean: float | None
    by_stage_total: Mapping[str, Mapping[str, float]]
    degraded_total: int
    failed_cells_total: int
    input: Mapping[str, Any] | None  # turns given and kept (`input_kept.input_figures`)

    def tokens_mean(self) -> list[float | None]:
        return [self.prompt_tokens_mean, self.cached_prompt_tokens_mean, self.completion_tokens_mean]


def build_figures(builds: Sequence[BuildRow]) -> BuildFigures:
    """Write-path cost per instance: wall time, turns/s, model calls, tokens, waves."""
    done = [b for b in builds if not b.error]
    seconds = sum(float(b.build_seconds) for b in done)
    turns = sum(int(b.turns) for b in done)
    llm = [b.calls for b in done]
    derived = [b.call_waves for b in done if b.call_waves is not None]  # from timestamps (harness/waves.py)
    stages: dict[str, dict[str, float]] = {}
    for x in llm:
        for stage, numbers in x.by_stage.items():
            total = stages.setdefault(stage, {})
            for name, value in numbers.items():
                total[name] = total.get(name, 0) + value
    systems = [b.stats for b in done]
    return BuildFigures(
        instances=len(done), failed=len(builds) - len(done),
        build_seconds_mean=mean(float(b.build_seconds) for b in done), build_seconds_total=seconds,
        turns_per_second=turns / seconds if seconds > 0 else None,
        llm_calls_mean=mean(float(x.calls) for x in llm),
        embedding_calls_mean=mean(float(x.embedding_calls) for x in llm),
        waves_mean=mean(float(x.waves) for x in llm),
        critical_path_seconds_mean=mean(float(x.critical_path_seconds) for x in llm),
        derived_waves_mean=mean(float(d.waves) for d in derived),
        derived_critical_path_seconds_mean=mean(float(d.critical_path_seconds) for d in derived),
        derived_busy_seconds_mean=mean(float(d.busy_seconds) for d in derived),
        derived_max_in_flight_mean=mean(float(d.max_in_flight) for d in derived),
        prompt_tokens_mean=mean(float(x.prompt_tokens) for x in llm),
        cached_prompt_tokens_mean=mean(float(x.cached_prompt_tokens) for x in llm),
        completion_tokens_mean=mean(float(x.completion_tokens) for x in llm),
        by_stage_total=stages,
        degraded_total=sum(int(s.get("degraded", 0)) for s in systems),  # MemForest's own statistics
        failed_cells_total=sum(len(s.get("failed_cells") or ()) for s in systems),
        input=input_figures([b.to_row() for b in builds]),  # input_kept reads the rows as written
    )


@dataclass(frozen=True)
class QueryFigures:
    """Per-question query cost (from each question's first record) and the questions that went wrong
    (any attempt): failed (an error), timed out (an error that says so), prompt-cut (evidence cut to the
    prompt's window), declined (the answer says it does not know: `QuestionRecord.declined`)."""

    questions: int
    latency_mean: Mapping[str, float | None]
    latency_p50: Mapping[str, float | None]
    latency_p95: Mapping[str, float | None]
    query_seconds_mean: float | None
    prompt_tokens_per_question: float | None
    cached_prompt_tokens_per_question: float | None
    completion_tokens_per_question: float | None
    llm_calls_per_question: float | None
    evidence_tokens_mean: float | None  # tokens of the context handed to the answer model
    evidence_cut: int
    prompt_cut: int
    errors: int  # failed records (attempts)
    failed: int = 0  # questions with a failed attempt
    timed_out: int = 0
    declined: int = 0
    answered: int = 0  # questions without a failed attempt
    stages: Sequence[str] = field(default_factory=tuple)

    def tokens_per_question(self) -> list[float | None]:
        return [self.prompt_tokens_per_question, self.cached_prompt_tokens_per_question,
                self.completion_tokens_per_question]


def first_records(records: Iterable[QuestionRecord]) -> dict[str, QuestionRecord]:
    """Each question's record of its lowest attempt."""
    first: dict[str, QuestionRecord] = {}
    for record in sorted(records, key=lambda r: int(r.attempt)):
        first.setdefault(str(record.question_id), record)
    return first


def questions_where(records: Iterable[QuestionRecord], test: Any) -> set[str]:
    return {str(r.question_id) for r in records if test(r)}


def query_figures(records: Sequence[QuestionRecord]) -> QueryFigures:
    """Per-question query cost, from each question's first record: latency per stage and tokens."""
    rows = [r for r in first_records(records).values() if r.latency is not None]
    per_stage: dict[str, list[float]] = {}
    for r in rows:
        for stage, seconds in (r.latency.stages() if r.latency is not None else ()):
            per_stage.setdefault(stage, []).append(float(seconds))
    stages = sorted(per_stage)
    answered = [r for r in records if r.answer_usage is not None]
    usage = [r.answer_usage for r in answered if r.answer_usage is not None]
    retrieval = [r.retrieval_llm for r in rows if r.retrieval_llm is not None]

    def per_question(key: str) -> float | None:
        total = sum(int(getattr(x, key)) for x in retrieval) + sum(int(getattr(u, key)) for u in usage)
        return total / len(rows) if rows else None

    calls = sum(int(x.calls) for x in retrieval) + len(answered)
    failed = questions_where(records, lambda r: r.failed)
    return QueryFigures(
        questions=len(rows),
        latency_mean={s: mean(per_stage[s]) for s in stages},
        latency_p50={s: percentile(per_stage[s], 50) for s in stages},
        latency_p95={s: percentile(per_stage[s], 95) for s in stages},
        query_seconds_mean=mean(float(r.query_seconds) for r in rows if r.query_seconds is not None),
        prompt_tokens_per_question=per_question("prompt_tokens"),
        cached_prompt_tokens_per_question=per_question("cached_prompt_tokens"),
        completion_tokens_per_question=per_question("completion_tokens"),
        llm_calls_per_question=calls / len(rows) if rows else None,
        evidence_tokens_mean=mean(float(r.evidence_tokens) for r in rows if r.evidence_tokens is not None),
        evidence_cut=sum(bool(r.evidence_cut) for r in rows),
        prompt_cut=sum(bool(r.prompt_cut) for r in rows),
        errors=sum(r.failed for r in records),
        failed=len(failed),
        timed_out=len(questions_where(records, lambda r: r.timed_out)),
        declined=len(questions_where(records, lambda r: r.declined)),
        answered=len({str(r.question_id) for r in records} - failed),
        stages=tuple(stages),
    )


@dataclass(frozen=True)
class Failure:
    """One failure of a run: the instance, the stage (load, build, retrieval, answer, instance...) and why."""

    instance_id: str
    stage: str
    reason: str


def failures(records: Sequence[QuestionRecord], builds: Sequence[BuildRow],
             not_loaded: Iterable[Failure] = ()) -> list[Failure]:
    """Every failure of the run: the entries the loader could not read (stage `load`), then per instance
    its failed build and the first failed record of each other stage (a record's error reads
    `<stage>: <reason>`)."""
    found: dict[tuple[str, str], str] = {}
    for build in builds:
        if build.error:
            found.setdefault((str(build.instance_id), "build"), str(build.error))
    for record in records:
        if record.error:
            stage, reason = record.failed_stage
            found.setdefault((str(record.instance_id), stage), reason)
    return [*not_loaded, *(Failure(iid, stage, why) for (iid, stage), why in sorted(found.items()))]


def failed_instances(failed: Sequence[Failure | Mapping[str, Any]]) -> int:
    """How many instances failed: of `Failure`s, or of the summary dict's plain failure entries."""
    return len({(f if isinstance(f, Failure) else pick(Failure, f)).instance_id for f in failed})
