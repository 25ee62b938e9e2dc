"""Grading answer records with a judge, whose calls go through a Scheduler (waves, retries, the run's
call log): records in, one Verdict per record out, failed records marked without a judge call."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hydra.utils import instantiate

from benchmarks.judging.judges import Judge, JudgeItem, Verdict
from memforest.llm.base import ChatRequest, ChatResponse
from memforest.llm.scheduler import Scheduler

Config = Mapping[str, Any]


class ScheduledModel:
    """A Scheduler seen as a batched ChatModel, so that judge calls get waves, retries and a log."""

    batched = True

    def __init__(self, scheduler: Scheduler, tags: dict[str, Any]) -> None:
        self.scheduler = scheduler
        self.tags = tags
        self.name = scheduler.model.name
        self.max_concurrency = scheduler.concurrency

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResponse | Exception]:
        return list(self.scheduler.run(requests, tags=self.tags))

    def close(self) -> None:
        pass


def make_judge(judge_cfg: Config, scheduler: Scheduler, phase: str) -> Judge:
    """The judge `judge_cfg` names (its `_target_`), grading through `scheduler` (waves, retries, log)."""
    spec = {k: judge_cfg[k] for k in ("_target_", "judge_id", "official_dir", "max_tokens")}
    judge = instantiate(spec,
                        _partial_=True)(model=ScheduledModel(scheduler, {"op": "judge", "phase": phase}))
    assert isinstance(judge, Judge)
    return judge


def judge_item(row: Config) -> JudgeItem:
    return JudgeItem(str(row["question_id"]), str(row["question"]), str(row["answer"]),
                     str(row.get("response") or ""), str(row["category"]), bool(row.get("abstention")),
                     int(row["attempt"]), str(row["method"]), str(row["dataset"]))


def unjudged_verdict(judge: Judge, row: Config) -> Verdict:
    """WRONG, without a judge call, for a record whose build, retrieval or answer failed."""
    item = judge_item(row)
    prompt = judge.prepare(item)
    return Verdict(item.question_id, item.attempt, item.method, item.dataset, judge.judge_id,
                   prompt.request.prompt_id, prompt.request.prompt_version, prompt.source, prompt.sha256,
                   judge.model.name, "", False, False, f"not judged: {row.get('error')}")


def judge_rows(judge: Judge, rows: Sequence[Config]) -> list[Verdict]:
    """One verdict per record, in order."""
    asked = [row for row in rows if not row.get("error")]
    verdicts = {(v.question_id, v.attempt): v for v in judge.judge([judge_item(r) for r in asked])}
    return [verdicts.get((str(r["question_id"]), int(r["attempt"]))) or unjudged_verdict(judge, r)
            for r in rows]
