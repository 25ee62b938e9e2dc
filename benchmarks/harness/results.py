"""Files of one run directory: run.json, records, judgments, builds, the call log and the stores.

Every JSONL file is append-only and written one whole line per `write` call, flushed at once, so an
interrupted run leaves at most one torn last line; readers skip it and writers terminate it first.
A run directory is deterministic, so running the same configuration again resumes it. An experiment
may add a variant level before `seed<N>` (`mode_<query.mode>`, `k<final_units>`, `turns<max_turns>`,
`families_<a+b>`, `mode_<m>/compose<N>`); read knob values from run.json's `config`, not the path.

Every row of records, builds, judgments and served calls is written and read through the typed records
of `analysis.records` (`QuestionRecord`, `BuildRow`, `JudgeVerdict`, `ServedCall`), whose fields are the
layout; each row carries its layout `version` (rows without one are layout 1, which is still read).

Files and the fields the paper's analysis reads:

- run.json: config, system, dataset, models, git, packages, fingerprint, invocations, embedder;
  `simulated` (bool: the backbone was the latency-model server) and, for simulated runs,
  `latency_model` {params, served {model|replay|fallback|overrun: n}, peak_running, replay_answers}.
- records.jsonl, one row per (question, attempt): category (LongMemEval type; LoCoMo official name,
  `adversarial` = category 5, reported apart from 1-4), abstention, latency {embed, recall, plan,
  browse, assemble, retrieve, answer} s, query_seconds, retrieval_llm, answer_usage, `simulated`.
- judgments*.jsonl: judge_id, judge_model, correct (one file per re-judging label).
- builds.jsonl, one row per instance build: build_seconds, build_cpu_seconds, turns, turns_per_second,
  llm (call summary; its waves/critical path come from the library's own wave ids, 0 for proxied
  calls), system (MemForest: timings {chunk, extract, embed, canonicalize, route, refresh} s, facts,
  cells, summaries), `call_waves` {calls, waves, critical_path_seconds, busy_seconds, max_in_flight,
  call_seconds} derived from call timestamps alike for every system (harness/waves.py), `simulated`,
  and `reused_from` when the store was copied from another run (`stores_from`).
- llm_calls.jsonl: call records (stage, prompt_id, wave, level, start/end epoch s, tokens, tags). In a
  simulated run only the logging proxy's records (stages chat/embed), MemForest included;
  llm_calls_client.jsonl then holds the in-process schedulers' own records (not counted).
- served_calls.jsonl (simulated runs): per request the latency server answered: key, arrival,
  admitted, queue_s, running, ttft_s, decode_s, service_s (modelled), compute_s (content source),
  overrun_s (> 0: slower than simulated), prompt/cached/completion tokens, source, text, error; the
  input of `llm.latency_model.source=replay`.
- migration.jsonl (task migration), per N: n, sources_build_s, sequential_s, merge_s, speedup,
  merge_llm_calls, sequential_llm_calls, facts_/trees_sequential, facts_/trees_merged, facts_ratio,
  trees_ratio, simulated.
- scaling.jsonl (task scaling), per instance: leaves, trees, eager_calls, batched_calls,
  eager_over_batched, refresh_calls, refresh_call_seconds, measured_refresh_wall_s, refresh_s {P: s},
  speedup {P: x} (string keys), concurrency, simulated.
- summary.md: the run's tables (the title marks simulated runs); a sweep directory also gets
  comparison.md and, for experiment write_path, write_path.md / write_path.json (harness/write_path.py:
  per system build_seconds, turns_per_second, llm_calls, uncached/cached prompt and output tokens,
  derived waves, critical_path_seconds, busy_seconds, max_in_flight, recorded_waves,
  speedup_vs_slowest, ratio_to_mem0).
"""

from __future__ import annotations

import json
import logging
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from analysis.records import BuildRow, JudgeVerdict, QuestionRecord, ServedCall
from analysis.rows import read_jsonl
from benchmarks.jsonl import JsonlWriter
from memforest.llm.calllog import CallLog, CallRecord

SCHEMA_VERSION = 1
REPO_DIR = Path(__file__).resolve().parents[2]
PACKAGES = (
    "memforest", "hydra-core", "omegaconf", "numpy", "faiss-cpu", "faiss-gpu-cu12", "torch",
    "sentence-transformers", "transformers", "llama-cpp-python", "vllm", "httpx", "wandb",
)
log = logging.getLogger(__name__)


class RunConflictError(RuntimeError):
    """The run directory holds results of a different configuration."""


# ---------------------------------------------------------------- JSONL


def write_text_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` in one step; the temporary file is one per process, so processes that
    write the same file at once (array tasks ending together) never mix their bytes."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")


# ---------------------------------------------------------------- call log


class RunCallLog(CallLog):
    """A CallLog whose records also carry the harness context (instance, phase, question)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.context: dict[str, Any] = {}

    def add(self, record: CallRecord) -> None:
        record.tags = {**self.context, **record.tags}
        super().add(record)


# ---------------------------------------------------------------- provenance


def git_info(repo: Path = REPO_DIR) -> dict[str, Any]:
    """The commit of the code that produced a run, and whether the work tree had changes."""
    def git(*args: str) -> str:
        out = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=30)
        return out.stdout.strip() if out.returncode == 0 else ""

    try:
        sha = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        return {"sha": None, "dirty": None}
    return {"sha": sha or None, "dirty": dirty if sha else None}


def package_versions(names: Iterable[str] = PACKAGES) -> dict[str, str]:
    """Installed versions of the packages that can change a result (absent ones are left out)."""
    out = {"python": platform.python_version()}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


# ---------------------------------------------------------------- the run directory

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def safe_name(text: str) -> str:
    """A file-name-safe form of an id (instance ids, judge labels)."""
    return _UNSAFE.sub("_", text).strip("._")[:150] or "_"


class RunFiles:
    """The files of one run directory, opened for appending."""

    def __init__(self, run_dir: str | Path, create: bool = True) -> None:
        self.dir = Path(run_dir)
        if create:
            self.dir.mkdir(parents=True, exist_ok=True)
        self.run_json = self.dir / "run.json"
        self.records_path = self.dir / "records.jsonl"
        self.judgments_path = self.dir / "judgments.jsonl"
        self.builds_path = self.dir / "builds.jsonl"
        self.calls_path = self.dir / "llm_calls.jsonl"
        self.served_path = self.dir / "served_calls.jsonl"  # simulated runs: the latency server writes it
        self.summary_path = self.dir / "summary.md"
        self.skipped_path = self.dir / "SKIPPED"  # the reason a system could not run here
        self.stores = self.dir / "stores"
        self._writers: dict[Path, JsonlWriter] = {}
        self._calls: RunCallLog | None = None

    # ---- writers

    def _writer(self, path: Path) -> JsonlWriter:
        if path not in self._writers:
            self._writers[path] = JsonlWriter(path)
        return self._writers[path]

    def add_record(self, record: QuestionRecord | Mapping[str, Any]) -> None:
        """Write one record in the current layout (a plain row is read as a record first)."""
        typed = record if isinstance(record, QuestionRecord) else QuestionRecord.from_row(record)
        self._writer(self.records_path).write(typed.to_row())

    def add_judgment(self, verdict: JudgeVerdict | Mapping[str, Any], path: Path | None = None) -> None:
        typed = verdict if isinstance(verdict, JudgeVerdict) else JudgeVerdict.from_row(verdict)
        self._writer(path or self.judgments_path).write(typed.to_row())

    def add_build(self, build: BuildRow | Mapping[str, Any]) -> None:
        typed = build if isinstance(build, BuildRow) else BuildRow.from_row(build)
        self._writer(self.builds_path).write(typed.to_row())

    @property
    def call_log(self) -> RunCallLog:
        if self._calls is None:
            self._calls = RunCallLog(self.calls_path)
        return self._calls

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()
        if self._calls is not None:
            self._calls.close()

    # ---- readers

    def records(self) -> list[QuestionRecord]:
        """Every record, in the order written (a redone attempt after its earlier record)."""
        return [QuestionRecord.from_row(row) for row in read_jsonl(self.records_path)]

    def latest_records(self) -> list[QuestionRecord]:
        """The last record of each (question, attempt)."""
        return list({record.key: record for record in self.records()}.values())

    def builds(self) -> dict[str, BuildRow]:
        """The last build row of each instance."""
        return {str(build.instance_id): build
                for build in (BuildRow.from_row(row) for row in read_jsonl(self.builds_path))}

    def judgment_files(self) -> list[Path]:
        return sorted(self.dir.glob("judgments*.jsonl"))

    def judgments(self, path: Path | None = None) -> list[JudgeVerdict]:
        """The verdicts of every judgments file, or of the one at `path`."""
        paths = [path] if path is not None else self.judgment_files()
        return [JudgeVerdict.from_row(row) for p in paths for row in read_jsonl(p)]

    def served_calls(self) -> list[ServedCall]:
        """The requests the latency-model server answered (simulated runs; none otherwise)."""
        return [ServedCall.from_row(row) for row in read_jsonl(self.served_path)]

    # ---- stores

    def store_dir(self, instance_id: str) -> Path:
        return self.stores / safe_name(instance_id)

    def mark_store_complete(self, instance_id: str, build_id: str) -> None:
        (self.store_dir(instance_id) / "COMPLETE").write_text(build_id, encoding="utf-8")

    def store_complete(self, instance_id: str, build_id: str) -> bool:
        marker = self.store_dir(instance_id) / "COMPLETE"
        return marker.exists() and marker.read_text(encoding="utf-8").strip() == build_id

    def clear_store(self, instance_id: str) -> Path:
        path = self.store_dir(instance_id)
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
        return path

    def remove_store(self, instance_id: str) -> None:
        shutil.rmtree(self.store_dir(instance_id), ignore_errors=True)

    # ---- run.json

    def open_run(self, meta: dict[str, Any], fingerprint: dict[str, Any]) -> dict[str, Any]:
        """Write run.json for a new run; for an existing one, check the fingerprint and log this start."""
        invocation = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "argv": sys.argv[1:],
                      "git": meta.get("git"), "config": meta.get("config")}
        if self.run_json.exists():
            run = json.loads(self.run_json.read_text(encoding="utf-8"))
            if run.get("fingerprint") != fingerprint:
                raise RunConflictError(_conflict_message(self.dir, run.get("fingerprint"), fingerprint))
        else:
            run = {"schema_version": SCHEMA_VERSION, **meta, "fingerprint": fingerprint, "invocations": []}
        run["invocations"].append(invocation)
        write_json_atomic(self.run_json, run)
        return run

    def note_invocation(self, **fields: Any) -> None:
        """Add what became known once the models were built (e.g. the embedder's resolved settings) to
        this invocation's entry of run.json, and at the top level for the run's first invocation."""
        run = self.load_run()
        run["invocations"][-1].update(fields)
        for key, value in fields.items():
            run.setdefault(key, value)
        write_json_atomic(self.run_json, run)

    def load_run(self) -> dict[str, Any]:
        if not self.run_json.exists():
            raise FileNotFoundError(f"{self.run_json} not found: is {self.dir} a run directory?")
        return json.loads(self.run_json.read_text(encoding="utf-8"))


def _conflict_message(run_dir: Path, old: Any, new: dict[str, Any]) -> str:
    changed = sorted(k for k in set(new) | set(old or {}) if (old or {}).get(k) != new.get(k))
    return (
        f"{run_dir} holds a run of another configuration (differs in: {', '.join(changed)}). "
        "Choose another experiment_name (or seed), or remove the directory."
    )
