"""Per-operation cost against store size: one user's stream of LongMemEval-format sessions, one
session per call, with the scripted model and the hashing embedder. Extraction gives a real memory's
proportions (`profile_responder`: 2-5 facts per cell, most of them new, some restating the user's
profile, people who get entity trees, threads that form scenes).

Every base size (stored sessions) is loaded in one process; then, round after round, each size in
turn gets one ingest, delete, correct and query-after-write, timed with the report's stage breakdown
(side by side, so a drift in the machine's speed reaches every size alike). `mean_s` is the memory's
own cost: the wall time less the time spent inside model calls (`ModelClock`: the embedder's and the
chat model's, which the write path makes O(log N) of through refreshed ancestors); `wall_mean_s` and
`model_mean_s` are reported beside it, with the process's CPU time (`cpu_mean_s`, model calls
included) and what it read from the disk, not the page cache (`disk_read_kib`): what a store larger
than the page cache adds to the wall time (`--warm-rounds N`: after the measured rounds, each store's
cache files are read once and N more rounds are reported apart, as `warm`; `--cold-pages`: each
measured round starts with the store's files out of the page cache, `page_cache`). Opening the store and the
first query after it are once per process and reported apart, wall and CPU seconds (`load_s`,
`load_cpu_s`, `first_query_s`, `first_query_cpu_s`: CPU time shows what a shared machine's load adds
to the wall time), with what each read from the disk (`load_read_mib`, `first_query_read_mib`). A large
memory's heap is collapsed into huge pages in the background after the open (`memforest.resident.hugepages`),
after its large entity and scene trees are read (`warm_tree_leaves`, `warm_tree_share`); operations are
timed once that is done (`settle_s`: how much longer it ran after the first query).
The store is opened as a restarted process finds it: with the caches a previous process left beside
it (a base store is opened, queried and closed once after it is built; `memforest.versions.caches`), so the
first query maps the lexical index instead of building it and the open takes what it needs of the
trees it does not read (`MemForestConfig.lazy_trees`; `--eager-trees` reads them all, as before) from
the tree rows cache. Memory is the resident set's growth over the open and the first query, per stored
session (`rss_bytes_per_session`; of it, pages mapped from files, such as the cache files' pages a
query read, which the kernel shares with the page cache and may drop: `rss_file_bytes_per_session`;
once the background work is done: `settled_rss_bytes_per_session`);
`--trace-memory` adds the tracemalloc peak of the open (`peak_bytes_per_session`; tracing slows the
open several times, so the open is then not timed apart from it). Partitioned search is compared
with exact search (`search`). `refreshed_nodes` counts the tree nodes each write refreshed (leaves
placed and the summaries on their paths to the roots); the `*_per_refreshed_node` ratios divide that
O(M log N) term out. Base stores are cached under results/bench/ keyed by parameters; one that is
missing is built in a child process, so the measuring process's heap holds only what its opens make."""

from __future__ import annotations

import argparse
import gc
import os
import random
import resource
import shutil
import statistics
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.micro.incremental_stores import (
    DAILY_UNTIL,
    EXTRACTORS,
    QUESTION,
    USER,
    ModelClock,
    base_store,
    base_store_apart,
    copy_base,
    longmemeval_sessions,
    open_forest,
    session_hours,
)
from benchmarks.micro.page_cache import drop_pages
from memforest.api import MemForest
from memforest.resident import vector_table

__all__ = ["DAILY_UNTIL", "base_store", "session_hours"]  # re-exported


def usage() -> tuple[float, int]:
    """(CPU seconds, bytes read from the disk) of this process so far, all its threads: the page
    cache's hits are not reads (`getrusage` counts blocks of 512 bytes); zero reads where the
    platform does not count them."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime, 512 * ru.ru_inblock


def resident_bytes() -> int:
    """The process's resident set size (Linux `/proc/self/statm`; 0 where there is none)."""
    return resident_parts()[0]


def resident_parts() -> tuple[int, int]:
    """The process's resident set size and the part of it that maps files (the page cache's pages of
    the cache files and libraries it reads; `/proc/self/statm`, (0, 0) where there is none)."""
    try:
        fields = Path("/proc/self/statm").read_text().split()
        pages, shared = int(fields[1]), int(fields[2])
    except (OSError, IndexError, ValueError):
        return 0, 0
    size = os.sysconf("SC_PAGE_SIZE")
    return pages * size, shared * size


def search_overlap(forest: MemForest, snap: Any, samples: int = 50, seed: int = 0) -> dict[str, Any]:
    """How close a table's search is to an exact scan once it is partitioned (past its exact-search
    bound): for stored texts of its kind as queries (fact texts for the roots table), the share of the
    returned top k scoring at least the exact k-th score (ties count as found), and the rows scored
    per search. Tables still searched exactly are reported as exact."""
    rng = random.Random(seed)
    st = snap.state
    texts = {"facts": [st.facts[f].text for f in rng.sample(sorted(st.facts), min(samples, len(st.facts)))],
             "cells": [st.cells[c].text for c in rng.sample(sorted(st.cells), min(samples, len(st.cells)))]}
    texts["roots"] = texts["facts"]  # tree recall: which trees' roots are nearest a fact's text
    out: dict[str, Any] = {}
    for name in ("cells", "facts", "roots"):
        queries = forest.embedder.embed(texts[name], "query")
        table = getattr(snap.index, name)
        if table.partitions is None:
            out[name] = {"rows": len(table), "search": "exact"}
            continue
        live = table.live_rows()
        row: dict[str, Any] = {"rows": len(table), "partitions": len(table.partitions)}
        for k in (10, 200) if name != "roots" else (10,):  # recall takes `top_trees` (10) trees
            shares, scored = [], []
            for q in queries:
                kth = np.sort(table.row_scores(live, q))[-k]
                ids, scores = table.search(q, k)
                shares.append(float(np.mean(scores >= kth - 1e-6)))
                scored.append(len(table.candidate_scores(q, vector_table.probe_size(k))[0]))
            row[f"top{k}_found"] = round(statistics.mean(shares), 4)
            row[f"top{k}_rows_scored"] = round(statistics.mean(scored))
        out[name] = row
    return out


def dirty_path(out: Any) -> int:
    """Tree nodes an ingest, delete or correct refreshed: leaves placed plus summaries recomputed on
    their paths to the roots (the O(M log N) the refresh is designed to cost)."""
    if isinstance(out, dict):
        if "ingest" in out:
            return int(out["ingest"]["nodes_refreshed"])
        return int(out["refresh"]["leaves"] + sum(out["refresh"]["per_level"].values()))
    return int(out.nodes_refreshed)


Sample = tuple[float, float, dict[str, float], float, int]  # wall, model, stages, CPU seconds, bytes read
OPS = ("ingest", "delete", "correct", "query")


class Measured:
    """One base store under measurement: copied to scratch and loaded (its load cost and peak memory
    recorded), then given one operation of each kind per `round`, then summarised by `finish`. After
    `warm_pages`, rounds are kept apart (`warm` in the summary)."""

    def __init__(self, base: Path, size: int, reps: int, turns: int, seed: int, scratch: Path,
                 extractor: str = "profile", huge_pages: bool = True, trace_memory: bool = False,
                 lazy_trees: bool = True, consume_base: bool = False) -> None:
        self.work = scratch / f"n{size}"
        if consume_base:  # measured where it is, moved to scratch: the next run builds it again
            shutil.rmtree(self.work, ignore_errors=True)
            self.work.parent.mkdir(parents=True, exist_ok=True)
            os.replace(base, self.work)
        else:
            copy_base(base, self.work)
        if hasattr(os, "sync"):  # the copy written back first: a restarted process finds its store on disk
            os.sync()
        self.models = ModelClock()
        self.forest = open_forest(self.work, self.models, extractor, huge_pages, lazy_trees)
        _ = self.forest.embedder  # built before the open is timed
        gc.collect()
        rss, rss_file = resident_parts()
        if trace_memory:
            tracemalloc.start()
        t, cpu, (_, read) = time.perf_counter(), time.process_time(), usage()
        snap = self.forest.snapshot(USER)
        load_s, load_cpu_s = time.perf_counter() - t, time.process_time() - cpu
        load_read = usage()[1] - read
        if trace_memory:
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
        stored = len(snap.state.sessions)
        t, cpu, (_, read) = time.perf_counter(), time.process_time(), usage()  # once per loaded store
        self.forest.query(USER, QUESTION, answer=False)
        first_query_s, first_query_cpu_s = time.perf_counter() - t, time.process_time() - cpu
        first_query_read = usage()[1] - read
        grown, grown_file = (now - before for now, before in zip(resident_parts(), (rss, rss_file)))
        t = time.perf_counter()  # operations are timed once the load's background work is done
        self.forest.wait_settled()
        settle_s = time.perf_counter() - t
        settled = resident_bytes() - rss
        self.row: dict[str, Any] = {
            "sessions": stored, "cells": len(snap.state.cells), "facts": len(snap.state.facts),
            "trees": len(snap.state.trees), "nodes": len(snap.state.nodes), "load_s": round(load_s, 3),
            "load_cpu_s": round(load_cpu_s, 3), "first_query_s": round(first_query_s, 3),
            "first_query_cpu_s": round(first_query_cpu_s, 3), "settle_s": round(settle_s, 3),
            "load_read_mib": round(load_read / 2**20, 1),
            "first_query_read_mib": round(first_query_read / 2**20, 1),
            "rss_bytes_per_session": round(grown / max(1, stored)),
            "rss_file_bytes_per_session": round(grown_file / max(1, stored)),
            "settled_rss_bytes_per_session": round(settled / max(1, stored))}
        if trace_memory:
            self.row["peak_bytes_per_session"] = round(peak / max(1, stored))
        self.new = longmemeval_sessions(3 * reps, stored + 100, turns, seed + 1)  # later dates, unseen ids
        self.ops: dict[str, list[Sample]] = {op: [] for op in OPS}
        self.refreshed: dict[str, list[int]] = {"ingest": [], "delete": [], "correct": []}
        self.warm: dict[str, list[Sample]] | None = None  # the rounds after `warm_pages`

    def _timed(self, name: str, run: Callable[..., Any], *args: Any) -> None:
        t, m, use = time.perf_counter(), self.models.seconds, usage()
        out = run(*args)
        wall, model = time.perf_counter() - t, self.models.seconds - m
        cpu, read = (now - before for now, before in zip(usage(), use))
        stages = (out.timings if name == "ingest" else out.trace.get("latency", {}) if name == "query"
                  else out["timings"])
        (self.ops if self.warm is None else self.warm)[name].append((wall, model, stages, cpu, int(read)))
        if name in self.refreshed and self.warm is None:
            self.refreshed[name].append(dirty_path(out))

    def cold_round(self, r: int) -> None:
        """`round`, after the store's files are put out of the page cache (`page_cache.drop_pages`):
        each operation reads what it needs from the disk, as in a store far larger than memory."""
        drop_pages(self.work)
        self.round(r)

    def warm_pages(self) -> dict[str, float]:
        """Read the store's cache files once, so their pages are in the page cache (what a store
        larger than the page cache may have lost of them), and keep the rounds after apart: the
        operations' cost with the vector rows and posting lists they probe held in memory."""
        t, read = time.perf_counter(), 0
        for path in sorted((self.work / "users" / USER / "cache").iterdir()):
            with open(path, "rb") as f:
                while chunk := f.read(1 << 24):
                    read += len(chunk)
        self.warm = {op: [] for op in OPS}
        return {"cache_gib": round(read / 2**30, 2), "seconds": round(time.perf_counter() - t, 1)}

    def round(self, r: int) -> None:
        """Ingest a session, query, delete a session just ingested, correct the first one."""
        forest, (a, b, c) = self.forest, self.new[3 * r: 3 * r + 3]
        self._timed("ingest", forest.ingest_sessions, USER, [a])
        self._timed("query", forest.query, USER, QUESTION, None, None, False)
        forest.ingest_sessions(USER, [b])
        self._timed("delete", forest.delete_session, USER, b["session_id"])
        self._timed("correct", forest.correct_session, USER, {**c, "session_id": a["session_id"]})

    def finish(self) -> dict[str, Any]:
        row = self.row
        row["search"] = search_overlap(self.forest, self.forest.snapshot(USER))
        self.forest.close()
        for name, samples in self.ops.items():
            row[name] = summary(samples)
            if name in self.refreshed:
                row[name]["refreshed_nodes"] = round(statistics.mean(self.refreshed[name]), 1)
        if self.warm is not None:
            row["warm"] = {name: summary(samples) for name, samples in self.warm.items() if samples}
        shutil.rmtree(self.work, ignore_errors=True)
        return row


def summary(samples: list[Sample]) -> dict[str, Any]:
    """Means of one kind of operation's samples, and the median, 90th percentile and standard
    deviation of their own time."""
    own = [w - m for w, m, _, _, _ in samples]
    stages: dict[str, float] = {}
    for _, _, st, _, _ in samples:
        for k, v in st.items():
            stages[k] = stages.get(k, 0.0) + v / len(samples)
    ranked = sorted(own)
    return {"n": len(samples), "mean_s": round(statistics.mean(own), 6),
            "median_s": round(statistics.median(own), 6),
            "p90_s": round(ranked[min(len(ranked) - 1, -(-9 * len(ranked) // 10) - 1)], 6),  # nearest rank
            "stdev_s": round(statistics.stdev(own), 6) if len(own) > 1 else 0.0,
            "wall_mean_s": round(statistics.mean(w for w, _, _, _, _ in samples), 6),
            "model_mean_s": round(statistics.mean(m for _, m, _, _, _ in samples), 6),
            "cpu_mean_s": round(statistics.mean(c for _, _, _, c, _ in samples), 6),
            "disk_read_kib": round(statistics.mean(r for *_, r in samples) / 1024, 1),
            "stages": {k: round(v, 4) for k, v in stages.items()}}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--reps", type=int, default=20, help="operations of each kind per size")
    parser.add_argument("--turns", type=int, default=10, help="turns per session (~5 cells of 2 turns)")
    parser.add_argument("--batch", type=int, default=50, help="sessions per call while building a base store")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--root", default="results/bench")
    parser.add_argument("--extractor", default="profile", choices=sorted(EXTRACTORS),
                        help="what the scripted model extracts (module docstring)")
    parser.add_argument("--no-huge-pages", dest="huge_pages", action="store_false",
                        help="leave loaded stores on the kernel's default pages (MemForestConfig.huge_pages)")
    parser.add_argument("--eager-trees", dest="lazy_trees", action="store_false",
                        help="read every tree's nodes at the open (MemForestConfig.lazy_trees=False)")
    parser.add_argument("--trace-memory", action="store_true",
                        help="also report the tracemalloc peak of each open (slows the open)")
    parser.add_argument("--consume-base", action="store_true",
                        help="measure each base store itself, not a copy (moved to scratch and removed "
                             "after, so the next run builds it again): for a disk without room for a "
                             "copy (a 10^5-session store takes about 30 GB)")
    parser.add_argument("--cold-pages", action="store_true",
                        help="put each store's files out of the page cache before each measured round "
                             "(Linux): every size measured as a store far larger than memory")
    parser.add_argument("--warm-rounds", type=int, default=0,
                        help="after the measured rounds, read each store's cache files once and run this "
                             "many more rounds, reported apart (`warm`): what the page cache's misses cost")
    args = parser.parse_args(argv)
    root = Path(args.root)
    root.mkdir(parents=True, exist_ok=True)
    sizes = [int(s) for s in args.sizes.split(",")]
    stores = []
    for size in sizes:
        t = time.perf_counter()
        base = base_store_apart(root, size, args.turns, args.seed, args.batch, args.extractor)
        build = time.perf_counter() - t
        stores.append(Measured(base, size, args.reps + args.warm_rounds, args.turns, args.seed,
                               root / "incremental_work",
                               args.extractor, args.huge_pages, args.trace_memory, args.lazy_trees,
                               args.consume_base))
        stores[-1].row["build_s"] = round(build, 1)
    for r in range(args.reps):  # side by side: a drift in the machine's speed reaches every size alike
        for store in stores:
            (store.cold_round if args.cold_pages else store.round)(r)
    if args.warm_rounds:
        warmed = [store.warm_pages() for store in stores]
        for r in range(args.reps, args.reps + args.warm_rounds):
            for store in stores:
                store.round(r)
    rows = [store.finish() for store in stores]
    if args.warm_rounds:
        for row, read in zip(rows, warmed):
            row["warm"]["cache_read"] = read
    for size, row in zip(sizes, rows):
        print(f"n={size}: "
              + ", ".join(f"{op} {row[op]['mean_s'] * 1000:.1f} ms (wall {row[op]['wall_mean_s'] * 1000:.1f},"
                          f" CPU {row[op]['cpu_mean_s'] * 1000:.1f}, read {row[op]['disk_read_kib']:.0f} KiB)"
                          for op in OPS)
              + f", {row['rss_bytes_per_session'] / 1024:.1f} KiB/session resident "
              f"(of which {row['rss_file_bytes_per_session'] / 1024:.1f} mapped from files; "
              f"{row['settled_rss_bytes_per_session'] / 1024:.1f} settled); once per process: "
              f"open {row['load_s']:.2f} s (CPU {row['load_cpu_s']:.2f}), first query "
              f"{row['first_query_s']:.2f} s (CPU {row['first_query_cpu_s']:.2f}), settled "
              f"{row['settle_s']:.2f} s later", flush=True)
        if "warm" in row:
            print(f"n={size}, after reading {row['warm']['cache_read']['cache_gib']} GiB of cache files: "
                  + ", ".join(f"{op} {row['warm'][op]['mean_s'] * 1000:.1f} ms (read "
                              f"{row['warm'][op]['disk_read_kib']:.0f} KiB)" for op in OPS), flush=True)
    ratios = {}
    if len(rows) > 1:
        lo, hi = rows[0], rows[-1]
        ratios = {op: round(hi[op]["mean_s"] / lo[op]["mean_s"], 2)
                      for op in OPS}
        ratios.update({f"{op}_wall": round(hi[op]["wall_mean_s"] / lo[op]["wall_mean_s"], 2)
                       for op in OPS})
        ratios.update({f"{op}_median": round(hi[op]["median_s"] / lo[op]["median_s"], 2)
                       for op in OPS})
        ratios.update({f"{op}_cpu": round(hi[op]["cpu_mean_s"] / lo[op]["cpu_mean_s"], 2)
                       for op in OPS})
        if args.warm_rounds:  # the rounds after the cache files were read once
            ratios.update({f"{op}_warm": round(hi["warm"][op]["mean_s"] / lo["warm"][op]["mean_s"], 2)
                           for op in OPS})
        ratios["memory_per_session"] = round(
            hi["rss_bytes_per_session"] / max(1, lo["rss_bytes_per_session"]), 2)
        # the share of the growth the refresh's design accounts for: own time per refreshed node
        ratios.update({f"{op}_per_refreshed_node": round(
            hi[op]["mean_s"] / hi[op]["refreshed_nodes"] / (lo[op]["mean_s"] / lo[op]["refreshed_nodes"]), 2)
            for op in ("ingest", "delete", "correct")
            if lo[op]["refreshed_nodes"] and hi[op]["refreshed_nodes"]})
        ratios.update({f"{op}_refreshed_nodes": round(
            hi[op]["refreshed_nodes"] / lo[op]["refreshed_nodes"], 2)
            for op in ("ingest", "delete", "correct") if lo[op]["refreshed_nodes"]})
        print(f"ratio n={sizes[-1]} / n={sizes[0]}: " + ", ".join(f"{k} {v}x" for k, v in ratios.items()))
    return {"sizes": sizes, "extractor": args.extractor, "huge_pages": args.huge_pages,
            "lazy_trees": args.lazy_trees, "rows": rows,
            "ratios": ratios, "reps": args.reps, "cold_pages": args.cold_pages,
            "warm_rounds": args.warm_rounds, "trace_memory": args.trace_memory}


if __name__ == "__main__":
    main()
