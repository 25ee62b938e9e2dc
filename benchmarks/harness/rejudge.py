"""Judging the stored answers of a finished run again: reads records.jsonl only (memory is never
opened) and writes `judgments.<judge>.<model>.jsonl`, with the judge's descriptor beside it in
`judgments.<judge>.<model>.judge.json`; resumable.

Verdicts of different judges (another model, prompt or sampling: another `judge_hash`) are never
written into one file, nor compared side by side, unless told to (`--mix-judges`, or
`judge.allow_mixed=true`); verdicts written before judges were pinned count as judge `unknown`."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from tqdm import tqdm

from benchmarks.harness import report
from benchmarks.harness.models import scheduler
from benchmarks.harness.results import RunFiles, read_jsonl, safe_name, write_json_atomic
from benchmarks.harness.schema import JudgeNode
from benchmarks.judging.grading import OFFICIAL_GOLD_SUFFIX, judge_rows, make_judge
from benchmarks.judging.pinning import check_one_judge, describe_judge, verdict_hash

REJUDGE_BATCH = 64


def rejudge_run(run_dir: str | Path, judge_cfg: JudgeNode, progress: bool = True) -> dict[str, Any]:
    """Judge the stored answers of a run again (resumable); return the refreshed run summary. Raises
    MixedJudgesError, before any judge call, when verdicts of another judge are under the same label."""
    files = RunFiles(run_dir, create=False)
    run = files.load_run()
    latest = {(str(r["question_id"]), int(r["attempt"])): r for r in read_jsonl(files.records_path)}
    rows = [row for row in latest.values() if "response" in row]
    if judge_cfg.model is None:
        raise ValueError("rejudging needs the judge's model (the run's backbone unless one is chosen)")
    descriptor = describe_judge(asdict(judge_cfg), judge_cfg.model)
    model = instantiate(judge_cfg.model)
    sched = scheduler(model, judge_cfg.model, files.call_log)
    try:
        judge = make_judge(asdict(judge_cfg), sched, "rejudge", model_cfg=judge_cfg.model)
        out = files.dir / f"judgments.{safe_name(judge.judge_id)}.{safe_name(judge.model.name)}.jsonl"
        check_label(files, out, judge.judge_id, judge.model.name, descriptor, judge_cfg.allow_mixed)
        note_descriptor(out, descriptor)
        done = {(str(v["question_id"]), int(v["attempt"]), int(v.get("repeat", 0))) for v in read_jsonl(out)
                if v.get("judge_id") == judge.judge_id}
        pending = [row for row in rows if any((str(row["question_id"]), int(row["attempt"]), r) not in done
                                              for r in range(judge.repeats))]
        files.call_log.context = {"phase": "rejudge"}
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


def descriptor_path(judgments: Path) -> Path:
    """`judgments.<judge>.<model>.jsonl` -> `judgments.<judge>.<model>.judge.json`."""
    return judgments.with_name(judgments.name.removesuffix(".jsonl") + ".judge.json")


def note_descriptor(judgments: Path, descriptor: Mapping[str, Any]) -> None:
    """Keep `descriptor` (by its hash) in the descriptor file beside a re-judging's verdicts."""
    path = descriptor_path(judgments)
    known = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    known[str(descriptor["judge_hash"])] = dict(descriptor)
    write_json_atomic(path, known)


def known_descriptors(files: RunFiles) -> dict[str, dict[str, Any]]:
    """Every judge descriptor a run directory records, by hash: run.json's `judge` and the descriptor
    files of its re-judgings."""
    out: dict[str, dict[str, Any]] = {}
    stored = files.load_run().get("judge") if files.run_json.exists() else None
    if isinstance(stored, dict) and stored.get("judge_hash"):
        out[str(stored["judge_hash"])] = stored
    for path in sorted(files.dir.glob("judgments*.judge.json")):
        out.update(json.loads(path.read_text(encoding="utf-8")))
    return out


def base_judge_id(verdict: Mapping[str, Any]) -> str:
    return str(verdict.get("judge_id", "")).removesuffix(OFFICIAL_GOLD_SUFFIX)


def check_label(files: RunFiles, out: Path, judge_id: str, model_name: str, descriptor: Mapping[str, Any],
                allow_mixed: bool) -> None:
    """Refuse to add this judge's verdicts where verdicts of another judge count under the same label:
    in the output file, or in the run's other judgment files with the same judge id and model."""
    same = [v for path in files.judgment_files() for v in read_jsonl(path)
            if path == out or (base_judge_id(v) == judge_id and str(v.get("judge_model")) == model_name)]
    hashes = [verdict_hash(v) for v in same] + [str(descriptor["judge_hash"])]
    descriptors = {**known_descriptors(files), str(descriptor["judge_hash"]): dict(descriptor)}
    check_one_judge({f"judge {judge_id} ({model_name})": hashes}, descriptors, allow_mixed)


def check_comparable(run_dirs: Sequence[str | Path], allow_mixed: bool) -> None:
    """Refuse to put runs side by side whose verdicts of one judge id come from different judges: for
    each judge id, every run must hold verdicts of the same judge hashes, and no run two hashes under
    one label (judge id and model). Raises MixedJudgesError."""
    per_run: dict[str, dict[str, set[str]]] = defaultdict(dict)
    within: dict[str, list[str]] = {}
    descriptors: dict[str, dict[str, Any]] = {}
    for run_dir in run_dirs:
        files = RunFiles(run_dir, create=False)
        if not files.run_json.exists():
            continue
        descriptors.update(known_descriptors(files))
        labels: dict[str, set[str]] = defaultdict(set)
        for verdict in (v for path in files.judgment_files() for v in read_jsonl(path)):
            jid = base_judge_id(verdict)
            per_run[jid].setdefault(str(run_dir), set()).add(verdict_hash(verdict))
            labels[f"{run_dir}: judge {jid} ({verdict.get('judge_model', '')})"].add(verdict_hash(verdict))
        within.update({label: sorted(found) for label, found in labels.items() if len(found) > 1})
    groups: dict[str, Iterable[str]] = dict(within)
    for jid, by_run in per_run.items():
        if len({frozenset(found) for found in by_run.values()}) > 1:
            groups[f"judge {jid} across runs"] = sorted(set().union(*by_run.values()))
    check_one_judge(groups, descriptors, allow_mixed)
