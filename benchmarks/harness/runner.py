"""The benchmark loop. Per instance: build (or reopen) the memory, then per question retrieve once and
answer `attempts` times (`asking`), and judge, writing every result the moment it exists.

The runner takes the typed, resolved configuration (`schema.BenchConfig`, which the Hydra app converts
the composed config into); it knows nothing of Hydra. Finished (question, attempt) pairs and completed
builds are skipped on a rerun. A model that is gone (a dead engine, a server that stopped answering)
stops the run with ModelUnavailableError before anything is recorded for the build or question it
was serving (benchmarks.harness.infrastructure): the next invocation resumes there.
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from tqdm import tqdm

from analysis.records import JudgeVerdict, QuestionRecord
from baselines.base import SystemUnavailable
from benchmarks.datasets import Dataset, Instance, Question
from benchmarks.harness import report
from benchmarks.harness import simulation as simulated
from benchmarks.harness.asking import ask, failed_rows
from benchmarks.harness.building import ensure_memory, failure_text
from benchmarks.harness.estimate import estimate
from benchmarks.harness.evidence import retrieval_fields
from benchmarks.harness.html_report import PAGE_NAME, write_report
from benchmarks.harness.infrastructure import SYSTEM, ServerProbe, failure_kind
from benchmarks.harness.inputs import dataset_metadata, load_benchmark_dataset
from benchmarks.harness.models import library_config, scheduler
from benchmarks.harness.results import RunFiles, git_info, package_versions
from benchmarks.harness.schema import BenchConfig, plain_config
from benchmarks.harness.state import Harness, close_after_failure
from benchmarks.harness.systems import Models, build_system, system_settings
from benchmarks.harness.tasks import run_task
from benchmarks.harness.tokens import token_counter
from benchmarks.harness.wandb_logger import WandbLogger
from benchmarks.judging.grading import judge_rows, make_judge
from benchmarks.judging.judges import Judge
from benchmarks.judging.pinning import judge_descriptor
from memforest.config import LLMConfig
from memforest.errors import MemForestError, unavailable_cause
from memforest.llm.base import ChatModel, embedder_settings
from memforest.llm.calllog import CallLog

__all__ = ["retrieval_fields"]  # re-exported
log = logging.getLogger(__name__)


def fingerprint(cfg: BenchConfig, dataset: Dataset) -> dict[str, Any]:
    """What must not change between the invocations that fill one run directory (stored in run.json,
    so in plain form)."""
    emb = cfg.embedder
    return {
        "method": asdict(cfg.method),
        "llm_model": cfg.llm.model,
        "embedder": {"model": emb.model, "dim": emb.dim, "query_prefix": emb.query_prefix},
        "dataset": dataset.name,
        "dataset_sha256": dataset.sha256,
        "seed": cfg.seed,
        "answer": {"max_tokens": cfg.answer.max_tokens, "temperature": cfg.answer.temperature},
        # the token budget only: runs of the other modes keep the fingerprint they were written with
        **({"budget": asdict(cfg.budget)} if cfg.budget.mode == "tokens" else {}),
        # errata change the gold: a run with them never resumes one without (nor with other errata)
        **({"errata_sha256": dataset.errata.sha256} if dataset.errata else {}),
    }


def run_metadata(cfg: BenchConfig, dataset: Dataset) -> dict[str, Any]:
    judge = cfg.judge
    return {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "git": git_info(),
        "config": plain_config(cfg),
        "system": system_settings(cfg.method),
        "packages": package_versions(),
        "dataset": dataset_metadata(dataset),
        "simulated": simulated.is_simulated(cfg),
        "models": {"llm": cfg.llm.model, "embedder": cfg.embedder.model,
                   "judge": (judge.model or cfg.llm).model if judge.enabled else None},
        "judge": judge_descriptor(cfg) if judge.enabled else None,  # pinned: model, prompt, sampling
    }


def open_harness(cfg: BenchConfig, dataset: Dataset, files: RunFiles) -> Harness:
    """Build the models the configuration needs (no chat model when nothing generates) and the system."""
    answering = cfg.answer.enabled
    cache = ({"cache_dir": str(files.dir / "embeddings")}
             if cfg.embed_cache and not cfg.embedder.cache_dir else {})
    embedder = instantiate(cfg.embedder, **cache)
    node = simulated.latency_node(cfg.llm)
    wanted = answering or cfg.method.needs_chat_model or node is not None
    source = (instantiate(cfg.llm) if wanted and (node is None or simulated.needs_source_model(node))
              else None)
    closing: list[Any] = []  # closed in this order: schedulers before their models
    sim = None
    try:
        if node is not None:  # every caller reaches the model through the latency server and the proxy
            sim = simulated.open_simulation(cfg.llm, source, files.call_log, files.dir, cfg.method.name)
        llm = sim.client if sim is not None else source
        client_log = sim.client_log if sim is not None else files.call_log
        judge = open_judge(cfg, llm, files, closing, client_log) if answering else None
        answerer = scheduler(llm, cfg.llm, client_log) if answering and llm is not None else None
        closing += [obj for obj in (answerer, sim, source, embedder) if obj is not None]
        models = Models(embedder, llm, files.call_log, client_log=client_log,
                        llm_base_url=sim.server_url if sim is not None else None)
        system = build_system(cfg.method, cfg.llm, cfg.embedder, models)
    except BaseException:
        opened = closing or [o for o in (sim, source, embedder) if o is not None]
        close_after_failure(obj.close for obj in opened)
        raise
    try:
        wandb = WandbLogger(cfg.wandb, files.dir, plain_config(cfg))
    except BaseException:
        close_after_failure([system.close, *(obj.close for obj in closing)])
        raise
    h = Harness(cfg, files, dataset, system, answerer, judge, wandb, closing=closing, embedder=embedder,
                simulation=sim, probe=ServerProbe.of(cfg.llm if wanted else None, cfg.embedder))
    try:
        h.tokens = token_counter(cfg.llm, source)
        files.note_invocation(embedder=embedder_settings(embedder),
                              system_runtime=dict(getattr(system, "runtime_settings", None) or {}),
                              token_counter=h.tokens.describe(),
                              llm_kv_cache=getattr(source, "kv_cache", None))
        restore(h)
    except BaseException:
        close_after_failure([h.close])
        raise
    return h


def open_judge(cfg: BenchConfig, llm: ChatModel | None, files: RunFiles, closing: list[Any],
               call_log: CallLog | None = None) -> Judge | None:
    """The run's judge, on the backbone model when its model config is the backbone's (its calls then
    go to `call_log`: the client log of a simulated run, whose proxy already logs them)."""
    judge_cfg = cfg.judge
    if not judge_cfg.enabled:
        return None
    model_cfg = judge_cfg.model or cfg.llm  # null: the backbone
    same = llm is not None and library_config(LLMConfig, model_cfg) == library_config(LLMConfig, cfg.llm)
    model = llm if same and llm is not None else instantiate(model_cfg)
    sched = scheduler(model, model_cfg, call_log if same and call_log is not None else files.call_log)
    closing += [sched] if same else [sched, model]
    return make_judge(asdict(judge_cfg), sched, "judge", model_cfg=model_cfg)


def restore(h: Harness) -> None:
    """Load what earlier invocations finished: records, the run judge's verdicts, builds (the run state
    keeps each as the row written, in the current layout)."""
    for record in h.files.records():
        h.records[record.key] = record.to_row()
    if h.judge is not None:
        h.judged.update(v.key for v in h.files.judgments(h.files.judgments_path)
                        if v.judge_id == h.judge.judge_id)
    h.builds = {iid: build.to_row() for iid, build in h.files.builds().items()}


# ---------------------------------------------------------------- the loop


def say_estimate(cfg: BenchConfig, dataset: Dataset, files: RunFiles, pending: int) -> None:
    """Print, before any work, what the run will do and about how long it will take."""
    built = files.builds()
    todo = [i for i in dataset.instances if i.instance_id not in built or built[i.instance_id].error]
    turns = sum(i.num_turns for i in todo)
    wanted = cfg.answer.enabled or cfg.method.needs_chat_model
    guess = estimate(cfg.llm.backend, turns, pending, list(built.values()), files.records(), wanted)
    print(guess.line(len(todo), turns, pending), file=sys.stderr, flush=True)


def run_benchmark(cfg: BenchConfig, run_dir: str | Path | None = None) -> dict[str, Any]:
    """Run (or resume) one configuration; return the run summary, also written as summary.md."""
    dataset = load_benchmark_dataset(cfg.dataset)  # a file that cannot be read stops here, before any work
    for failure in dataset.failures:
        log.error("instance %s not loaded: %s", failure.instance_id, failure.reason)
    files = RunFiles(run_dir or cfg.run_dir)
    files.open_run(run_metadata(cfg, dataset), fingerprint(cfg, dataset))
    files.note_invocation(dataset=dataset_metadata(dataset))  # this invocation's load: the summary reads it
    files.skipped_path.unlink(missing_ok=True)
    try:
        h = open_harness(cfg, dataset, files)
    except SystemUnavailable as exc:
        return skipped(files, cfg, str(exc))
    if cfg.task != "qa":
        try:
            return run_task(h, cfg.task)
        except SystemUnavailable as exc:
            return skipped(files, cfg, str(exc))
    progress = cfg.progress
    try:
        pending = sum(not h.finished((q.question_id, a)) for _, q in dataset.questions()
                      for a in range(h.attempts))
        say_estimate(cfg, dataset, files, pending)
        h.bar = tqdm(total=pending, desc="questions", unit="q", position=1, disable=not progress, leave=False)
        for instance in tqdm(dataset.instances, desc="instances", unit="inst", position=0,
                             disable=not progress):
            try:
                run_instance(h, instance)
            except Exception as exc:  # one bad instance never ends a run: recorded, and the run goes on
                stop = unavailable_cause(exc)
                if stop is not None:
                    raise stop from exc
                instance_failed(h, instance, exc)
        h.bar.close()
        summary = report.write_summary(files, report.RunLabels.of(cfg))
        files.note_invocation(input_kept=summary["build"].get("input"))
        write_report([files.dir], files.dir / PAGE_NAME,
                     f"MemForest report: {cfg.method.name} on {dataset.name}")
        h.wandb.log_summary(summary)
    finally:
        h.close()
    print(summary["markdown"])
    return summary


def instance_failed(h: Harness, instance: Instance, exc: Exception) -> None:
    """Record every unfinished question of `instance` as failed (a resumed run with retry_errors redoes
    them) and log why, with the traceback for errors that are not the library's own."""
    error = f"instance: {failure_text(exc)}"
    log.error("instance %s failed: %s", instance.instance_id, error,
              exc_info=not isinstance(exc, MemForestError))
    build = h.builds.get(instance.instance_id) or {}
    for question, attempts in pending_pairs(h, instance):
        for row in failed_rows(h, instance, question, attempts, error, build, failure_kind(exc)):
            keep_record(h, row)
    h.call_log.context = {}
    judge_instance(h, instance)  # failed records are judged wrong without a judge call, so they count


def skipped(files: RunFiles, cfg: BenchConfig, reason: str) -> dict[str, Any]:
    """A system that cannot run here: say why, in the log and in summary.md, and carry on (sweeps)."""
    log.warning("%s skipped: %s", cfg.method.name, reason)
    text = f"## {cfg.method.name} on {cfg.dataset.name}: skipped\n\n{reason}\n"
    files.summary_path.write_text(text, encoding="utf-8")
    files.skipped_path.write_text(reason + "\n", encoding="utf-8")
    files.close()
    print(text)
    return {"skipped": reason, "markdown": text}


def keep_record(h: Harness, row: dict[str, Any]) -> None:
    """Write one record (the row the question loop put together, read as a `QuestionRecord`); an attempt
    redone after a failure is judged anew (its last verdict counts)."""
    record = QuestionRecord.from_row(row)
    h.files.add_record(record)
    h.records[record.key] = record.to_row()
    h.judged.discard(record.key)
    h.bar.update(1)


def pending_pairs(h: Harness, instance: Instance) -> list[tuple[Question, list[int]]]:
    out = []
    for question in instance.questions:
        attempts = [a for a in range(h.attempts) if not h.finished((question.question_id, a))]
        if attempts:
            out.append((question, attempts))
    return out


def run_instance(h: Harness, instance: Instance) -> None:
    pending = pending_pairs(h, instance)
    if pending:
        h.check_servers()
        build = ensure_memory(h, instance)
        try:
            for question, attempts in pending:
                h.check_servers()
                if build.get("error"):
                    rows = failed_rows(h, instance, question, attempts, f"build: {build['error']}", build,
                                       build.get("error_kind", SYSTEM))
                else:
                    rows = ask(h, instance, question, attempts, build)
                for row in rows:
                    keep_record(h, row)
                h.wandb.log_records(rows)
        finally:
            h.system.close()
            h.call_log.context = {}
        if not h.cfg.keep_stores:
            h.files.remove_store(instance.instance_id)
    judge_instance(h, instance)


# ---------------------------------------------------------------- judging


def judge_instance(h: Harness, instance: Instance) -> None:
    if h.judge is None:
        return
    rows = [row for q in instance.questions for a in range(h.attempts)
            if (row := h.records.get((q.question_id, a))) is not None and "response" in row
            and (q.question_id, a) not in h.judged]
    if not rows:
        return
    h.call_log.context = {"instance": instance.instance_id, "phase": "judge"}
    for verdict in judge_rows(h.judge, rows):
        judged = JudgeVerdict.from_row(verdict.to_dict())
        h.files.add_judgment(judged)
        h.judged.add(judged.key)
    h.call_log.context = {}


