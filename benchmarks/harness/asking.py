"""One question of the benchmark loop (`runner`): retrieve once, cut the evidence to the run's token
budget and the answer prompt's window, then answer each pending attempt; one record (a plain row, as
`analysis.records.QuestionRecord` reads it) per attempt, or a failed one per attempt when retrieval
fails."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

from baselines.base import EvidenceItem, Retrieval, render_evidence
from benchmarks.datasets import Instance, Question
from benchmarks.datasets.errata import errata_fields
from benchmarks.harness import simulation as simulated
from benchmarks.harness.answering import answer_request, context_room
from benchmarks.harness.building import failure_text
from benchmarks.harness.context_budget import cut_to_budget, fit_window
from benchmarks.harness.evidence import retrieval_fields
from benchmarks.harness.infrastructure import INFRASTRUCTURE, SYSTEM, failure_kind, model_lost, stop_cause
from benchmarks.harness.input_kept import reported_input
from benchmarks.harness.scoring import dedupe
from benchmarks.harness.state import Harness
from memforest.errors import MemForestError, ModelBusyError, ModelUnavailableError
from memforest.llm.base import ChatResponse
from memforest.llm.calllog import summarize

Row = Mapping[str, Any]  # a build row (builds.jsonl)
log = logging.getLogger(__name__)


def question_fields(h: Harness, instance: Instance, question: Question, build: Row) -> dict[str, Any]:
    out = {
        "method": h.cfg.method.name, "dataset": h.dataset.name, "instance_id": instance.instance_id,
        "question_id": question.question_id, "category": question.category,
        "abstention": question.abstention, "question": question.question, "answer": question.answer,
        "question_date": question.question_date.isoformat() if question.question_date else None,
        "evidence_sessions": list(question.evidence_sessions),
        "evidence_turns": dedupe(instance.source_turn(t) for t in question.evidence_turns),
        "build_id": build.get("build_id"), "simulated": simulated.is_simulated(h.cfg),
        "input": reported_input(build),
    }
    if instance.session_aliases:
        out.update(session_aliases=dict(instance.session_aliases),
                   evidence_turns_raw=list(question.evidence_turns))
    out.update(errata_fields(question))  # the official gold beside the corrected one (dataset.errata)
    return out


def failed_rows(h: Harness, instance: Instance, question: Question, attempts: Sequence[int], error: str,
                build: Row, kind: str) -> list[dict[str, Any]]:
    """Records of attempts that failed with `error`; `kind` is `infrastructure` or `system`."""
    base = question_fields(h, instance, question, build)
    extra = {"response": ""} if h.answerer is not None else {}
    return [{**base, "attempt": a, **extra, "error": error, "error_kind": kind} for a in attempts]


def ask(h: Harness, instance: Instance, question: Question, attempts: Sequence[int],
        build: Row) -> list[dict[str, Any]]:
    """Retrieve once, then answer each pending attempt; one record per attempt."""
    h.call_log.context = {"instance": instance.instance_id, "phase": "retrieve",
                          "question": question.question_id}
    mark = len(h.call_log)
    start = time.perf_counter()
    try:
        retrieval = h.system.retrieve(question.question, question.question_date)
    except Exception as exc:
        stop = stop_cause(exc, h.call_log.since(mark))
        if stop is not None:
            raise stop from exc
        log.error("retrieval for %s failed: %s", question.question_id, failure_text(exc),
                  exc_info=not isinstance(exc, MemForestError))
        return failed_rows(h, instance, question, attempts, f"retrieval: {failure_text(exc)}", build,
                           failure_kind(exc))
    lost = model_lost(h.call_log.since(mark))
    if lost is not None:  # the system answered around a model that is gone
        raise lost
    seconds = time.perf_counter() - start
    cut: dict[str, Any] = {}
    if h.cfg.budget.mode == "tokens":
        retrieval, cut = cut_to_budget(retrieval, h.cfg.budget.evidence_tokens, h.tokens.count,
                                       system_render(h))
    base = {**question_fields(h, instance, question, build), **retrieval_fields(retrieval, instance),
            **cut, **answer_context(h, question, retrieval),
            "latency": {**retrieval.latency, "retrieve": round(seconds, 6)},
            "retrieval_llm": summarize(h.call_log.since(mark)), "query_seconds": round(seconds, 6)}
    if h.answerer is None:
        return [{**base, "attempt": 0}]
    h.call_log.context["phase"] = "answer"
    return answer_attempts(h, question, base, attempts)


def system_render(h: Harness) -> Callable[[Sequence[EvidenceItem]], str]:
    """The system's own layout of a subset of its evidence items (`render_evidence` when it has none)."""
    render = getattr(h.system, "render", None)
    return render if callable(render) else render_evidence


def answer_context(h: Harness, question: Question, retrieval: Retrieval) -> dict[str, Any]:
    """The context handed to the answer model and its size in tokens: the retrieval's, cut from its
    oldest evidence when the answer prompt would not fit in the served window (`prompt_cut`)."""
    context = retrieval.context
    out: dict[str, Any] = {}
    if h.answerer is not None:
        room = context_room(h.dataset.kind, question.question, question.question_date,
                            h.cfg.llm.context_tokens, h.cfg.answer.max_tokens, h.tokens.count)
        context, details = fit_window(context, retrieval.evidence, room, h.tokens.count, system_render(h))
        out = {"prompt_cut": details is not None, **({"prompt_window": details} if details else {})}
    return {"context": context, "evidence_tokens": h.tokens.count(context), **out}


def answer_attempts(h: Harness, question: Question, base: dict[str, Any],
                    attempts: Sequence[int]) -> list[dict[str, Any]]:
    """Answer with the shared prompt (reference date = question date); attempt 0 is greedy."""
    answer_cfg, seed = h.cfg.answer, h.cfg.seed
    requests = [
        answer_request(h.dataset.kind, question.question, question.question_date, base["context"],
                       max_tokens=answer_cfg.max_tokens, seed=seed * 1000 + a,
                       temperature=0.0 if a == 0 else answer_cfg.temperature)
        for a in attempts
    ]
    assert h.answerer is not None
    start = time.perf_counter()
    results = h.answerer.run(requests, tags={"op": "answer"})
    seconds = time.perf_counter() - start
    for result in results:
        if isinstance(result, ModelUnavailableError):  # no attempt of this question is recorded
            raise result
    rows = []
    for a, request, result in zip(attempts, requests, results, strict=True):
        row = {**base, "attempt": a, "answer_prompt_id": request.prompt_id,
               "answer_prompt_version": request.prompt_version, "temperature": request.temperature,
               "seed": request.seed, "latency": {**base["latency"], "answer": round(seconds, 6)},
               "query_seconds": round(base["query_seconds"] + seconds, 6)}
        if isinstance(result, ChatResponse):
            row.update(response=result.text.strip(), answer_usage=asdict(result.usage), model=result.model)
        else:
            row.update(response="", error=f"answer: {result}",
                       error_kind=INFRASTRUCTURE if isinstance(result, ModelBusyError) else SYSTEM)
        rows.append(row)
    return rows
