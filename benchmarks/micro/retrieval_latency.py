"""Retrieval microbenchmark in the seed paper's shape: compose 1, 2, 4 and 8 synthetic forests by
merging, then time top-10 embedding browse (recall + browse + assembly) and exact RootIndex recall,
excluding the query embedding. Then the query latency of a real memory, per stage with the question's
embedding (`query_latency`: one LongMemEval-S instance, with the sentence vectors stored by the write
and with them embedded at query time)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.micro.query_latency import measure_instance, table
from benchmarks.micro.synthetic_forest import build_state
from memforest.config import EmbedderConfig, MemForestConfig
from memforest.index.forest_index import ForestIndex
from memforest.llm.testing import HashEmbedder
from memforest.merge import merge_into
from memforest.refresh import refresh
from memforest.retrieval.assemble import assemble, temporal_neighbours
from memforest.retrieval.browse import embed_browse
from memforest.retrieval.recall import recall_trees
from memforest.state import ChangeSet, UserState
from memforest.versions.snapshot import Snapshot


def compose(n: int, dim: int = 384, cfg: MemForestConfig | None = None) -> UserState:
    """One state holding `n` synthetic forests, merged without a generator."""
    cfg = cfg or MemForestConfig()
    target = UserState("composed", embedder="synthetic", dim=dim)
    ch = ChangeSet()
    for i in range(n):
        merge_into(target, build_state(f"f{i}", seed=i, dim=dim, cfg=cfg), cfg, None, ch, {})
    refresh(target, set(ch.trees), None, HashEmbedder(dim), cfg.tree, ch, False, {})
    return target


def _percentiles(samples: list[float]) -> dict[str, float]:
    ms = np.asarray(samples) * 1000.0
    return {"p50_ms": round(float(np.percentile(ms, 50)), 3),
            "p95_ms": round(float(np.percentile(ms, 95)), 3)}


def measure(n: int, queries: int = 300, seed: int = 0, cfg: MemForestConfig | None = None) -> dict[str, Any]:
    cfg = cfg or MemForestConfig()
    state = compose(n, cfg=cfg)
    snap = Snapshot(state, ForestIndex.build(state, state.dim))
    _ = snap.fact_trees  # built once per snapshot, like a served snapshot
    rng = np.random.default_rng(seed)
    facts = list(state.fact_vecs.values())
    qs = [facts[i] + 0.3 * rng.standard_normal(state.dim).astype(np.float32)
          for i in rng.integers(len(facts), size=queries)]
    qs = [(q / np.linalg.norm(q)).astype(np.float32) for q in qs]
    browse, roots = [], []
    for q in qs:
        t = time.perf_counter()
        recalled = recall_trees(snap, q, cfg.query)
        hits, _ = embed_browse(snap, q, [r.tree_id for r in recalled], cfg.query.beam)
        assemble(snap, hits, temporal_neighbours(snap, hits, "none", q), cfg.query.final_units, "none")
        browse.append(time.perf_counter() - t)
        t = time.perf_counter()
        snap.index.roots.search(q, cfg.query.top_trees)
        roots.append(time.perf_counter() - t)
    return {"forests": n, "facts": len(state.facts), "trees": len(state.trees),
            "nodes": sum(len(i.tree.nodes) for i in state.trees.values()),
            "browse": _percentiles(browse), "root_recall": _percentiles(roots)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--forests", default="1,2,4,8",
                        help="comma-separated numbers of composed forests ('' for none)")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--data", type=Path, default=None,
                        help="a LongMemEval-format file (default: the real slice in ../shared/data when "
                             "present, else a synthetic LongMemEval-S-like one)")
    parser.add_argument("--instance", type=int, default=0, help="which instance of the file to build")
    parser.add_argument("--questions", type=int, default=None, help="ask at most this many of the file's")
    parser.add_argument("--embedder", default="sentence_transformers",
                        help="embedder backend of the built memory (hash: no model, for a smoke run)")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch threads of the embedder on the CPU (0: the process's torch "
                             "setting, every physical core by default; 1 on a busy machine)")
    parser.add_argument("--no-instance", dest="instance_run", action="store_false",
                        help="time the synthetic forests only")
    args = parser.parse_args(argv)
    forests = [measure(int(n), queries=args.queries) for n in args.forests.split(",") if n]
    _print_forests(forests)
    instance = None
    if args.instance_run:
        print("\nquery latency of a built memory, retrieval-only (stored: the sentence vectors the write "
              "stored; query-time: every long cell's sentences embedded by the query)")
        embedder = EmbedderConfig(backend=args.embedder, threads=args.threads)
        instance = measure_instance(args.data, args.instance, args.questions, embedder)
        print(table(instance))
    return {"forests": forests, "instance": instance}


def _print_forests(rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    print("retrieval microbenchmark (top-10 embedding browse and RootIndex recall; query embedding excluded)")
    print(f"{'forests':>7} {'facts':>7} {'trees':>6} {'browse p50 ms':>14} {'browse p95 ms':>14} "
          f"{'root p50 ms':>12} {'root p95 ms':>12}")
    for r in rows:
        print(f"{r['forests']:>7} {r['facts']:>7} {r['trees']:>6} {r['browse']['p50_ms']:>14} "
              f"{r['browse']['p95_ms']:>14} {r['root_recall']['p50_ms']:>12} "
              f"{r['root_recall']['p95_ms']:>12}")


if __name__ == "__main__":
    main()
