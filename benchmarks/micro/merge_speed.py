"""Migration benchmark: merge N materialised forests versus writing all their sessions into one
forest sequentially, with the same models, side by side in one run (the paper's Figure 5 shape)."""

from __future__ import annotations

import argparse
import tempfile
import time
from typing import Any

from memforest.api import MemForest
from memforest.commands import load_config
from memforest.config import MemForestConfig, with_host_policy

NAMES = ["Ana", "Ben", "Chloe", "Dev", "Elif", "Farid", "Greta", "Hiro"]
CITIES = ["Lisbon", "Oslo", "Quito", "Hanoi", "Perth", "Tunis", "Riga", "Cusco"]
HOBBIES = ["pottery", "chess", "surfing", "baking", "cycling", "birdwatching", "salsa", "origami"]
JOBS = ["teacher", "nurse", "architect", "chef", "pilot", "editor", "welder", "vet"]


def instance_sessions(i: int, sessions: int = 2) -> list[dict]:
    """Short dated sessions about one persona; instances share no session ids."""
    name, city, hobby, job = NAMES[i % 8], CITIES[i % 8], HOBBIES[i % 8], JOBS[i % 8]
    other = CITIES[(i + 3) % 8]
    templates = [
        [f"My friend {name} and I live in {city}; I work as a {job}.", f"{city} sounds lovely for a {job}.",
         f"On weekends I do {hobby} with {name}.", f"{hobby.capitalize()} is a good way to unwind."],
        [f"I moved from {city} to {other} last month.", f"How is {other} treating you?",
         f"I still do {hobby} every Sunday, now with a club in {other}.", "Great that you kept it up."],
    ]
    out = []
    for s in range(sessions):
        turns = templates[s % 2]
        out.append({"session_id": f"i{i}-s{s}", "timestamp": f"2024-{1 + s:02d}-{1 + i:02d}T18:00:00",
                    "turns": [{"role": "user" if k % 2 == 0 else "assistant", "content": t}
                              for k, t in enumerate(turns)]})
    return out


def run(max_n: int = 8, cfg: MemForestConfig | None = None) -> list[dict[str, Any]]:
    cfg = cfg or with_host_policy(MemForestConfig())  # a benchmark owns its process
    rows = []
    with tempfile.TemporaryDirectory() as d, MemForest(d, cfg) as forest:
        sequential = 0.0
        for i in range(max_n):
            forest.ingest_sessions(f"src{i}", instance_sessions(i))
            t = time.perf_counter()
            forest.ingest_sessions("sequential", instance_sessions(i))
            sequential += time.perf_counter() - t
            if i == 0:
                continue
            n = i + 1
            calls = len(forest.log)
            t = time.perf_counter()
            forest.merge([f"src{k}" for k in range(n)], f"merged{n}")
            merge_s = time.perf_counter() - t
            seq, mer = forest.snapshot("sequential").state, forest.snapshot(f"merged{n}").state
            rows.append({"n": n, "sequential_s": round(sequential, 2), "merge_s": round(merge_s, 2),
                         "speedup": round(sequential / merge_s, 2),
                         "merge_llm_calls": len(forest.log) - calls, "facts_sequential": len(seq.facts),
                         "facts_merged": len(mer.facts), "trees_sequential": len(seq.trees),
                         "trees_merged": len(mer.trees)})
            print(_row(rows[-1]), flush=True)
    return rows


def _row(r: dict[str, Any]) -> str:
    return (f"N={r['n']}: sequential {r['sequential_s']} s, merge {r['merge_s']} s, speedup {r['speedup']}x "
            f"({r['merge_llm_calls']} merge calls); facts {r['facts_merged']} vs {r['facts_sequential']}, "
            f"trees {r['trees_merged']} vs {r['trees_sequential']}")


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--max-n", type=int, default=8)
    parser.add_argument("-o", "--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    print("merge (migration) versus sequential write, same models, one run")
    return run(args.max_n, load_config(None, args.set))


if __name__ == "__main__":
    main()
