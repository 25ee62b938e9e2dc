"""Throughput of the embedded llama.cpp backend on an extraction-like JSON call.

Compares one instance with 2 threads (one request at a time) against two instances with 1 thread
each (two requests at once). Run: `python -m benchmarks.micro.llm_throughput [--calls 12]`.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from memforest.commands import load_config
from memforest.config import ExtractionConfig, LLMConfig
from memforest.facts.extraction import extraction_request
from memforest.llm.base import ChatRequest, ChatResponse, InvalidOutputError
from memforest.llm.factory import build_chat_model
from memforest.types import Cell

PEOPLE = ["Maya", "Tom", "Priya", "Lukas", "Aiko", "Omar"]
PLACES = ["Lisbon", "Denver", "Kyoto", "Leeds", "Austin", "Oslo"]
HOBBIES = ["bouldering", "sourdough baking", "trail running", "watercolour painting"]


@dataclass
class Result:
    label: str
    instances: int
    threads: int
    calls: int
    ok: int
    invalid: int
    wall_s: float
    latencies: list[float]
    completion_tokens: list[int]

    @property
    def calls_per_min(self) -> float:
        return 60.0 * self.calls / self.wall_s


def dialogue(i: int) -> ChatRequest:
    """The library's extraction request for the i-th of a set of distinct 2-turn cells (distinct, so
    that no prompt is fully cached)."""
    person, place, hobby = PEOPLE[i % 6], PLACES[(i * 5 + 1) % 6], HOBBIES[i % 4]
    user = (
        f"My sister {person} just moved to {place} for a nursing job, and I'm visiting her in "
        f"{3 + i % 9} weeks. I've been getting into {hobby} lately, so I hope to find a club there."
    )
    assistant = (
        f"That sounds lovely! {place} has a few {hobby} groups that meet on weekends. "
        f"Would you like tips for planning the trip to see {person}?"
    )
    cell = Cell(f"c{i}", "s", i, 0, 1, 1_684_000_000.0 + 86_400 * i, f"user: {user}\nassistant: {assistant}")
    return extraction_request(cell, ExtractionConfig())


def run(label: str, requests: Sequence[ChatRequest], cfg: LLMConfig) -> Result:
    """Time `requests` on a fresh model of `cfg`, as many in flight as it serves at once."""
    model = build_chat_model(cfg)
    try:
        model.generate([dialogue(len(requests) + 1)])  # warm-up, not counted

        def one(request: ChatRequest) -> tuple[float, ChatResponse | Exception]:
            start = time.perf_counter()
            [out] = model.generate([request])
            return time.perf_counter() - start, out

        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=model.max_concurrency) as pool:
            timed = list(pool.map(one, requests))
        wall = time.perf_counter() - start
    finally:
        model.close()
    outs = [out for _, out in timed]
    return Result(
        label=label,
        instances=cfg.instances,
        threads=cfg.threads_per_instance,
        calls=len(requests),
        ok=sum(isinstance(o, ChatResponse) for o in outs),
        invalid=sum(isinstance(o, InvalidOutputError) for o in outs),
        wall_s=wall,
        latencies=[t for t, _ in timed],
        completion_tokens=[o.usage.completion_tokens for o in outs if isinstance(o, ChatResponse)],
    )


def format_table(results: Sequence[Result]) -> str:
    rows = [
        f"{'configuration':<24}{'calls':>6}{'ok':>4}{'invalid':>8}{'wall s':>8}{'calls/min':>10}"
        f"{'mean s':>8}{'max s':>7}{'out tok':>8}"
    ]
    for r in results:
        tokens = statistics.mean(r.completion_tokens) if r.completion_tokens else 0.0
        rows.append(
            f"{r.label:<24}{r.calls:>6}{r.ok:>4}{r.invalid:>8}{r.wall_s:>8.1f}{r.calls_per_min:>10.1f}"
            f"{statistics.mean(r.latencies):>8.2f}{max(r.latencies):>7.2f}{tokens:>8.0f}"
        )
    return "\n".join(rows)


def llm_config(overrides: list[str]) -> LLMConfig:
    return load_config(None, [f"llm.{item}" for item in overrides]).llm


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=12)
    parser.add_argument("-o", "--set", action="append", default=[], metavar="KEY=VALUE",
                        help="LLMConfig overrides of both configurations, e.g. backend=scripted")
    args = parser.parse_args(argv)
    requests = [dialogue(i) for i in range(args.calls)]
    results = [
        run("1 instance x 2 threads", requests,
            llm_config([*args.set, "instances=1", "threads_per_instance=2"])),
        run("2 instances x 1 thread", requests,
            llm_config([*args.set, "instances=2", "threads_per_instance=1"])),
    ]
    print(format_table(results))
    base = results[0].calls_per_min
    speedup = results[1].calls_per_min / base
    print(f"speed-up of 2x1 over 1x2: {speedup:.2f}x")
    return {"results": [{"label": r.label, "calls": r.calls, "ok": r.ok, "invalid": r.invalid,
                         "wall_s": round(r.wall_s, 3), "calls_per_min": round(r.calls_per_min, 2)}
                        for r in results],
            "speedup_2x1_over_1x2": round(speedup, 3)}


if __name__ == "__main__":
    main()
