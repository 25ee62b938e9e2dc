"""Grading answer records with a judge, whose calls go through a Scheduler (waves, retries, the run's
call log): records in, one Verdict per record and repeat out, failed records marked without a judge call.

A record an erratum changed (its `answer_official` is the official gold, `answer` the corrected one) is
also graded against the official gold: those verdicts carry `gold: answer_official` and the judge id
`<judge_id>@official_gold`, so that they never stand in for the run's verdicts of the same attempt; the
official score of a run with errata takes them in place of the run judge's verdicts of those records."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from hydra.utils import instantiate

from benchmarks.judging.judges import OFFICIAL_GOLD, OFFICIAL_GOLD_SUFFIX, Judge, JudgeItem, Verdict
from benchmarks.judging.pinning import describe_judge
from memforest.llm.base import ChatRequest, ChatResponse
from memforest.llm.scheduler import Scheduler

Config = Mapping[str, Any]
JUDGE_KEYS = ("_target_", "judge_id", "official_dir", "max_tokens", "temperature", "top_p", "seed", "repeats")


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


def make_judge(judge_cfg: Config, scheduler: Scheduler, phase: str, model_cfg: Any = None) -> Judge:
    """The judge `judge_cfg` names (its `_target_`), grading through `scheduler` (waves, retries, log).
    Its verdicts carry the hash of its descriptor (`benchmarks.judging.pinning`), whose model is
    `model_cfg`, else the judge's own `model`, else the config of the scheduler's model."""
    spec = {k: judge_cfg[k] for k in JUDGE_KEYS if k in judge_cfg}
    model = model_cfg or judge_cfg.get("model") or getattr(scheduler.model, "cfg", None)
    descriptor = describe_judge(judge_cfg, model) if model is not None else None
    scheduled = ScheduledModel(scheduler, {"op": "judge", "phase": phase})
    judge = instantiate(spec, _partial_=True)(model=scheduled,
                                              judge_hash=descriptor["judge_hash"] if descriptor else None)
    assert isinstance(judge, Judge)
    return judge


def judge_item(row: Config, gold: str = "answer") -> JudgeItem:
    return JudgeItem(str(row["question_id"]), str(row["question"]), str(row[gold]),
                     str(row.get("response") or ""), str(row["category"]), bool(row.get("abstention")),
                     int(row["attempt"]), str(row["method"]), str(row["dataset"]), gold)


def unjudged_verdict(judge: Judge, row: Config, repeat: int = 0, gold: str = "answer") -> Verdict:
    """WRONG, without a judge call, for a record whose build, retrieval or answer failed."""
    item = judge_item(row, gold)
    prompt = judge.prepare(item, repeat)
    return Verdict(item.question_id, item.attempt, item.method, item.dataset, judge.judge_id,
                   prompt.request.prompt_id, prompt.request.prompt_version, prompt.source, prompt.sha256,
                   judge.model.name, "", False, False, f"not judged: {row.get('error')}",
                   judge.judge_hash, repeat, gold)


def has_official_gold(row: Config) -> bool:
    """Whether an erratum replaced the record's gold answer (its official gold is kept beside it)."""
    return row.get(OFFICIAL_GOLD) is not None and str(row[OFFICIAL_GOLD]) != str(row.get("answer"))


def judge_rows(judge: Judge, rows: Sequence[Config]) -> list[Verdict]:
    """The verdicts of each record, in record order: one per repeat, then, for a record whose gold an
    erratum replaced, one per repeat against the official gold (judge id `<id>@official_gold`)."""
    asked = [(row, gold) for row in rows if not row.get("error")
             for gold in ("answer", *((OFFICIAL_GOLD,) if has_official_gold(row) else ()))]
    found: dict[tuple[str, int, int, str], Verdict] = {}
    for v in judge.judge([judge_item(row, gold) for row, gold in asked]):
        found[(v.question_id, v.attempt, v.repeat, v.gold)] = v
    out = []
    for row in rows:
        golds = ("answer", *((OFFICIAL_GOLD,) if has_official_gold(row) else ()))
        for gold in golds:
            for r in range(judge.repeats):
                key = (str(row["question_id"]), int(row["attempt"]), r, gold)
                verdict = found.get(key) or unjudged_verdict(judge, row, r, gold)
                out.append(verdict if gold == "answer"
                           else replace(verdict, judge_id=verdict.judge_id + OFFICIAL_GOLD_SUFFIX))
    return out
