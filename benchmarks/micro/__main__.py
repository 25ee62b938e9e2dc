"""`make bench` (`python -m benchmarks.micro [SUITE...]`): every speed and memory measurement, printed
and written to results/bench/<suite>.json. Each suite is a module of this package whose
`main(argv) -> result` also runs alone (`python -m benchmarks.micro.<module> --help`); one suite named
here takes its own options after its name (`python -m benchmarks.micro incremental --sizes 100,1000`)."""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.micro import (
    incremental,
    llm_throughput,
    merge_speed,
    retrieval_latency,
    retrieval_quality,
    soak,
    structure,
    vector_search,
    write_profile,
)

SUITES: dict[str, Callable[[list[str]], Any]] = {
    "structure": structure.main,
    "retrieval_latency": retrieval_latency.main,
    "retrieval_quality": retrieval_quality.main,
    "write_profile": write_profile.main,
    "merge": merge_speed.main,
    "llm_throughput": llm_throughput.main,
    "incremental": incremental.main,
    "soak": soak.main,
    "vector_search": vector_search.main,
}


def _machine() -> dict[str, Any]:
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             check=False).stdout.strip()
    except OSError:
        sha = ""
    return {"git_sha": sha, "python": platform.python_version(), "machine": platform.machine(),
            "cpus": os.cpu_count(), "time": time.strftime("%Y-%m-%dT%H:%M:%S")}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("suites", nargs="*", default=list(SUITES), choices=list(SUITES))
    parser.add_argument("--out", default="results/bench")
    args, options = parser.parse_known_args(argv)
    if options and len(args.suites) != 1:
        parser.error(f"options {' '.join(options)} are a suite's own: name one suite before them")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in args.suites:
        print(f"\n=== {name} ===", flush=True)
        t = time.perf_counter()
        result = SUITES[name](options)
        record = {"suite": name, "machine": _machine(), "seconds": round(time.perf_counter() - t, 1),
                  "result": result}
        (out / f"{name}.json").write_text(json.dumps(record, indent=2, default=str))
    print(f"\nresults written to {out}/")


if __name__ == "__main__":
    main()
