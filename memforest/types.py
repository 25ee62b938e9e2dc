"""Records of the memory: turns, sessions, cells, canonical facts and their occurrences.

Times are floats: seconds since the Unix epoch, UTC. Source time (when something was said) and
event time (when what it asserts happened) are separate fields and are never interchanged.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field, replace
from operator import attrgetter

ROLES = ("user", "assistant")
ORIGINS = ("user", "assistant", "mixed", "unknown")
SEMANTIC_ROLES = ("event", "state", "preference", "constraint", "plan", "detail", "reference")


@dataclass(frozen=True)
class Turn:
    role: str
    content: str
    time: float


@dataclass
class Session:
    """`turns`: every turn as given, in order, so a turn's index in the list is the one the caller
    gave it (cells and occurrences name turns by it). A turn with nothing readable is kept blank
    (content "") in its place, and no cell holds it."""

    session_id: str
    time: float
    turns: list[Turn]


@dataclass(frozen=True)
class Cell:
    """A chunk of at most b consecutive turns of one session: the unit of extraction and a
    session-tree leaf."""

    id: str
    session_id: str
    index: int
    turn_lo: int
    turn_hi: int  # inclusive
    time: float
    text: str


@dataclass(frozen=True)
class Occurrence:
    """Where and when a canonical fact was observed."""

    session_id: str
    cell_id: str
    turn_lo: int
    turn_hi: int
    source_time: float
    event_start: float | None = None
    event_end: float | None = None


@dataclass
class Fact:
    """A canonical fact: the stable write unit. Merged duplicates add occurrences."""

    id: str
    text: str
    norm: str
    origin: str
    role: str
    participants: list[str]
    entities: list[str]
    topics: list[str]
    time_text: str
    event_start: float | None
    event_end: float | None
    attribute: str
    domain: str
    collection: str
    occurrences: list[Occurrence] = field(default_factory=list)

    def _view(self) -> _Occurrences:
        """What the occurrences imply, computed once per change of the list (a fact said in many
        sessions is read often and changed by appending)."""
        view: _Occurrences | None = self.__dict__.get("_occurrences_view")
        occ = self.occurrences
        if view is not None and view.of is occ and view.n == len(occ):
            return view
        view = view.extended(occ) if view is not None and view.is_prefix_of(occ) else _Occurrences(occ)
        self.__dict__["_occurrences_view"] = view
        return view

    def drop_session(self, kept: list[Occurrence], session_id: str) -> None:
        """Keep `kept`: these occurrences less every one from `session_id`. What they imply is
        derived from what the old list implied (a fact said in many sessions loses one)."""
        view: _Occurrences | None = self.__dict__.get("_occurrences_view")
        if view is not None and view.of is self.occurrences and view.n == len(self.occurrences):
            self.__dict__["_occurrences_view"] = view.without(kept, session_id)
        self.occurrences = kept

    def copy_for_write(self) -> Fact:
        """A private copy to change (its own occurrence list); what it implies carries over."""
        out = replace(self, occurrences=list(self.occurrences))
        view = self.__dict__.get("_occurrences_view")
        if view is not None:
            out.__dict__["_occurrences_view"] = view
        return out

    @property
    def source_time(self) -> float:
        return self._view().source_time

    @property
    def first(self) -> Occurrence | None:
        """The earliest occurrence (by source time, then session id)."""
        return self._view().first

    @property
    def time(self) -> float:
        """The temporal anchor used to order the fact in a MemTree: event start, else source time."""
        return self.event_start if self.event_start is not None else self.source_time

    @property
    def sessions(self) -> frozenset[str]:
        return self._view().sessions

    @property
    def sorted_sessions(self) -> tuple[str, ...]:
        return self._view().sorted_sessions


_SESSION = attrgetter("session_id")
_EARLIEST = attrgetter("source_time", "session_id")


class _Occurrences:
    """Sessions, earliest occurrence and sorted sessions of an occurrence list; a list that grew by
    appends (the way facts change) is brought up to date from its new tail only."""

    __slots__ = ("of", "n", "sessions", "first", "_sorted")

    def __init__(self, occurrences: list[Occurrence]) -> None:
        self.of, self.n = occurrences, len(occurrences)
        self.sessions = frozenset(map(_SESSION, occurrences))
        self.first = min(occurrences, key=_EARLIEST, default=None)
        self._sorted: tuple[str, ...] | None = None

    def is_prefix_of(self, occurrences: list[Occurrence]) -> bool:
        return (len(occurrences) >= self.n
                and (occurrences is self.of or occurrences[: self.n] == self.of[: self.n]))

    def extended(self, occurrences: list[Occurrence]) -> _Occurrences:
        tail = occurrences[self.n:]
        out = _Occurrences.__new__(_Occurrences)
        out.of, out.n = occurrences, len(occurrences)
        new = set(map(_SESSION, tail)) - self.sessions
        out.sessions = self.sessions | new if new else self.sessions
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

    def without(self, occurrences: list[Occurrence], session_id: str) -> _Occurrences:
        """The view of `occurrences`: this one's list less every occurrence from `session_id`."""
        out = _Occurrences.__new__(_Occurrences)
        out.of, out.n = occurrences, len(occurrences)
        out.sessions = self.sessions - {session_id}
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
