"""Result directories as tidy pandas frames: one row per observation, every row carrying its run.

A results root holds any number of run directories (a directory with a `run.json`, written by
`memforest-bench`) and microbenchmark records (`<suite>.json` holding `{"suite", "result", ...}`,
written by `python -m benchmarks.micro`). Everything is found by walking the root, so the directory
layout may change freely; what a run *is* comes from its `run.json`.

Frames (see `Results`):
- runs          one row per run directory: experiment, dataset, method, backbone, seed, simulated, judge
- builds        one row per instance build (builds.jsonl), LLM totals and the write path's stage timings
- build_stages  one row per (build, call stage): calls, waves, tokens and summed call seconds;
                `stages_from` says where the stages come from: `call log` (the stages in builds.jsonl) or,
                for a simulated run whose proxy logged every call as `chat`, `served kinds` (the calls'
                prompt kinds in served_calls.jsonl, see `rows.split_proxied`: calls and tokens only)
- records       one row per (question, attempt) (records.jsonl, the last row of each pair)
- verdicts      one row per (question, attempt, judge) (judgments*.jsonl), with the record's category
- calls         one row per model call (llm_calls.jsonl)
- measurements  `<name>.jsonl` files in run directories other than the four above, one frame per name
- bench         the rows of microbenchmark records, one frame per suite

A run is *simulated* when its model answered through the latency-model server: `run.json` then holds
`"simulated": true` (top level, or in `config`, or in `config.llm`), or names a `latency_model`
(`config.llm.latency_model`, the harness's way).
Analysis never imports a project package and never needs the network.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.records import BuildRow, JudgeVerdict, QuestionRecord, ServedCall
from analysis.rows import (
    build_figures,
    build_spans,
    read_jsonl,
    record_recall,
    served_by_build,
    split_proxied,
)

log = logging.getLogger(__name__)
STANDARD_FILES = {"records", "builds", "llm_calls"}
RUN_COLUMNS = ["run_id", "experiment", "dataset", "kind", "method", "backbone", "seed", "simulated"]


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as dotted keys: {"a": {"b": 1}} -> {"a.b": 1}. Lists stay values."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def is_simulated(run: Mapping[str, Any]) -> bool:
    config = run.get("config") or {}
    llm = config.get("llm") or {}
    flags = (run.get("simulated"), config.get("simulated"), llm.get("simulated"))
    named = run.get("latency_model") or config.get("latency_model") or llm.get("latency_model")
    return any(bool(flag) for flag in flags) or bool(named)


def backbone(llm: Mapping[str, Any], simulated: bool) -> str | None:
    """The backbone's config name; `scripted` for the test model, except on the latency-model server,
    where the name says which served model the latencies imitate."""
    if llm.get("backend") == "scripted" and not simulated:
        return "scripted"
    return llm.get("name") or llm.get("model")


def run_row(run_dir: Path, root: Path, run: Mapping[str, Any]) -> dict[str, Any]:
    config = run.get("config") or {}
    method = config.get("method") or {}
    dataset = config.get("dataset") or {}
    llm = config.get("llm") or {}
    judge = config.get("judge") or {}
    return {
        "run_id": run_dir.relative_to(root).as_posix() if run_dir != root else ".",
        "experiment": config.get("experiment_name", "default"),
        "dataset": dataset.get("name") or (run.get("dataset") or {}).get("name"),
        "kind": (run.get("dataset") or {}).get("kind"),
        "method": method.get("name"),
        "backbone": backbone(llm, is_simulated(run)),
        "seed": config.get("seed", 0),
        "simulated": is_simulated(run),
        "attempts": config.get("attempts", 1),
        "judge_enabled": bool(judge.get("enabled", False)),
        "git_sha": (run.get("git") or {}).get("sha"),
        "skipped": (run_dir / "SKIPPED").exists(),
        "config": flatten(config),
        "path": str(run_dir),
    }


def build_row(row: Mapping[str, Any]) -> dict[str, Any]:
    build = BuildRow.from_row(row)
    llm, system = build.calls, build.stats
    out = {
        "instance_id": str(build.instance_id), **asdict(build_figures(build)),
        "sessions": build.sessions, "build_cpu_seconds": build.build_cpu_seconds,
        "embedding_calls": llm.embedding_calls, "waves": llm.waves,
        "critical_path_seconds": llm.critical_path_seconds, "call_seconds": llm.call_seconds,
        # MemForest's own statistics and every adapter's input account (free-form per system)
        "facts": system.get("new_facts"), "trees": system.get("trees_touched"),
        "memories_stored": (build.input_account or {}).get("stored"),
        "update_calls": system.get("update_calls"),
        "error": build.error,
    }
    for stage, seconds in (system.get("timings") or {}).items():
        out[f"time_{stage}"] = seconds
    return out


def stage_rows(row: Mapping[str, Any],
               served: Iterable[ServedCall | Mapping[str, Any]] = ()) -> Iterator[dict[str, Any]]:
    """The call stages of one build; with the served calls of a simulated build, its proxied calls split
    by their prompt kind where they account for them (`rows.split_proxied`)."""
    build = BuildRow.from_row(row)
    by_stage = build.calls.by_stage
    split = split_proxied(by_stage, [c.to_row() if isinstance(c, ServedCall) else c for c in served])
    for stage, numbers in (split or by_stage).items():
        yield {"instance_id": str(build.instance_id), "stage": stage, **numbers,
               "stages_from": "served kinds" if split else "call log"}


def served_calls_by_build(run_dir: Path) -> dict[str, list[ServedCall]]:
    """The served calls (served_calls.jsonl) of each build of a simulated run, by the span of the build's
    proxied calls (llm_calls.jsonl); none when the run lacks either file."""
    served = [ServedCall.from_row(row) for row in read_jsonl(run_dir / "served_calls.jsonl")]
    return served_by_build(served, build_spans(read_jsonl(run_dir / "llm_calls.jsonl"))) if served else {}


def record_row(row: Mapping[str, Any]) -> dict[str, Any]:
    record = QuestionRecord.from_row(row)
    latency = record.latency.seconds if record.latency is not None else {}
    out: dict[str, Any] = {
        "question_id": str(record.question_id), "attempt": int(record.attempt or 0),
        "instance_id": record.instance_id, "category": record.category, "abstention": record.abstention,
        "query_seconds": record.query_seconds, "error": record.error, "temperature": record.temperature,
        "retrieve_seconds": latency.get("retrieve"), "answer_seconds": latency.get("answer"),
    }
    for stage, seconds in latency.items():
        if stage not in ("retrieve", "answer"):
            out[f"latency_{stage}"] = seconds
    out["retrieval_llm_calls"] = record.retrieval_llm.calls if record.retrieval_llm is not None else 0
    out["gold_turn_retrieved"] = gold_hit(record)
    out["evidence_items"] = len(record.retrieved or ())
    out.update(record_recall(row))
    return out


def gold_hit(record: QuestionRecord) -> bool | None:
    """Whether any gold evidence turn is among the retrieved turns (None: no gold turns, an abstention,
    or a system that exposes no turn provenance)."""
    gold, got = record.evidence_turns or [], record.retrieved_turn_ids
    if not gold or record.abstention or got is None:
        return None
    return bool(set(map(str, gold)) & set(map(str, got)))


def verdict_row(row: Mapping[str, Any]) -> dict[str, Any]:
    verdict = JudgeVerdict.from_row(row)
    return {
        "question_id": str(verdict.question_id), "attempt": int(verdict.attempt),
        "judge_id": verdict.judge_id, "judge_model": verdict.judge_model,
        "prompt_source": verdict.prompt_source, "correct": bool(verdict.correct),
        "parsed": bool(verdict.parsed), "verdict_error": verdict.error,
        "repeat": verdict.repeat, "judge_hash": verdict.judge_hash,
    }


def call_row(call: Mapping[str, Any]) -> dict[str, Any]:
    tags = call.get("tags") or {}
    row = {key: call.get(key) for key in ("id", "stage", "prompt_id", "wave", "level", "start", "end",
                                         "prompt_tokens", "cached_prompt_tokens", "completion_tokens",
                                          "error")}
    row["latency"] = float(call.get("end", 0.0)) - float(call.get("start", 0.0))
    row["phase"] = tags.get("phase")
    row["instance_id"] = tags.get("instance")
    return row


def frame(rows: Iterable[dict[str, Any]], columns: Iterable[str] = ()) -> pd.DataFrame:
    """A frame of `rows` that has at least `columns`, even when there are no rows."""
    df = pd.DataFrame(list(rows))
    for column in columns:
        if column not in df.columns:
            df[column] = pd.Series(dtype=object)
    return df


@dataclass
class RunDir:
    path: Path
    info: dict[str, Any]


@dataclass
class Results:
    """Every run directory and microbenchmark record under `root`, read lazily into frames."""

    root: Path
    run_dirs: list[RunDir] = field(default_factory=list)
    bench_files: list[Path] = field(default_factory=list)

    @classmethod
    def scan(cls, root: str | Path) -> Results:
        root = Path(root)
        if not root.is_dir():
            raise FileNotFoundError(f"{root} is not a directory of results")
        out = cls(root)
        for run_json in sorted(root.rglob("run.json")):
            try:
                run = json.loads(run_json.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError) as exc:
                log.warning("%s: not readable (%s); skipped", run_json, exc)
                continue
            out.run_dirs.append(RunDir(run_json.parent, run_row(run_json.parent, root, run)))
        inside = {d.path for d in out.run_dirs}
        for path in sorted(root.rglob("*.json")):
            if path.name != "run.json" and not any(parent in inside for parent in path.parents):
                out.bench_files.append(path)
        return out

    def _per_run(self, filename: str, to_row: Any, multi: bool = False) -> pd.DataFrame:
        rows = []
        for run in self.run_dirs:
            paths = sorted(run.path.glob(filename)) if multi else [run.path / filename]
            for path in paths:
                if not path.exists():
                    continue
                head = {k: run.info[k] for k in RUN_COLUMNS}
                rows += [{**head, **to_row(raw)} for raw in read_jsonl(path)]
        return frame(rows, RUN_COLUMNS)

    @cached_property
    def runs(self) -> pd.DataFrame:
        return frame([d.info for d in self.run_dirs], [*RUN_COLUMNS, "config"])

    @cached_property
    def builds(self) -> pd.DataFrame:
        df = self._per_run("builds.jsonl", build_row)
        return df.drop_duplicates(["run_id", "instance_id"], keep="last") if len(df) else df

    @cached_property
    def build_stages(self) -> pd.DataFrame:
        rows = []
        for run in self.run_dirs:
            path = run.path / "builds.jsonl"
            if not path.exists():
                continue
            last = {str(b["instance_id"]): b for b in read_jsonl(path)}
            served = served_calls_by_build(run.path) if run.info["simulated"] else {}
            for instance, build in last.items():
                rows += [{**{k: run.info[k] for k in RUN_COLUMNS}, **row}
                         for row in stage_rows(build, served.get(instance, ()))]
        return frame(rows, [*RUN_COLUMNS, "instance_id", "stage", "stages_from"])

    @cached_property
    def records(self) -> pd.DataFrame:
        df = self._per_run("records.jsonl", record_row)
        return df.drop_duplicates(["run_id", "question_id", "attempt"], keep="last") if len(df) else df

    @cached_property
    def verdicts(self) -> pd.DataFrame:
        """Verdicts of every judgments*.jsonl file with the judged record's category and abstention
        (the last verdict of each (question, attempt, judge, judge model) counts)."""
        df = self._per_run("judgments*.jsonl", verdict_row, multi=True)
        columns = [*RUN_COLUMNS, "question_id", "attempt", "judge_id", "judge_model", "correct"]
        if not len(df):
            return frame([], [*columns, "category", "abstention"])
        df = df.drop_duplicates(["run_id", "question_id", "attempt", "judge_id", "judge_model"], keep="last")
        keys = self.records[["run_id", "question_id", "attempt", "category", "abstention", "instance_id"]]
        return df.merge(keys, on=["run_id", "question_id", "attempt"], how="left")

    @cached_property
    def calls(self) -> pd.DataFrame:
        return self._per_run("llm_calls.jsonl", call_row)

    def measurements(self, name: str) -> pd.DataFrame:
        """The rows of every `<name>.jsonl` in a run directory (an experiment's own measurement file),
        each with its run's columns."""
        if name in STANDARD_FILES or name.startswith("judgments"):
            raise ValueError(f"{name}.jsonl is a standard run file; use its own frame")
        return self._per_run(f"{name}.jsonl", lambda row: flatten(row))

    def bench(self, suite: str) -> pd.DataFrame:
        """The result rows of microbenchmark records of `suite` (a list of rows, or a mapping of
        variants to lists of rows: the variant goes into a `variant` column)."""
        rows = []
        for path in self.bench_files:
            try:
                record = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError):
                continue
            if not isinstance(record, dict) or record.get("suite") != suite:
                continue
            meta = {"source_file": path.relative_to(self.root).as_posix(),
                    "simulated": bool(record.get("simulated", False))}
            rows += [{**meta, **row} for row in bench_rows(record.get("result"))]
        return frame(rows, ["source_file", "simulated"])


def bench_rows(result: Any) -> list[dict[str, Any]]:
    if isinstance(result, list):
        return [flatten(row) for row in result if isinstance(row, Mapping)]
    if isinstance(result, Mapping):
        if all(isinstance(v, list) for v in result.values()):
            return [{"variant": k, **flatten(row)} for k, rows in result.items() for row in rows]
        return [flatten(result)]
    return []


def config_value(runs: pd.DataFrame, key: str, default: Any = None) -> pd.Series:
    """One dotted config key of each run (e.g. `method.memforest.query.final_units`)."""
    return runs["config"].map(lambda cfg: cfg.get(key, default) if isinstance(cfg, Mapping) else default)
