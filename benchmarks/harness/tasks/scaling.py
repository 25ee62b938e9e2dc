"""Mechanism scaling: how many summary calls batching saves, and how level-parallel refresh scales.

Options (`task_options`): `parallelism` (default [1, 2, 4, 8, 16, 32, 64, 128, 256]). For each
dataset instance the run's MemForest method builds the memory once (one ingest: dirty paths batched,
one refresh), then:

- eager vs batched: every tree of the built memory is grown again, structurally (MemTree only, no
  model), by inserting its leaves in time order; `eager_calls` counts the internal nodes that would
  be re-summarised if the tree were refreshed after every insert, `batched_calls` those of one
  refresh after all inserts (what the write path does). `refresh_calls` is the number of summary
  calls the real build made (it also counts trees that merged or were back-filled).
- level-parallel refresh: the build's summary calls (stage `summarize`, with their recorded levels
  and latencies) are list-scheduled level by level on P parallel slots (a level starts when the one
  below has finished, as in the write path); `refresh_s[P]` is the resulting time and `speedup[P]`
  is refresh_s[1] / refresh_s[P]. `measured_refresh_wall_s` is the wall time the build's refresh
  actually took at the run's concurrency.

One JSON row per instance in scaling.jsonl: instance_id, leaves, trees, eager_calls, batched_calls,
eager_over_batched, refresh_calls, refresh_call_seconds, measured_refresh_wall_s, refresh_s {P: s},
speedup {P: x}, concurrency, simulated.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from benchmarks.harness.results import JsonlWriter
from benchmarks.harness.simulation import is_simulated
from benchmarks.harness.state import Harness
from benchmarks.harness.tasks import option
from benchmarks.harness.tasks.common import open_forest, payload
from memforest.llm.calllog import CallRecord
from memforest.state import UserState
from memforest.trees.memtree import MemTree

FILE = "scaling.jsonl"
PARALLELISM = [1, 2, 4, 8, 16, 32, 64, 128, 256]


def eager_and_batched(state: UserState) -> dict[str, int]:
    """Internal-node refreshes of every tree grown leaf by leaf: refreshed after each insert vs once."""
    eager = batched = leaves = 0
    for info in state.trees.values():
        tree = MemTree(info.tree_id, max(3, info.tree.fanout))
        items = sorted(info.tree.items(), key=lambda it: (it[1], it[0]))
        for item, t in items:
            tree.insert(item, t)
            eager += sum(len(ids) for level, ids in tree.take_dirty().items() if level > 0)
        leaves += len(items)
        again = MemTree(info.tree_id, max(3, info.tree.fanout))
        for item, t in items:
            again.insert(item, t)
        batched += sum(len(ids) for level, ids in again.take_dirty().items() if level > 0)
    return {"leaves": leaves, "trees": len(state.trees), "eager_calls": eager, "batched_calls": batched}


def level_parallel_times(calls: Sequence[CallRecord], parallelism: Sequence[int]) -> dict[int, float]:
    """Refresh time on P slots: per level, calls are list-scheduled (longest first) on P workers."""
    by_level: dict[int, list[float]] = defaultdict(list)
    for c in calls:
        by_level[c.level].append(c.latency)
    out = {}
    for p in parallelism:
        total = 0.0
        for level in sorted(by_level):
            slots = [0.0] * min(p, len(by_level[level]))
            for latency in sorted(by_level[level], reverse=True):
                heapq.heapreplace(slots, slots[0] + latency)
            total += max(slots, default=0.0)
        out[p] = round(total, 3)
    return out


def run_scaling(h: Harness) -> dict[str, Any]:
    parallelism = [int(p) for p in option(h.cfg.task_options, "parallelism", PARALLELISM)]
    (h.files.dir / FILE).write_text("", encoding="utf-8")
    out = JsonlWriter(h.files.dir / FILE)
    rows = []
    try:
        for k, instance in enumerate(h.dataset.instances):
            store = h.files.clear_store(instance.instance_id)
            with open_forest(h.system, store / "store") as forest:
                h.call_log.context = {"instance": instance.instance_id, "phase": "build"}
                mark = len(forest.log)
                report = forest.ingest_sessions("user", payload(instance, f"i{k}-"))
                calls = [c for c in forest.log.since(mark) if c.stage == "summarize"]
                state = forest.snapshot("user").state
                structure = eager_and_batched(state)
                times = level_parallel_times(calls, parallelism)
                base = times.get(1) or 0.0
                row = {"instance_id": instance.instance_id, **structure,
                       "eager_over_batched": round(structure["eager_calls"] / structure["batched_calls"], 3)
                       if structure["batched_calls"] else None,
                       "refresh_calls": len(calls),
                       "refresh_call_seconds": round(sum(c.latency for c in calls), 3),
                       "measured_refresh_wall_s": report.timings.get("refresh"),
                       "refresh_s": times,
                       "speedup": {p: round(base / t, 3) if t else None for p, t in times.items()},
                       "concurrency": forest.config.llm.concurrency, "simulated": is_simulated(h.cfg)}
                out.write(row)
                rows.append(row)
    finally:
        h.call_log.context = {}
        out.close()
    return {"task": "scaling", "rows": rows, "markdown": markdown(rows, parallelism)}


def markdown(rows: list[dict[str, Any]], parallelism: Sequence[int]) -> str:
    head = ["instance", "leaves", "eager calls", "batched calls", "eager / batched", "refresh calls",
            *[f"speedup P={p}" for p in parallelism]]
    lines = ["## mechanism scaling: eager vs batched refresh; level-parallel refresh speedup", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["instance_id"], r["leaves"], r["eager_calls"], r["batched_calls"], r["eager_over_batched"],
                 r["refresh_calls"], *[r["speedup"].get(p) for p in parallelism]]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"
