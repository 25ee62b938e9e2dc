"""Marginal cost of MemTree insertion as the tree grows (evidence that insertion is O(log N), not O(N)).

One tree is grown with seeded random times; at each size N the last `window` inserts before reaching N
are timed (descent, leaf linking, splits, dirty marking and placement), then `take_dirty` on the dirty
set those inserts produced. Untimed bulk inserts drain the dirty and change sets every `batch` inserts,
as an ingest loop would. For contrast, `same_path_us` times `window` extra inserts whose times fall in
one narrow band (the same root-to-leaf path, so cache-resident), removed again untimed: the gap between
the two columns is memory latency, not work.
"""

from __future__ import annotations

import argparse
import gc
import resource
import time
from typing import Any

import numpy as np

from memforest.trees.memtree import MemTree

SPAN_SECONDS = 10 * 365 * 86400.0


def _drain(tree: MemTree) -> None:
    tree.take_dirty()
    tree.take_changes()


def _fill(tree: MemTree, items: list[str], times: list[float], start: int, stop: int, batch: int) -> None:
    for i in range(start, stop):
        tree.insert(items[i], times[i])
        if (i + 1) % batch == 0:
            _drain(tree)


def _timed_window(tree: MemTree, items: list[str], times: list[float], start: int,
                  stop: int) -> dict[str, Any]:
    _drain(tree)
    gc.collect()
    t0 = time.perf_counter()
    for i in range(start, stop):
        tree.insert(items[i], times[i])
    t1 = time.perf_counter()
    dirty = tree.take_dirty()
    t2 = time.perf_counter()
    n = stop - start
    return {
        "insert_us": (t1 - t0) / n * 1e6,
        "take_dirty_us": (t2 - t1) * 1e6,
        "take_dirty_us_per_insert": (t2 - t1) / n * 1e6,
        "dirty_nodes": sum(len(ids) for ids in dirty.values()),
    }


def _same_path_window(tree: MemTree, rng: np.random.Generator, n: int) -> float:
    band = [1.6e9 + SPAN_SECONDS / 2 + x for x in rng.uniform(0.0, 1.0, size=n).tolist()]
    names = [f"band-{i}" for i in range(n)]
    _drain(tree)
    gc.collect()
    t0 = time.perf_counter()
    for name, t in zip(names, band, strict=True):
        tree.insert(name, t)
    elapsed = time.perf_counter() - t0
    for name in names:
        tree.delete(name)
    _drain(tree)
    return elapsed / n * 1e6


def _times(order: str, total: int, rng: np.random.Generator) -> list[float]:
    """`random`: uniform over ten years (worst case for locality). `arrival`: the order memory arrives
    in, a time-ordered stream whose items are back-dated by up to 30 days (event before source time)."""
    if order == "random":
        return rng.uniform(1.6e9, 1.6e9 + SPAN_SECONDS, size=total).tolist()
    if order == "arrival":
        step = SPAN_SECONDS / total
        return (1.6e9 + np.arange(total) * step - rng.uniform(0.0, 30 * 86400.0, size=total)).tolist()
    raise ValueError(f"unknown insertion order {order!r}")


def run(
    sizes: tuple[int, ...] = (10**3, 10**4, 10**5, 10**6), fanout: int = 8,
    window: int = 1000, batch: int = 10_000, seed: int = 0, validate: bool = True, order: str = "random",
) -> list[dict[str, Any]]:
    """One row per size: mean µs per insert over the last `window` inserts, take_dirty cost, height."""
    total = max(sizes)
    rng = np.random.default_rng(seed)
    times = _times(order, total, rng)
    items = [f"fact-{i:08d}" for i in range(total)]
    tree = MemTree("bench", fanout)
    rows: list[dict[str, Any]] = []
    done = 0
    for size in sorted(sizes):
        start = max(done, size - window)
        _fill(tree, items, times, done, start, batch)
        row: dict[str, Any] = {"size": size, "fanout": fanout, "window": size - start}
        row |= _timed_window(tree, items, times, start, size)
        row["same_path_us"] = _same_path_window(tree, rng, size - start)
        row |= {"height": tree.height, "nodes": len(tree.nodes),
                "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
        rows.append(row)
        done = size
    if validate:
        t0 = time.perf_counter()
        tree.validate()
        rows[-1]["validate_s"] = time.perf_counter() - t0
    for row in rows:
        row["ratio_to_smallest"] = row["insert_us"] / rows[0]["insert_us"]
    return rows


def format_table(rows: list[dict[str, Any]]) -> str:
    """A fixed-width text table of `run`'s rows."""
    head = f"{'N':>9} {'k':>3} {'height':>6} {'insert µs':>10} {'x smallest':>10} {'take_dirty µs':>14} " \
           f"{'dirty':>6} {'same-path µs':>12} {'max RSS MB':>10}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['size']:>9,} {r['fanout']:>3} {r['height']:>6} {r['insert_us']:>10.2f} "
            f"{r['ratio_to_smallest']:>10.2f} {r['take_dirty_us']:>14.0f} {r['dirty_nodes']:>6} "
            f"{r['same_path_us']:>12.2f} {r['max_rss_mb']:>10.0f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, list[dict[str, Any]]]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="1000,10000,100000,1000000", help="comma-separated tree sizes")
    args = parser.parse_args(argv)
    sizes = tuple(int(n) for n in args.sizes.split(","))
    out = {}
    for order in ("arrival", "random"):
        t0 = time.perf_counter()
        rows = run(sizes=sizes, order=order, validate=order == "random")
        out[order] = rows
        print(f"MemTree insertion, {order} order (no LLM: descent, splits, dirty marking, placement)")
        print(format_table(rows))
        ratio = rows[-1]["ratio_to_smallest"]
        print(f"per-insert time at N={rows[-1]['size']:,} / N={rows[0]['size']:,}: {ratio:.2f}x "
              f"(size ratio {rows[-1]['size'] // rows[0]['size']:,}x)")
        if "validate_s" in rows[-1]:
            print(f"validate() at N={rows[-1]['size']:,}: {rows[-1]['validate_s']:.1f} s")
        print(f"wall time: {time.perf_counter() - t0:.1f} s\n")
    return out


if __name__ == "__main__":
    main()
