"""Judging the stored answers of a finished run again: reads records.jsonl only (memory is never
opened) and writes `judgments.<judge>.<model>.jsonl`; resumable."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from tqdm import tqdm

from benchmarks.harness import report
from benchmarks.harness.models import scheduler
from benchmarks.harness.results import RunFiles, read_jsonl, safe_name
from benchmarks.harness.schema import JudgeNode
from benchmarks.judging.grading import judge_rows, make_judge

REJUDGE_BATCH = 64


def rejudge_run(run_dir: str | Path, judge_cfg: JudgeNode, progress: bool = True) -> dict[str, Any]:
    """Judge the stored answers of a run again (resumable); return the refreshed run summary."""
    files = RunFiles(run_dir, create=False)
    run = files.load_run()
    latest = {(str(r["question_id"]), int(r["attempt"])): r for r in files.records()}
    rows = [row for row in latest.values() if "response" in row]
    if judge_cfg.model is None:
        raise ValueError("rejudging needs the judge's model (the run's backbone unless one is chosen)")
    model = instantiate(judge_cfg.model)
    sched = scheduler(model, judge_cfg.model, files.call_log)
    judge = make_judge(asdict(judge_cfg), sched, "rejudge")
    out = files.dir / f"judgments.{safe_name(judge.judge_id)}.{safe_name(judge.model.name)}.jsonl"
    done = {(str(v["question_id"]), int(v["attempt"])) for v in read_jsonl(out)}
    pending = [row for row in rows if (str(row["question_id"]), int(row["attempt"])) not in done]
    files.call_log.context = {"phase": "rejudge"}
    try:
        for start in tqdm(range(0, len(pending), REJUDGE_BATCH), desc="judging", disable=not progress):
            for verdict in judge_rows(judge, pending[start : start + REJUDGE_BATCH]):
                files.add_judgment(verdict.to_dict(), out)
    finally:
        sched.close()
        model.close()
    summary = report.write_summary(files, report.RunLabels.stored(run["config"]))
    files.close()
    print(summary["markdown"])
    return summary
