"""Long-lived memory (soak): one process keeps a memory open and answers queries while another
process writes N sessions one at a time, then deletes a tenth of them and corrects another tenth.
Sampled over time in the long-lived process: resident memory, the size of the store's write-ahead
log, open file descriptors and query latency (p50/p95 per sample).

Whether each stayed bounded is judged against a fresh process that opens the final store and asks
the same questions (so growth that follows the data is not counted as a leak): resident memory at
most 1.5x the fresh process's plus 32 MiB; the log's largest size in the second half of the run at
most 1.5x its largest in the first half plus 4 MiB; descriptors at most 2 more at the end than at
the first sample; p95 of the last sample at most 2x the fresh process's plus 2 ms. Models: the
scripted model and the hash embedder (`-o` overrides change them)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from memforest.api import MemForest
from memforest.commands import load_config

FAKE = ["llm.backend=scripted", "embedder.backend=hash", "embedder.dim=64"]
USER = "soak"
QUESTIONS = ["Where does item3 live?", "What did I say about Lisbon?", "Which city came up last?",
             "Tell me about item7 and the harbour"]
CITIES = ["Lisbon", "Oslo", "Quito", "Hanoi", "Perth", "Tunis", "Riga", "Cusco"]


def session(i: int, corrected: bool = False) -> dict[str, Any]:
    city = CITIES[(i + 3 * corrected) % len(CITIES)]
    said = "actually" if corrected else "today"
    turns = [f"Session {i}: {said} I keep item{i % 50} near the harbour in {city}.", f"Noted: item{i % 50}.",
             f"I also met friend{i % 17} in {city} for a walk.", "Sounds nice."]
    return {"session_id": f"w{i:05d}", "timestamp": f"2023-{1 + i % 12:02d}-{1 + i % 28:02d}T10:00:00",
            "turns": [{"role": "user" if k % 2 == 0 else "assistant", "content": t}
                      for k, t in enumerate(turns)]}


def _forest(store: Path, sets: list[str]) -> MemForest:
    return MemForest(store, load_config(None, [*FAKE, *sets]))


def write(store: Path, sessions: int, sets: list[str], progress: Path) -> None:
    """The writer process: ingest, then delete every tenth session and correct every tenth + 5."""
    steps = ([("ingest", i) for i in range(sessions)] + [("delete", i) for i in range(0, sessions, 10)]
             + [("correct", i) for i in range(5, sessions, 10)])
    with _forest(store, sets) as forest:
        for n, (kind, i) in enumerate(steps, 1):
            if kind == "ingest":
                forest.ingest_sessions(USER, [session(i)])
            elif kind == "delete":
                forest.delete_session(USER, f"w{i:05d}")
            else:
                forest.correct_session(USER, session(i, corrected=True))
            tmp = progress.with_suffix(".tmp")
            tmp.write_text(f"{kind} {n} {len(steps)}")
            os.replace(tmp, progress)


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _percentiles(ms: list[float]) -> tuple[float, float]:
    if not ms:
        return 0.0, 0.0
    return round(float(np.percentile(ms, 50)), 2), round(float(np.percentile(ms, 95)), 2)


def _ask(forest: MemForest, i: int) -> float:
    t = time.perf_counter()
    forest.query(USER, QUESTIONS[i % len(QUESTIONS)], answer=False)
    return (time.perf_counter() - t) * 1000


def fresh(store: Path, sets: list[str], queries: int = 40) -> dict[str, float]:
    """A new process's figures over the final store: resident memory and query p50/p95."""
    with _forest(store, sets) as forest:
        _ask(forest, 0)
        ms = [_ask(forest, i) for i in range(queries)]
        p50, p95 = _percentiles(ms)
        return {"rss_mib": round(_rss_mib(), 1), "p50_ms": p50, "p95_ms": p95}


def _child(*args: str) -> list[str]:
    return [sys.executable, "-m", "benchmarks.micro.soak", *args]


def _sample(forest: MemForest, log: Path, t0: float, progress: Path, ms: list[float]) -> dict[str, Any]:
    p50, p95 = _percentiles(ms)
    step = progress.read_text().split() if progress.exists() else ["start", "0", "0"]
    return {"t_s": round(time.perf_counter() - t0, 1), "phase": step[0], "step": int(step[1]),
            "rss_mib": round(_rss_mib(), 1),
            "log_mib": round(log.stat().st_size / 2**20 if log.exists() else 0, 2),
            "fds": _fds(), "queries": len(ms), "p50_ms": p50, "p95_ms": p95}


def soak(store: Path, sessions: int, sets: list[str], sample_s: float) -> dict[str, Any]:
    progress = store.parent / "progress"
    set_args = [a for s in sets for a in ("-o", s)]
    writer = subprocess.Popen(_child("--writer", str(store), "--sessions", str(sessions), "--progress",
                                     str(progress), *set_args))
    while not (store / "users" / USER / "memory.sqlite").exists() or not progress.exists():
        if writer.poll() is not None:
            raise SystemExit(f"the writer ended with {writer.returncode} before its first session")
        time.sleep(0.05)
    samples: list[dict[str, Any]] = []
    log = store / "users" / USER / "memory.sqlite-wal"
    with _forest(store, sets) as forest:
        t0 = time.perf_counter()
        while writer.poll() is None:
            ms, until, i = [], time.perf_counter() + sample_s, 0
            while time.perf_counter() < until and writer.poll() is None:
                ms.append(_ask(forest, i))
                i += 1
            samples.append(_sample(forest, log, t0, progress, ms))
            print(json.dumps(samples[-1]), flush=True)
        samples.append(_sample(forest, log, t0, progress, [_ask(forest, i) for i in range(40)]))
        if writer.returncode != 0:
            raise SystemExit(f"the writer ended with {writer.returncode}")
    done = subprocess.run(_child("--fresh", str(store), *set_args), capture_output=True, text=True,
                          check=True)
    new = json.loads(done.stdout.splitlines()[-1])
    return {"sessions": sessions, "samples": samples, "fresh": new, "bounded": verdicts(samples, new)}


def verdicts(samples: list[dict[str, Any]], new: dict[str, float]) -> dict[str, bool]:
    half = max(1, len(samples) // 2)
    first, last = samples[:half], samples[half:] or samples[-1:]
    return {"resident_memory": samples[-1]["rss_mib"] <= 1.5 * new["rss_mib"] + 32,
            "log_size": max(s["log_mib"] for s in last) <= 1.5 * max(s["log_mib"] for s in first) + 4,
            "open_files": samples[-1]["fds"] <= samples[0]["fds"] + 2,
            "query_p95": samples[-1]["p95_ms"] <= 2 * new["p95_ms"] + 2}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=1000, help="sessions the writer ingests")
    parser.add_argument("--sample-s", type=float, default=2.0, help="seconds between samples")
    parser.add_argument("-o", "--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--writer", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--fresh", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--progress", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.writer is not None:
        write(args.writer, args.sessions, args.set, args.progress)
        return {}
    if args.fresh is not None:
        print(json.dumps(fresh(args.fresh, args.set)))
        return {}
    with tempfile.TemporaryDirectory() as d:
        result = soak(Path(d) / "store", args.sessions, args.set, args.sample_s)
    first, end, new = result["samples"][0], result["samples"][-1], result["fresh"]
    print(f"soak: {args.sessions} sessions written, then {args.sessions // 10} deleted and "
          f"{len(range(5, args.sessions, 10))} corrected, {len(result['samples'])} samples")
    units = {"rss_mib": "MiB", "log_mib": "MiB", "fds": "", "p50_ms": "ms", "p95_ms": "ms"}
    for key, unit in units.items():
        print(f"  {key:8} first {first[key]}{unit}, max {max(s[key] for s in result['samples'])}{unit}, "
              f"end {end[key]}{unit}" + (f", fresh process {new[key]}{unit}" if key in new else ""))
    print("  bounded: " + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in result["bounded"].items()))
    return result


if __name__ == "__main__":
    main()
