"""Stage clocks for operation reports: consecutive laps, so the stages add up to the wall time.

Time that falls between named laps (releasing a lock, returning from a nested clock) is counted as
`other`, so the stages always partition the wall time and `other` shows what is left unnamed."""

from __future__ import annotations

import time

OTHER = "other"


class Clock:
    """Times consecutive stages into `timings` (seconds, accumulated per stage name)."""

    def __init__(self, timings: dict[str, float] | None = None) -> None:
        self.timings: dict[str, float] = {} if timings is None else timings
        self.start = self.t = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.timings[name] = round(self.timings.get(name, 0.0) + now - self.t, 6)
        self.t = now

    def merge(self, stages: dict[str, float]) -> None:
        """Add stages timed by another clock that ran inside the current lap (the lap is restarted
        after them, so nothing is counted twice)."""
        now = time.perf_counter()
        inner = 0.0
        for name, seconds in stages.items():
            if name != "total":
                self.timings[name] = round(self.timings.get(name, 0.0) + seconds, 6)
                inner += seconds
        if now - self.t > inner:
            self.timings[OTHER] = round(self.timings.get(OTHER, 0.0) + now - self.t - inner, 6)
        self.t = now

    def total(self) -> dict[str, float]:
        """The timings with `total`: the wall time since the clock started."""
        self.lap(OTHER)
        self.timings["total"] = round(self.t - self.start, 6)
        return self.timings
