"""Waves and the critical path of a set of model calls, derived from their timestamps alone.

Systems other than MemForest do not say which of their calls depend on which, so the write-path
table derives the structure from the proxy's call log the same way for every system:

- a wave is a maximal group of calls whose [start, end] intervals overlap, directly or through a
  chain of overlapping calls (a connected component of the interval graph): calls in one wave were
  in flight together, so none of them waited for another's answer;
- the critical path is the sum over waves of the longest call in each wave: the model time a
  system would need even with unlimited parallel serving, given how it orders its calls;
- busy seconds is the time with at least one call in flight (the union of the intervals);
- max in flight is the largest number of calls running at one moment.

A sequential caller gives one wave per call (critical path = the sum of call latencies); a caller
that sends everything at once gives one wave (critical path = its slowest call). Embedding requests
are left out (the `chat` / LLM calls only)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from memforest.llm.calllog import EMBEDDING_STAGES, CallRecord


def derived_waves(records: Iterable[CallRecord]) -> dict[str, Any]:
    calls = sorted((r for r in records if r.stage not in EMBEDDING_STAGES), key=lambda r: (r.start, r.end))
    waves: list[tuple[float, float, float]] = []  # (start, end, longest call)
    for r in calls:
        if waves and r.start < waves[-1][1]:
            start, end, longest = waves[-1]
            waves[-1] = (start, max(end, r.end), max(longest, r.latency))
        else:
            waves.append((r.start, r.end, r.latency))
    events = sorted([(r.start, 1) for r in calls] + [(r.end, -1) for r in calls], key=lambda e: (e[0], e[1]))
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return {
        "calls": len(calls),
        "waves": len(waves),
        "critical_path_seconds": round(sum(w[2] for w in waves), 3),
        "busy_seconds": round(sum(w[1] - w[0] for w in waves), 3),
        "max_in_flight": peak,
        "call_seconds": round(sum(r.latency for r in calls), 3),
    }
