"""What each system held of its input: the turns its adapter reports as given, kept and lost (by reason)
after every build (`InputKept` in the build's statistics), summed over a run's completed builds, for the
summary's `input kept` row, the comparison table's column and the one line a run that lost input gets."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

Row = Mapping[str, Any]


def reported_input(build: Row) -> Mapping[str, Any] | None:
    """The input account of one build row (its system's statistics), None when it has none."""
    account = (build.get("system") or {}).get("input")
    return account if isinstance(account, Mapping) else None


def input_figures(builds: Sequence[Row]) -> dict[str, Any] | None:
    """Turns given and kept over the completed builds that report them, lost turns by reason, the
    system's stored units, and how many completed builds did not report; None when none did."""
    done = [b for b in builds if not b.get("error")]
    accounts = [a for a in (reported_input(b) for b in done) if a is not None]
    if not accounts:
        return None
    lost: Counter[str] = Counter()
    for account in accounts:
        lost.update({str(k): int(v) for k, v in (account.get("lost") or {}).items()})
    stored = [s for s in (a.get("stored") for a in accounts) if isinstance(s, int)]
    units = sorted({str(a.get("unit") or "turns") for a in accounts})
    return {
        "given": sum(int(a.get("given", 0)) for a in accounts),
        "kept": sum(int(a.get("kept", 0)) for a in accounts),
        "lost": dict(lost.most_common()),
        "upstream": all(bool(a.get("upstream")) for a in accounts if a.get("lost")),
        "stored": sum(stored) if len(stored) == len(accounts) else None,
        "unit": "/".join(units),
        "instances": len(accounts),
        "unreported": len(done) - len(accounts),
    }


def input_cell(figures: Mapping[str, Any] | None) -> str:
    """`kept / given (pct)` turns, or `–` when the system does not report its input."""
    if not figures or not figures["given"]:
        return "–"
    given, kept = int(figures["given"]), int(figures["kept"])
    return f"{kept:,} / {given:,} ({100 * kept / given:.1f}%)"


def input_line(figures: Mapping[str, Any] | None) -> str | None:
    """One line for a run whose system lost input (None when it lost none): how many turns, why, and
    whether the loss is upstream's own."""
    if not figures or figures["kept"] >= figures["given"]:
        return None
    given, kept = int(figures["given"]), int(figures["kept"])
    reasons = "; ".join(f"{n:,} {reason}" for reason, n in figures["lost"].items())
    whose = " (as upstream's own evaluation loses them)" if figures["upstream"] else ""
    return (f"Input lost: {given - kept:,} of {given:,} turns ({100 * (given - kept) / given:.1f}%) never "
            f"reached the system's store{whose}: {reasons}.")
