"""Shared parts of the fuzz suite: profiles, per-class outcome counts, in-process CLI runs, store
fingerprints and a watchdog against hangs.

`MEMFOREST_FUZZ=long` (make fuzz) selects the long profile; the fast one runs in `make test`."""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings

LONG = os.environ.get("MEMFOREST_FUZZ", "fast") == "long"
SCALE = float(os.environ.get("MEMFOREST_FUZZ_SCALE", "1"))  # a shorter or longer long run
BAD = ("traceback", "hang", "changed", "leak")
COUNTS: dict[str, Counter[str]] = defaultdict(Counter)
FAKE = ["-o", "llm.backend=scripted", "-o", "embedder.backend=hash", "-o", "embedder.dim=64"]


def fuzz_settings(long_cases: int, fast_cases: int) -> settings:
    """Hypothesis settings of one fuzz class: `long_cases` in the long profile, else `fast_cases`
    (derandomised, so `make test` runs the same cases every time)."""
    return settings(max_examples=max(1, round(long_cases * SCALE)) if LONG else fast_cases, deadline=None,
                    database=None,
                    derandomize=not LONG, print_blob=LONG,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.data_too_large, HealthCheck.filter_too_much])


def record(kind: str, outcome: str, detail: str = "") -> None:
    """Count one case of class `kind`; fail the test on a bad outcome."""
    COUNTS[kind]["cases"] += 1
    COUNTS[kind][outcome] += 1
    assert outcome not in BAD, f"{kind}: {outcome}: {detail[:2000]}"


def report() -> dict[str, dict[str, int]]:
    return {kind: {"cases": c["cases"], **{k: c[k] for k in ("ok", "refused", *BAD)}}
            for kind, c in sorted(COUNTS.items())}


def format_report() -> str:
    rows = report()
    head = (f"{'class':<18}{'cases':>8}{'ok':>8}{'refused':>9}{'tracebacks':>12}{'hangs':>7}"
            f"{'changes':>9}{'leaks':>7}")
    lines = [head]
    for kind, c in rows.items():
        lines.append(f"{kind:<18}{c['cases']:>8}{c['ok']:>8}{c['refused']:>9}{c['traceback']:>12}{c['hang']:>7}"
                     f"{c['changed']:>9}{c['leak']:>7}")
    total = {k: sum(c[k] for c in rows.values()) for k in ("cases", "ok", "refused", *BAD)}
    lines.append(f"{'total':<18}{total['cases']:>8}{total['ok']:>8}{total['refused']:>9}{total['traceback']:>12}"
                 f"{total['hang']:>7}{total['changed']:>9}{total['leak']:>7}")
    return "\n".join(lines)


def write_report(path: str) -> None:
    Path(path).write_text(json.dumps({"profile": "long" if LONG else "fast", "classes": report()}, indent=2))


class Hang(Exception):
    """A case ran past its watchdog."""


@contextmanager
def watchdog(seconds: float) -> Iterator[None]:
    """Raise Hang in the main thread after `seconds`."""
    def fire(*_: Any) -> None:
        raise Hang(f"no result after {seconds} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def cli(argv: Sequence[str], limit_s: float = 60.0) -> tuple[int | str, str, str]:
    """Run `memforest` in-process: (exit code or "hang", stdout, stderr)."""
    from memforest.cli import main

    out, err = io.StringIO(), io.StringIO()
    try:
        with watchdog(limit_s), redirect_stdout(out), redirect_stderr(err):
            try:
                code: int | str = main(list(argv))
            except SystemExit as e:  # argparse: usage errors (2) and --help (0)
                code = e.code if isinstance(e.code, int) else 2
    except Hang:
        code = "hang"
    return code, out.getvalue(), err.getvalue()


def outcome(code: int | str, err: str) -> str:
    if code == "hang":
        return "hang"
    if "Traceback" in err or "internal error" in err:
        return "traceback"
    return "ok" if code == 0 else "refused"


def fingerprint(root: Path) -> dict[str, str]:
    """Every user folder and database file under `root`, databases by content (index caches, locks
    and the WAL's shared-memory file left out: readers may touch them)."""
    users = root / "users"
    out = {f"users/{p.name}": "folder" for p in users.iterdir()} if users.is_dir() else {}
    for db in sorted(root.rglob("memory.sqlite")):
        out[str(db.relative_to(root))] = (hashlib.sha256(db.read_bytes()).hexdigest() if db.is_file()
                                          else "dir")
    return out
