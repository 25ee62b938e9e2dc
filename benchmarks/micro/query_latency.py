"""Query latency of a real memory: one LongMemEval-S instance built with the configured embedder (the
packaged MiniLM by default) on the generator-free write path, then asked every question of the file
retrieval-only, as the harness asks them (`rank_sessions` past the served evidence). Each question is
asked twice in turn: with the sentence vectors stored with the cells, and with every long cell's
sentences embedded at query time (the path of a store written without them); p50 and p95 per stage of
the query's own `latency` trace and of the whole call, and how many rankings the two paths agree on."""

from __future__ import annotations

import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from baselines.base import RANKING_SESSIONS
from baselines.memforest_method.system import StoredSessions
from benchmarks.datasets.longmemeval import load_longmemeval
from benchmarks.datasets.synthetic import write_longmemeval_s_sized
from memforest.api import MemForest
from memforest.config import EmbedderConfig, MemForestConfig, TreeConfig
from memforest.llm.base import Embedder
from memforest.llm.factory import build_embedder
from memforest.retrieval.query import retrieve

REAL_FILE = Path(__file__).resolve().parents[3] / "shared" / "data" / "longmemeval_s_slice.json.xz"
PATHS = {"stored": True, "query_time": False}  # name -> `retrieve(stored_sentences=...)`


def data_file(path: Path | None, work: Path) -> Path:
    """`path`, else the real slice when present, else a synthetic LongMemEval-S-like file."""
    if path is not None:
        return path
    if REAL_FILE.exists():
        return REAL_FILE
    return write_longmemeval_s_sized(work / "longmemeval_s_synthetic.json", questions=20)


def percentiles(samples: list[float]) -> dict[str, float]:
    ms = np.asarray(samples) * 1000.0
    return {f"p{q}_ms": round(float(np.percentile(ms, q)), 2) for q in (50, 95)}


def measure_instance(path: Path | None = None, instance: int = 0, questions: int | None = None,
                     embedder: EmbedderConfig | None = None) -> dict[str, Any]:
    """Build instance `instance` of the file and time its questions' retrieval on both paths."""
    with tempfile.TemporaryDirectory(prefix="memforest-latency-") as work:
        source = data_file(path, Path(work))
        data = load_longmemeval(source)
        built = data.instances[instance]
        asked = [(q.question, q.question_date) for inst in data.instances for q in inst.questions][:questions]
        model = build_embedder(embedder or EmbedderConfig())
        forest = MemForest(Path(work) / "store", MemForestConfig(tree=TreeConfig(summary_mode="extractive")),
                           embedder=model, generate=False)
        try:
            t = time.perf_counter()
            report = forest.ingest_sessions("u", StoredSessions().payload(built.sessions))
            ingest_s = time.perf_counter() - t
            result = _time_queries(forest, model, asked)
        finally:
            forest.close()
    return {"file": source.name, "instance": built.instance_id, "sessions": report.sessions,
            "cells": report.cells, "ingest_s": round(ingest_s, 2), "embedder": model.name, **result}


def _time_queries(forest: MemForest, model: Embedder, asked: list[tuple[str, Any]]) -> dict[str, Any]:
    cfg = replace(forest.config.query, rank_sessions=RANKING_SESSIONS)
    snap = forest.snapshot("u")
    stages: dict[str, dict[str, list[float]]] = {name: {} for name in PATHS}
    same = 0
    for n, (question, when) in enumerate([asked[0], *asked]):  # the first one twice: a warm-up
        date = when.isoformat() if when is not None else "2024-01-01T00:00"
        ranked = []
        for name in (list(PATHS) if n % 2 else list(PATHS)[::-1]):  # each path first every other time
            t = time.perf_counter()
            evidence, trace, beyond = retrieve(snap, question, date, cfg, model, None, {},
                                               forest.config.tree.leaf_words, stored_sentences=PATHS[name])
            total = time.perf_counter() - t
            ranked.append([(e.kind, e.id) for e in [*evidence, *beyond]])
            if n:
                for stage, seconds in {**trace["latency"], "total": total}.items():
                    stages[name].setdefault(stage, []).append(seconds)
        same += n > 0 and ranked[0] == ranked[1]
    return {"questions": len(asked), "same_ranking": same,
            "latency": {name: {stage: percentiles(s) for stage, s in by.items()}
                        for name, by in stages.items()}}


def table(result: dict[str, Any]) -> str:
    """The p50/p95 per stage of both paths, one line per stage."""
    lat = result["latency"]
    lines = [f"{result['file']} instance {result['instance']}: {result['sessions']} sessions, "
             f"{result['cells']} cells, built in {result['ingest_s']} s with {result['embedder']}; "
             f"{result['questions']} questions, same ranking on both paths for {result['same_ranking']}",
             f"{'stage':>10} {'stored p50':>11} {'stored p95':>11} {'query-time p50':>15} "
             f"{'query-time p95':>15}   (ms)"]
    for stage in lat["stored"]:
        a, b = lat["stored"][stage], lat["query_time"].get(stage, {"p50_ms": "-", "p95_ms": "-"})
        lines.append(f"{stage:>10} {a['p50_ms']:>11} {a['p95_ms']:>11} {b['p50_ms']:>15} {b['p95_ms']:>15}")
    return "\n".join(lines)
