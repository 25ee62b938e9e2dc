"""Running a judge over answer records: during a run, and again later over a finished run directory.

Judge calls go through a Scheduler (waves, retries, the run's call log). Re-judging reads only
records.jsonl and writes `judgments.<judge>.<model>.jsonl`; memory is never opened.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from benchmarks import report
from benchmarks.judging import JUDGE_IDS, Judge, JudgeItem, Verdict
from benchmarks.results import RunCallLog, RunFiles, read_jsonl, safe_name
from benchmarks.systems import model_fields
from memforest.config import LLMConfig, from_dict
from memforest.llm.base import ChatModel, ChatRequest, ChatResponse
from memforest.llm.factory import build_chat_model
from memforest.llm.scheduler import Scheduler

Config = Mapping[str, Any]
REJUDGE_BATCH = 64


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


def chat_model(fields: Config) -> ChatModel:
    return build_chat_model(from_dict(LLMConfig, model_fields(fields)))


def make_scheduler(model: ChatModel, fields: Config, call_log: RunCallLog) -> Scheduler:
    c = from_dict(LLMConfig, model_fields(fields))
    return Scheduler(model, c.concurrency, call_log, c.max_retries, c.json_retries, c.backoff_s)


def check_judge_config(judge_cfg: Config) -> None:
    """Fail early on an unknown judge id or judge model field."""
    if judge_cfg.get("id") not in JUDGE_IDS:
        raise ValueError(f"unknown judge {judge_cfg.get('id')!r}; choose one of {', '.join(JUDGE_IDS)}")
    from_dict(LLMConfig, model_fields(judge_cfg["model"]))


def make_judge(judge_cfg: Config, model: ChatModel, call_log: RunCallLog, phase: str) -> tuple[Judge, Scheduler]:
    """A Judge on `model` whose calls go through a new Scheduler (returned, for closing)."""
    check_judge_config(judge_cfg)
    scheduler = make_scheduler(model, judge_cfg["model"], call_log)
    judge = Judge(ScheduledModel(scheduler, {"op": "judge", "phase": phase}), str(judge_cfg["id"]),
                  judge_cfg.get("official_dir"), int(judge_cfg.get("max_tokens", 192)))
    return judge, scheduler


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
    return [verdicts.get((str(r["question_id"]), int(r["attempt"]))) or unjudged_verdict(judge, r) for r in rows]


def rejudge_run(run_dir: str | Path, judge_cfg: Config, progress: bool = True) -> dict[str, Any]:
    """Judge the stored answers of a run again (resumable); return the refreshed run summary."""
    files = RunFiles(run_dir, create=False)
    run = files.load_run()
    latest = {(str(r["question_id"]), int(r["attempt"])): r for r in files.records()}
    rows = [row for row in latest.values() if "response" in row]
    model = chat_model(judge_cfg["model"])
    judge, scheduler = make_judge(judge_cfg, model, files.call_log, "rejudge")
    out = files.dir / f"judgments.{safe_name(judge.judge_id)}.{safe_name(judge.model.name)}.jsonl"
    done = {(str(v["question_id"]), int(v["attempt"])) for v in read_jsonl(out)}
    pending = [row for row in rows if (str(row["question_id"]), int(row["attempt"])) not in done]
    files.call_log.context = {"phase": "rejudge"}
    try:
        for start in tqdm(range(0, len(pending), REJUDGE_BATCH), desc="judging", disable=not progress):
            for verdict in judge_rows(judge, pending[start : start + REJUDGE_BATCH]):
                files.add_judgment(verdict.to_dict(), out)
    finally:
        scheduler.close()
        model.close()
    summary = report.write_summary(files, run["config"])
    files.close()
    print(summary["markdown"])
    return summary
