"""Migration: merge N materialised forests versus writing all their sessions into one forest.

Options (`task_options`): `max_n` (default 8; capped by the dataset's instances). Instance k of the
dataset becomes source forest `src<k>` (its build is timed), and its sessions are also appended, in
order, to one `sequential` forest; after instance N is written, the first N sources are merged into
`merged<N>`. One JSON row per N in migration.jsonl:

    n, sources_build_s (sum of the N source builds), sequential_s (writing all N instances' sessions
    into one forest, cumulative), merge_s, speedup (sequential_s / merge_s), merge_llm_calls,
    sequential_llm_calls, facts_sequential, facts_merged, trees_sequential, trees_merged,
    facts_ratio, trees_ratio (merged / sequential), simulated
"""

from __future__ import annotations

import logging
import time
from typing import Any

from benchmarks.harness.results import JsonlWriter
from benchmarks.harness.simulation import is_simulated
from benchmarks.harness.state import Harness
from benchmarks.harness.tasks import option
from benchmarks.harness.tasks.common import open_forest, payload

log = logging.getLogger(__name__)
FILE = "migration.jsonl"


def run_migration(h: Harness) -> dict[str, Any]:
    max_n = min(int(option(h.cfg.task_options, "max_n", 8)), len(h.dataset.instances))
    rows: list[dict[str, Any]] = []
    (h.files.dir / FILE).write_text("", encoding="utf-8")  # a rerun measures again from scratch
    out = JsonlWriter(h.files.dir / FILE)
    store = h.files.clear_store("migration")
    simulated = is_simulated(h.cfg)
    try:
        with open_forest(h.system, store / "store") as forest:
            sequential_s = sources_s = 0.0
            sequential_calls = 0
            for k, instance in enumerate(h.dataset.instances[:max_n]):
                sessions = payload(instance, f"i{k}-")
                h.call_log.context = {"instance": instance.instance_id, "phase": "source"}
                t = time.perf_counter()
                forest.ingest_sessions(f"src{k}", sessions)
                sources_s += time.perf_counter() - t
                h.call_log.context = {"instance": instance.instance_id, "phase": "sequential"}
                mark, t = len(forest.log), time.perf_counter()
                forest.ingest_sessions("sequential", sessions)
                sequential_s += time.perf_counter() - t
                sequential_calls += len(forest.log) - mark
                n = k + 1
                h.call_log.context = {"phase": "merge", "n": n}
                mark, t = len(forest.log), time.perf_counter()
                forest.merge([f"src{i}" for i in range(n)], f"merged{n}")
                merge_s = time.perf_counter() - t
                seq, mer = forest.snapshot("sequential").state, forest.snapshot(f"merged{n}").state
                row = {"n": n, "sources_build_s": round(sources_s, 3), "sequential_s": round(sequential_s, 3),
                       "merge_s": round(merge_s, 3),
                       "speedup": round(sequential_s / merge_s, 3) if merge_s else None,
                       "merge_llm_calls": len(forest.log) - mark, "sequential_llm_calls": sequential_calls,
                       "facts_sequential": len(seq.facts), "facts_merged": len(mer.facts),
                       "trees_sequential": len(seq.trees), "trees_merged": len(mer.trees),
                       "facts_ratio": _ratio(len(mer.facts), len(seq.facts)),
                       "trees_ratio": _ratio(len(mer.trees), len(seq.trees)), "simulated": simulated}
                out.write(row)
                rows.append(row)
                log.info("migration N=%d: sequential %.1f s, merge %.1f s", n, sequential_s, merge_s)
    finally:
        h.call_log.context = {}
        out.close()
    return {"task": "migration", "rows": rows, "markdown": markdown(rows, simulated)}


def _ratio(a: int, b: int) -> float | None:
    return round(a / b, 4) if b else None


def markdown(rows: list[dict[str, Any]], simulated: bool) -> str:
    head = ["N", "sequential s", "merge s", "speedup", "merge LLM calls", "facts merged / sequential",
            "trees merged / sequential"]
    lines = ["## migration: merge N forests vs sequential write" + (" [simulated]" if simulated else ""), "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        lines.append(f"| {r['n']} | {r['sequential_s']} | {r['merge_s']} | {r['speedup']} | "
                     f"{r['merge_llm_calls']} | {r['facts_merged']} / {r['facts_sequential']} | "
                     f"{r['trees_merged']} / {r['trees_sequential']} |")
    return "\n".join(lines) + "\n"
