"""What a fact's occurrences imply, kept with the list it was computed from (`OccurrenceView`): a
fact said in many sessions is read often and changed by appending, or loses a deleted session's
occurrences, and its view follows from the old one in either case (`memforest.types.Fact`)."""

from __future__ import annotations

import bisect
from operator import attrgetter
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # (the records import the view)
    from memforest.types import Occurrence

_SESSION = attrgetter("session_id")
_UNKNOWN = object()
_EARLIEST = attrgetter("source_time", "session_id")


class OccurrenceView:
    """Sessions, earliest occurrence and sorted sessions of an occurrence list; a list that grew by
    appends (the way facts change) is brought up to date from its new tail only."""

    __slots__ = ("of", "n", "_sessions", "first", "_sorted")

    def __init__(self, occurrences: list[Occurrence], first: Any = _UNKNOWN) -> None:
        self.of, self.n = occurrences, len(occurrences)
        self._sessions: frozenset[str] | None = None
        self.first = min(occurrences, key=_EARLIEST, default=None) if first is _UNKNOWN else first
        self._sorted: tuple[str, ...] | None = None

    @property
    def sessions(self) -> frozenset[str]:
        """The sessions of the list's first `n` occurrences (lists only grow by appends)."""
        if self._sessions is None:
            self._sessions = frozenset(map(_SESSION, self.of[: self.n]))
        return self._sessions

    def is_prefix_of(self, occurrences: list[Occurrence]) -> bool:
        return (len(occurrences) >= self.n
                and (occurrences is self.of or occurrences[: self.n] == self.of[: self.n]))

    def extended(self, occurrences: list[Occurrence]) -> OccurrenceView:
        tail = occurrences[self.n:]
        out = OccurrenceView.__new__(OccurrenceView)
        out.of, out.n = occurrences, len(occurrences)
        new = set(map(_SESSION, tail)) - self.sessions
        out._sessions = self.sessions | new if new else self.sessions
        earliest = min(tail, key=_EARLIEST, default=None)
        out.first = (self.first if earliest is None or (self.first is not None
                                                        and _EARLIEST(self.first) <= _EARLIEST(earliest))
                     else earliest)
        out._sorted = None
        if self._sorted is not None:
            merged = list(self._sorted)
            for sid in sorted(new):
                bisect.insort(merged, sid)
            out._sorted = tuple(merged)
        return out

    def without(self, occurrences: list[Occurrence], session_id: str) -> OccurrenceView:
        """The view of `occurrences`: this one's list less every occurrence from `session_id`."""
        out = OccurrenceView.__new__(OccurrenceView)
        out.of, out.n = occurrences, len(occurrences)
        out._sessions = None if self._sessions is None else self._sessions - {session_id}  # (else when read)
        first = self.first
        out.first = first if first is not None and first.session_id != session_id else \
            min(occurrences, key=_EARLIEST, default=None)
        out._sorted = None
        if self._sorted is not None:
            at = bisect.bisect_left(self._sorted, session_id)
            found = at < len(self._sorted) and self._sorted[at] == session_id
            out._sorted = self._sorted[:at] + self._sorted[at + 1:] if found else self._sorted
        return out

    @property
    def source_time(self) -> float:
        if self.first is None:
            raise ValueError("a fact without occurrences has no source time")
        return self.first.source_time

    @property
    def sorted_sessions(self) -> tuple[str, ...]:
        if self._sorted is None:
            self._sorted = tuple(sorted(self.sessions))
        return self._sorted
