"""The rows of a run directory's JSONL files as typed records, on the standard library only: the one
module that reads and writes them, for the harness and the paper's analysis alike.

- `QuestionRecord`: records.jsonl, one per (question, attempt);
- `BuildRow`: builds.jsonl, one per instance build;
- `JudgeVerdict`: judgments*.jsonl, one per judged attempt (and judge repeat);
- `ServedCall`: served_calls.jsonl, one per request the latency-model server answered.

Each row carries its layout `version`. Layout 1 is every row written without a version field; layout 2
adds the field, and a verdict of layout 2 always carries `repeat` (the repeat index when a judge is
asked several times) and `judge_hash` (the sha256 of the judge's pinned descriptor, None when not
pinned). `from_row` reads either layout (a row of a newer layout is refused); `to_row` writes the
current one (both in `analysis.record_fields`). Keys a record does not know are kept in `extra` and
written back, so nothing written is lost on a round trip; fields absent from a row stay absent when it
is written again (optional fields are None then), except the few a writer always writes (`_ALWAYS`).

Nested objects that readers compute with are typed (`Latency`, `CallSummary`, `CallWaves`, `Usage`); the
per-system ones (a build's `system` statistics, a record's `input` account, evidence lists) stay plain
mappings.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from analysis.record_fields import LAYOUT, PREVIOUS_LAYOUT, Fields, LayoutError, Row, layout_of, pick

__all__ = ["PREVIOUS_LAYOUT", "LayoutError", "layout_of", "pick"]  # re-exported


# ---------------------------------------------------------------- nested parts


@dataclass(frozen=True)
class Latency(Fields):
    """Seconds per query stage, as written: the system's own stages (embed, recall, plan, browse,
    assemble, ...) and the harness's `retrieve` (the whole retrieval) and `answer` (the answer call)."""

    seconds: Mapping[str, float] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_row(cls, row: Row) -> Latency:
        return cls(seconds=dict(row))

    def to_row(self) -> dict[str, Any]:
        return dict(self.seconds)

    @property
    def retrieve(self) -> float | None:
        return self.seconds.get("retrieve")

    @property
    def answer(self) -> float | None:
        return self.seconds.get("answer")

    def stages(self) -> Iterator[tuple[str, float]]:
        return iter(self.seconds.items())


@dataclass(frozen=True)
class CallSummary(Fields):
    """The model calls of a build or a retrieval (`memforest.llm.calllog.summarize`): chat totals, the
    embedding requests apart, waves and critical path, and totals per stage."""

    calls: int = 0
    failed: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    completion_tokens: int = 0
    call_seconds: float = 0.0
    embedding_calls: int = 0
    embedding_tokens: int = 0
    waves: int = 0
    wall_seconds: float = 0.0
    critical_path_seconds: float = 0.0
    by_stage: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CallWaves(Fields):
    """Waves derived from call timestamps, alike for every system (`benchmarks/harness/waves.py`)."""

    calls: int = 0
    waves: int = 0
    critical_path_seconds: float = 0.0
    busy_seconds: float = 0.0
    max_in_flight: int = 0
    call_seconds: float = 0.0
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Usage(Fields):
    """Tokens of one answer call."""

    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    completion_tokens: int = 0
    extra: Mapping[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------- records.jsonl

# A response that declines to answer, in the words the answer prompts ask for ("say that you do not have
# that information", "answer that it is not mentioned") and their usual variants.
DECLINE = re.compile(
    r"\b(i (do not|don't|cannot|can't) (know|tell|say|find)|(do not|don't|does not|doesn't) (have|contain|"
    r"include|say|mention)|no (information|record|mention)|not (mentioned|specified|stated|available)|"
    r"(is|are) unknown|not enough information)\b",
    re.IGNORECASE,
)
TIMEOUT = re.compile(r"time[d ]?[ _-]?out|timeouterror|readtimeout|took too long", re.IGNORECASE)


@dataclass(frozen=True)
class QuestionRecord(Fields):
    """One answered (or failed) attempt at a question: the question and its gold, what was retrieved and
    handed to the answer model, the answer, its costs, and the error when the attempt failed (`error`
    reads `<stage>: <reason>`; `error_kind` is `infrastructure` or `system`)."""

    _NESTED: ClassVar[Mapping[str, type[Fields]]] = {
        "latency": Latency, "retrieval_llm": CallSummary, "answer_usage": Usage}
    _ALWAYS: ClassVar[frozenset[str]] = frozenset({
        "method", "dataset", "instance_id", "question_id", "attempt", "category", "abstention", "question",
        "answer", "question_date", "evidence_sessions", "evidence_turns", "build_id", "simulated", "input"})
    _VERSIONED: ClassVar[bool] = True

    question_id: str = ""
    attempt: int = 0
    method: str = ""
    dataset: str = ""
    instance_id: str = ""
    category: str = ""
    abstention: bool = False  # the question has no answer in the history (LongMemEval `_abs`)
    question: str = ""
    answer: Any = None  # the gold answer (text; LoCoMo has numbers too)
    question_date: str | None = None
    evidence_sessions: Sequence[str] = ()
    evidence_turns: Sequence[str] = ()
    build_id: str | None = None
    simulated: bool = False
    input: Mapping[str, Any] | None = None  # the build's input account (turns given, kept, lost)
    session_aliases: Mapping[str, str] | None = None
    evidence_turns_raw: Sequence[str] | None = None
    context: str | None = None
    retrieved: Sequence[Mapping[str, Any]] | None = None
    retrieved_session_ids: Sequence[str] | None = None
    retrieved_turn_ids: Sequence[str] | None = None
    ranking_session_ids: Sequence[str] | None = None
    ranking_turn_ids: Sequence[str] | None = None
    retrieved_session_ids_raw: Sequence[str] | None = None
    retrieved_turn_ids_raw: Sequence[str] | None = None
    ranking_session_ids_raw: Sequence[str] | None = None
    ranking_turn_ids_raw: Sequence[str] | None = None
    evidence_cut: bool | None = None  # the evidence was cut to the token budget
    evidence_budget: Mapping[str, Any] | None = None
    evidence_tokens: int | None = None
    prompt_cut: bool | None = None  # the evidence was cut to the answer prompt's window
    prompt_window: Mapping[str, Any] | None = None
    latency: Latency | None = None
    retrieval_llm: CallSummary | None = None
    query_seconds: float | None = None
    answer_prompt_id: str | None = None
    answer_prompt_version: int | None = None
    temperature: float | None = None
    seed: int | None = None
    response: str | None = None  # None: nothing was asked of an answer model
    answer_usage: Usage | None = None
    model: str | None = None
    error: str | None = None
    error_kind: str | None = None
    version: int = LAYOUT
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, int]:
        return str(self.question_id), int(self.attempt)

    @property
    def failed(self) -> bool:
        return bool(self.error)

    @property
    def failed_stage(self) -> tuple[str, str]:
        """The stage an error names (`<stage>: <reason>`; `run` when it names none) and the reason."""
        stage, sep, reason = str(self.error or "").partition(": ")
        return (stage, reason) if sep else ("run", stage)

    @property
    def timed_out(self) -> bool:
        """Failed with a timeout: its error or error kind says so."""
        return self.failed and bool(TIMEOUT.search(f"{self.error_kind or ''} {self.error}"))

    @property
    def declined(self) -> bool:
        """The answer model answered that it does not know (`DECLINE`), whatever the question."""
        return not self.failed and bool(self.response) and bool(DECLINE.search(str(self.response)))

    def ranked_ids(self, level: str, served: bool = False) -> Sequence[str] | None:
        """The ranked ids of `level` (session | turn) that recall is scored on: the ranking, which goes
        on past the served evidence where the system ranks further, else the served evidence's ids."""
        served_ids = getattr(self, f"retrieved_{level}_ids")
        ranking = getattr(self, f"ranking_{level}_ids")
        return served_ids if served or ranking is None else ranking


# ---------------------------------------------------------------- builds.jsonl


@dataclass(frozen=True)
class BuildRow(Fields):
    """One instance build: its size and time, the model calls it made, what the system reports
    (`system`: free-form per system, e.g. MemForest's timings, facts, cells, and `input`), and the error
    when it failed; `reused_from` when the store was copied from another run."""

    _NESTED: ClassVar[Mapping[str, type[Fields]]] = {"llm": CallSummary, "call_waves": CallWaves}
    _ALWAYS: ClassVar[frozenset[str]] = frozenset({"error"})
    _VERSIONED: ClassVar[bool] = True

    instance_id: str = ""
    build_id: str | None = None
    method: str = ""
    dataset: str = ""
    sessions: int | None = None
    turns: int = 0
    build_seconds: float = 0.0
    build_cpu_seconds: float | None = None
    turns_per_second: float | None = None
    llm: CallSummary | None = None
    call_waves: CallWaves | None = None
    simulated: bool | None = None
    system: Mapping[str, Any] | None = None
    error: str | None = None
    error_kind: str | None = None
    finished: str | None = None
    embedder: Mapping[str, Any] | None = None
    reused_from: str | None = None
    version: int = LAYOUT
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def calls(self) -> CallSummary:
        """The build's call summary (an empty one where the row has none)."""
        return self.llm if self.llm is not None else CallSummary()

    @property
    def stats(self) -> Mapping[str, Any]:
        """The system's own statistics (empty where the row has none)."""
        return self.system or {}

    @property
    def input_account(self) -> Mapping[str, Any] | None:
        """The system's input account (`system.input`: turns given, kept, lost, stored units)."""
        account = self.stats.get("input")
        return account if isinstance(account, Mapping) else None


# ---------------------------------------------------------------- judgments*.jsonl


@dataclass(frozen=True)
class JudgeVerdict(Fields):
    """One graded response: the judge, its prompt and model, the raw output and its reading (`parsed`
    False when it could not be read; `correct` is then False); `repeat` numbers the repeats of a judge
    asked several times, `judge_hash` is the sha256 of the judge's pinned descriptor."""

    _ALWAYS: ClassVar[frozenset[str]] = frozenset({
        "question_id", "attempt", "method", "dataset", "judge_id", "prompt_id", "prompt_version",
        "prompt_source", "prompt_sha256", "judge_model", "raw_output", "correct", "parsed", "error",
        "repeat", "judge_hash"})
    _VERSIONED: ClassVar[bool] = True

    question_id: str = ""
    attempt: int = 0
    method: str = ""
    dataset: str = ""
    judge_id: str = ""
    prompt_id: str = ""
    prompt_version: int = 0
    prompt_source: str = "builtin"
    prompt_sha256: str | None = None
    judge_model: str = ""
    raw_output: str = ""
    correct: bool = False
    parsed: bool = True
    error: str | None = None
    repeat: int = 0
    judge_hash: str | None = None
    version: int = LAYOUT
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, int]:
        return str(self.question_id), int(self.attempt)

    @property
    def label(self) -> str:
        """The judge as the summary names it: `<judge id> (<judge model>)`."""
        return f"{self.judge_id} ({self.judge_model})"


# ---------------------------------------------------------------- served_calls.jsonl


@dataclass(frozen=True)
class ServedCall(Fields):
    """One request the latency-model server answered (`benchmarks/serving/latency_server.py`): its
    modelled timing, tokens, the prompt kind and output cap, the reply shape, the content source, the
    text and the error."""

    _ALWAYS: ClassVar[frozenset[str]] = frozenset({
        "key", "arrival", "admitted", "queue_s", "running", "ttft_s", "decode_s", "service_s", "compute_s",
        "overrun_s", "prompt_tokens", "cached_tokens", "completion_tokens", "source_completion_tokens",
        "kind", "cap", "capped", "max_tokens", "source_max_tokens", "bounded", "source_bounds", "shape",
        "shape_role", "source", "finish_reason", "text", "error"})
    _VERSIONED: ClassVar[bool] = True

    key: str = ""
    arrival: float = 0.0
    admitted: float | None = None
    queue_s: float = 0.0
    running: int | None = None
    ttft_s: float | None = None
    decode_s: float | None = None
    service_s: float = 0.0
    compute_s: float | None = None
    overrun_s: float | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    completion_tokens: int | None = None
    source_completion_tokens: int | None = None
    kind: str | None = None
    cap: int | None = None
    capped: bool | None = None
    max_tokens: int | None = None
    source_max_tokens: int | None = None
    bounded: bool | None = None
    source_bounds: Mapping[str, Any] | None = None
    shape: str | None = None
    shape_role: str | None = None
    source: str | None = None
    finish_reason: str | None = None
    text: str | None = None
    error: str | None = None
    version: int = LAYOUT
    extra: Mapping[str, Any] = field(default_factory=dict)
