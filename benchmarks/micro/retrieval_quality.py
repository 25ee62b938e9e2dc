"""Retrieval quality and cost without the real files: the generator-free retrieval run
(`memforest-bench experiment=retrieval`) of each method over a synthetic LongMemEval-S-like file
(evidence among near misses, sessions repeated across haystacks, long assistant turns, questions worded
unlike the evidence) and a LoCoMo-like one (two speakers, dia ids).

Each (method, dataset) is one real benchmark run in a subprocess; the suite reads its records and
builds. LongMemEval: session recall_any@k over distinct sessions in rank order. LoCoMo: turn recall_any
and recall_all within the first N distinct turns (equal turn budget for every method). Time: build and
query seconds per instance from the run, CPU seconds of the run's process per instance (less sensitive to
other load on the machine than wall time)."""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from analysis.rows import ranked_ids
from benchmarks.datasets.synthetic import write_locomo_like, write_longmemeval_s_sized

METHODS = ("memforest_sessions", "flat_rag", "flat_sessions")
SESSION_KS = (1, 3, 5, 10)
TURN_BUDGETS = (5, 10)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_method(method: str, dataset: str, path: Path, out: Path, overrides: list[str]) -> dict[str, Any]:
    """One `memforest-bench experiment=retrieval` run; its records, builds and cost."""
    cmd = [sys.executable, "-m", "benchmarks.harness.app", "experiment=retrieval", f"method={method}",
           f"dataset={dataset}", f"dataset.path={path}", f"output_root={out}", "progress=false", *overrides]
    cpu, wall = _children_cpu(), time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    cpu, wall = _children_cpu() - cpu, time.perf_counter() - wall
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    (run_dir,) = {p.parent for p in (out / "retrieval" / dataset / method).rglob("records.jsonl")}
    records = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines() if line]
    builds = [json.loads(line) for line in (run_dir / "builds.jsonl").read_text().splitlines() if line]
    n = max(1, len(builds))
    cache = [b.get("embedder", {}) for b in builds]
    return {"records": records, "instances": len(builds), "wall_s_per_instance": round(wall / n, 3),
            "cpu_s_per_instance": round(cpu / n, 3),
            "build_s_per_instance": round(sum(b["build_seconds"] for b in builds) / n, 3),
            "build_cpu_s_per_instance": round(sum(b.get("build_cpu_seconds", 0.0) for b in builds) / n, 3),
            "query_s_mean": round(sum(r["query_seconds"] for r in records) / max(1, len(records)), 4),
            "cache_hits": sum(c.get("cache_hits", 0) for c in cache),
            "cache_misses": sum(c.get("cache_misses", 0) for c in cache),
            "embedder": {k: v for k, v in (cache[0] if cache else {}).items() if not k.startswith("cache")}}


def session_recall(records: list[dict[str, Any]]) -> dict[str, float]:
    """Mean recall_any@k over non-abstention questions: any gold session among the first k distinct
    sessions of the run's ranking (`analysis.rows.ranked_ids`: past the served evidence where it goes on)."""
    rows = [r for r in records if not r.get("abstention") and r.get("evidence_sessions")]
    ranked = [ranked_ids(r, "session") or [] for r in rows]
    out = {f"recall_any@{k}": _mean([bool(set(ids[:k]) & set(r["evidence_sessions"]))
                                     for ids, r in zip(ranked, rows)]) for k in SESSION_KS}
    return {**out, "questions": len(rows)}


def turn_recall(records: list[dict[str, Any]]) -> dict[str, float]:
    """Mean turn recall_any and recall_all within the first N distinct retrieved turns."""
    rows = [r for r in records if r.get("evidence_turns") and "retrieved_turn_ids" in r]
    out: dict[str, float] = {}
    for n in TURN_BUDGETS:
        top = [set(r["retrieved_turn_ids"][:n]) for r in rows]
        out[f"any@{n}turns"] = _mean([bool(t & set(r["evidence_turns"])) for t, r in zip(top, rows)])
        out[f"all@{n}turns"] = _mean([set(r["evidence_turns"]) <= t for t, r in zip(top, rows)])
    return {**out, "questions": len(rows)}


def _mean(flags: list[bool]) -> float:
    return round(100.0 * sum(flags) / len(flags), 1) if flags else 0.0


def measure(out: Path, questions: int, sessions: int, conversations: int, methods: list[str],
            overrides: list[str]) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    lme = write_longmemeval_s_sized(out / "longmemeval_s_like.json", questions, sessions)
    locomo = write_locomo_like(out / "locomo_like.json", conversations)
    result: dict[str, Any] = {"questions": questions, "sessions": sessions, "conversations": conversations}
    for method in methods:
        row = run_method(method, "longmemeval_s", lme, out / "runs", overrides)
        loc = run_method(method, "locomo", locomo, out / "runs", overrides)
        result[method] = {
            "longmemeval_s": {**session_recall(row.pop("records")), **row},
            "locomo": {**turn_recall(loc.pop("records")), **loc},
        }
    return result


def _print(result: dict[str, Any], methods: list[str]) -> None:
    print(f"retrieval quality on synthetic files ({result['questions']} LongMemEval-like questions, "
          f"{result['conversations']} LoCoMo-like conversations)")
    head = ["method", *[f"S@{k}" for k in SESSION_KS],
            *[f"{m}@{n}T" for n in TURN_BUDGETS for m in ("any", "all")], "cpu s/inst", "wall s/inst",
            "cache hit"]
    print(" ".join(f"{h:>12}" for h in head))
    for m in methods:
        s, t = result[m]["longmemeval_s"], result[m]["locomo"]
        hits = s["cache_hits"] / max(1, s["cache_hits"] + s["cache_misses"])
        cells = [m, *[s[f"recall_any@{k}"] for k in SESSION_KS],
                 *[t[f"{a}@{n}turns"] for n in TURN_BUDGETS for a in ("any", "all")],
                 s["cpu_s_per_instance"], s["wall_s_per_instance"], f"{100 * hits:.0f}%"]
        print(" ".join(f"{c:>12}" for c in cells))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--questions", type=int, default=20,
                        help="LongMemEval-like questions (one haystack each)")
    parser.add_argument("--sessions", type=int, default=48, help="sessions per haystack")
    parser.add_argument("--conversations", type=int, default=2, help="LoCoMo-like conversations")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--out", help="keep the files and runs here (default: a temporary directory)")
    parser.add_argument("-o", "--override", action="append", default=[], help="a memforest-bench override")
    args = parser.parse_args(argv)
    methods = args.methods.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        result = measure(Path(args.out or tmp), args.questions, args.sessions, args.conversations, methods,
                         args.override)
    _print(result, methods)
    return result


if __name__ == "__main__":
    main()
