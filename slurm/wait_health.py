"""Wait until every URL answers HTTP 200, with a deadline; used by the job scripts for vLLM's /health.

    python slurm/wait_health.py --deadline-s S [--pid PID] URL...

Exit 0 once all answer; 1, with one line on stderr, when the deadline passes or the process PID (a
server started by the calling script on this host) exits first. Standard library only."""

from __future__ import annotations

import argparse
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path


def alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return bool(reply.status == 200)
    except (OSError, urllib.error.URLError, ValueError):
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="wait_health.py")
    parser.add_argument("--deadline-s", type=float, required=True)
    parser.add_argument("--pid", type=int, default=None)
    parser.add_argument("--every-s", type=float, default=2.0)
    parser.add_argument("urls", nargs="+")
    args = parser.parse_args(argv)
    deadline = time.monotonic() + args.deadline_s
    waiting = list(args.urls)
    while True:
        waiting = [url for url in waiting if not answers(url)]
        if not waiting:
            return 0
        if args.pid is not None and not alive(args.pid):
            print(f"the server for {waiting[0]} exited before it answered", file=sys.stderr)
            return 1
        if time.monotonic() >= deadline:
            print(f"no answer from {' '.join(waiting)} within {args.deadline_s:g}s", file=sys.stderr)
            return 1
        time.sleep(min(args.every_s, max(deadline - time.monotonic(), 0.0)))


if __name__ == "__main__":
    sys.exit(main())
