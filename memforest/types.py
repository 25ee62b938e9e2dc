"""Records of the memory: turns, sessions, cells, canonical facts and their occurrences.

Times are floats: seconds since the Unix epoch, UTC. Source time (when something was said) and
event time (when what it asserts happened) are separate fields and are never interchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
        if view is None or view.of is not self.occurrences or view.n != len(self.occurrences):
            view = _Occurrences(self.occurrences)
            self.__dict__["_occurrences_view"] = view
        return view

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


class _Occurrences:
    __slots__ = ("of", "n", "sessions", "first", "_sorted")

    def __init__(self, occurrences: list[Occurrence]) -> None:
        self.of, self.n = occurrences, len(occurrences)
        self.sessions = frozenset(o.session_id for o in occurrences)
        self.first = min(occurrences, key=lambda o: (o.source_time, o.session_id), default=None)
        self._sorted: tuple[str, ...] | None = None

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
