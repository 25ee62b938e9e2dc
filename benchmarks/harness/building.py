"""Building an instance's memory: reopen a completed store, copy one from another run
(`stores_from`), or build from an empty store, and write the build row (builds.jsonl, an
`analysis.records.BuildRow`). The run state keeps each build as the row written (`BuildRow.to_row`)."""

from __future__ import annotations

import logging
import shutil
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

from analysis.records import BuildRow, CallSummary, CallWaves
from benchmarks.datasets import Instance
from benchmarks.harness.infrastructure import failure_kind, stop_cause
from benchmarks.harness.results import RunFiles
from benchmarks.harness.simulation import is_simulated
from benchmarks.harness.state import Harness
from benchmarks.harness.systems import attach
from benchmarks.harness.waves import derived_waves
from memforest.errors import MemForestError
from memforest.llm.base import Embedder, embedder_settings
from memforest.llm.calllog import summarize

log = logging.getLogger(__name__)


def failure_text(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, MemForestError) else f"{type(exc).__name__}: {exc}"


def ensure_memory(h: Harness, instance: Instance) -> dict[str, Any]:
    """The instance's completed build, reopened; else a fresh build from an empty store."""
    iid = instance.instance_id
    prior = h.builds.get(iid)
    if (prior is not None and not prior.get("error") and h.files.store_complete(iid, str(prior["build_id"]))
            and attach(h.system, iid, h.files.store_dir(iid), instance.sessions)):
        return prior
    copied = copy_store(h, instance) if h.cfg.stores_from else None
    if copied is not None:
        return copied
    return build_memory(h, instance, h.files.clear_store(iid))


def copy_store(h: Harness, instance: Instance) -> dict[str, Any] | None:
    """The completed store of `instance` in the `stores_from` run, copied into this run and reopened;
    None when that run has no completed build of it (this run then builds its own)."""
    iid = instance.instance_id
    source = RunFiles(str(h.cfg.stores_from), create=False)
    if source.dir.resolve() == h.files.dir.resolve() or not source.builds_path.exists():
        return None
    prior = source.builds().get(iid)
    if prior is None or prior.error or not source.store_complete(iid, str(prior.build_id)):
        return None
    target = h.files.store_dir(iid)
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source.store_dir(iid), target)
    if not attach(h.system, iid, target, instance.sessions):
        return None
    build = replace(prior, reused_from=str(source.dir.resolve()))
    h.files.add_build(build)
    h.builds[iid] = build.to_row()
    return h.builds[iid]


def build_memory(h: Harness, instance: Instance, workdir: Path) -> dict[str, Any]:
    iid = instance.instance_id
    h.call_log.context = {"instance": iid, "phase": "build"}
    mark = len(h.call_log)
    h.system.reset(iid, workdir)
    cache_before = embed_cache_counts(h.embedder)
    start, cpu_start = time.perf_counter(), time.process_time()
    error, failure, stats = None, None, {}
    try:
        stats = h.system.ingest(instance.sessions)
    except Exception as exc:  # recorded with the build; the instance's questions are then marked failed
        failure = exc
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    calls = [r for r in h.call_log.since(mark) if r.tags.get("instance") == iid]
    h.call_log.context = {}
    stop = stop_cause(failure, calls)
    if stop is not None:  # no build row: the store stays incomplete, and the next invocation rebuilds it
        raise stop from failure
    if failure is not None:
        error = failure_text(failure)
        log.error("build of %s failed: %s", iid, error, exc_info=not isinstance(failure, MemForestError))
    embedder = None
    if h.embedder is not None:
        after = embed_cache_counts(h.embedder)
        embedder = {**embedder_settings(h.embedder),
                    **{k: v - cache_before.get(k, 0) for k, v in after.items()}}
    build = BuildRow(
        build_id=uuid.uuid4().hex, instance_id=iid, method=h.cfg.method.name, dataset=h.dataset.name,
        sessions=len(instance.sessions), turns=instance.num_turns, build_seconds=round(seconds, 4),
        build_cpu_seconds=round(cpu_seconds, 4), turns_per_second=round(instance.num_turns / seconds, 3),
        llm=CallSummary.from_row(summarize(calls)), call_waves=CallWaves.from_row(derived_waves(calls)),
        simulated=is_simulated(h.cfg), system=stats, error=error,
        error_kind=failure_kind(failure) if failure is not None else None,
        finished=time.strftime("%Y-%m-%dT%H:%M:%S%z"), embedder=embedder)
    if error is None:
        h.files.mark_store_complete(iid, str(build.build_id))
    h.files.add_build(build)
    row = h.builds[iid] = build.to_row()
    h.wandb.log_build(row)
    return row


def embed_cache_counts(embedder: Embedder | None) -> dict[str, int]:
    """Cumulative hits and misses of a caching embedder; empty for any other."""
    counts = getattr(embedder, "counts", None)
    return dict(counts()) if callable(counts) else {}
