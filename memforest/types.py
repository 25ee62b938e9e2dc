"""Records of the memory: turns, sessions, cells, canonical facts and their occurrences.

Times are floats: seconds since the Unix epoch, UTC. Source time (when something was said) and
event time (when what it asserts happened) are separate fields and are never interchanged.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, NamedTuple, Protocol

ROLES = ("user", "assistant")
ORIGINS = ("user", "assistant", "mixed", "unknown")
SEMANTIC_ROLES = ("event", "state", "preference", "constraint", "plan", "detail", "reference")


@dataclass(frozen=True)
class Turn:
    role: str
    content: str
    time: float


class TextSource(Protocol):
    """Where the turns of a loaded version's sessions and the text of its cells are read the first
    time something needs them (the store, in the snapshot the version was loaded from)."""

    def session_turns(self, session_id: str) -> list[Turn]: ...

    def cell_text(self, cell_id: str) -> str: ...


class Session:
    """`turns`: every turn as given, in order, so a turn's index in the list is the one the caller
    gave it (cells and occurrences name turns by it). A turn with nothing readable is kept blank
    (content "") in its place, and no cell holds it. A session of a loaded version reads its turns
    from its `source` when they are first needed (then keeps them)."""

    __slots__ = ("session_id", "time", "_turns", "_source")

    def __init__(self, session_id: str, time: float, turns: list[Turn] | None = None,
                 source: TextSource | None = None) -> None:
        if turns is None and source is None:
            raise ValueError(f"session {session_id!r} has neither turns nor a source")
        self.session_id, self.time = session_id, time
        self._turns, self._source = turns, source if turns is None else None

    @property
    def turns(self) -> list[Turn]:
        turns = self._turns
        if turns is None:
            assert self._source is not None
            turns = self._turns = self._source.session_turns(self.session_id)
            self._source = None
        return turns

    @property
    def is_read(self) -> bool:
        return self._turns is not None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Session):
            return NotImplemented
        return (self.session_id, self.time, self.turns) == (other.session_id, other.time, other.turns)

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple:
        return Session, (self.session_id, self.time, self.turns)

    def __repr__(self) -> str:
        turns = f"{len(self._turns)} turns" if self._turns is not None else "turns not read"
        return f"Session({self.session_id!r}, {self.time!r}, {turns})"


class Cell:
    """A chunk of at most b consecutive turns of one session: the unit of extraction and a
    session-tree leaf. Immutable; a cell of a loaded version reads its text from its `source` when
    it is first needed (then keeps it)."""

    __slots__ = ("id", "session_id", "index", "turn_lo", "turn_hi", "time", "_text", "_source")
    id: str
    session_id: str
    index: int
    turn_lo: int
    turn_hi: int  # inclusive
    time: float
    _text: str | None
    _source: TextSource | None

    def __init__(self, id: str, session_id: str, index: int, turn_lo: int, turn_hi: int, time: float,
                 text: str | None = None, source: TextSource | None = None) -> None:
        if text is None and source is None:
            raise ValueError(f"cell {id!r} has neither text nor a source")
        put = object.__setattr__
        put(self, "id", id)
        put(self, "session_id", session_id)
        put(self, "index", index)
        put(self, "turn_lo", turn_lo)
        put(self, "turn_hi", turn_hi)
        put(self, "time", time)
        put(self, "_text", text)
        put(self, "_source", source if text is None else None)

    @property
    def text(self) -> str:
        text = self._text
        if text is None:
            assert self._source is not None
            text = self._source.cell_text(self.id)
            object.__setattr__(self, "_text", text)
            object.__setattr__(self, "_source", None)
        return text

    @property
    def is_read(self) -> bool:
        return self._text is not None

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a Cell is immutable (cannot set {name!r})")

    def _key(self) -> tuple:
        return (self.id, self.session_id, self.index, self.turn_lo, self.turn_hi, self.time)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Cell):
            return NotImplemented
        return self._key() == other._key() and self.text == other.text

    def __hash__(self) -> int:
        return hash(self._key())

    def __reduce__(self) -> tuple:
        return Cell, (*self._key(), self.text)

    def __repr__(self) -> str:
        text = repr(self._text) if self._text is not None else "text not read"
        return (f"Cell({self.id!r}, {self.session_id!r}, {self.index}, {self.turn_lo}, {self.turn_hi}, "
                f"{self.time!r}, {text})")


class Occurrence(NamedTuple):
    """Where and when a canonical fact was observed (a named tuple: immutable, compact, and quick to
    make for the hundreds of thousands a large memory loads)."""

    session_id: str
    cell_id: str
    turn_lo: int
    turn_hi: int
    source_time: float
    event_start: float | None = None
    event_end: float | None = None


class FactSource(Protocol):
    """Where the fields and occurrences of a loaded version's facts are read the first time something
    needs them (the store, in the snapshot the version was loaded from)."""

    def fact_occurrences(self, fact_id: str) -> list[Occurrence]: ...

    def fact_detail(self, fact_id: str) -> tuple: ...  # the values of `FACT_DETAIL`, in order


_FACT_FIELDS = ("id", "text", "norm", "origin", "role", "participants", "entities", "topics", "time_text",
                "event_start", "event_end", "attribute", "domain", "collection")
# what a loaded fact reads when first needed: every field but its id, normalised text and event start
# (what dedup and a leaf's place in a tree need: `time`)
FACT_DETAIL = tuple(name for name in _FACT_FIELDS if name not in ("id", "norm", "event_start"))
_DETAIL = frozenset(FACT_DETAIL)


class Fact:
    """A canonical fact: the stable write unit. Merged duplicates add occurrences. A fact of a
    loaded version may read its occurrences, and its fields but the id, normalised text and event
    start (`FACT_DETAIL`), from its `source` when they are first needed (then keeps them); a fact shared
    with older versions is replaced, never changed (`copy_for_write`)."""

    __slots__ = (*_FACT_FIELDS, "_occ", "_source", "_implied")
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

    def __init__(self, id: str, text: str, norm: str, origin: str, role: str, participants: list[str],
                 entities: list[str], topics: list[str], time_text: str, event_start: float | None,
                 event_end: float | None, attribute: str, domain: str, collection: str,
                 occurrences: list[Occurrence] | None = None) -> None:
        self.id, self.text, self.norm, self.origin, self.role = id, text, norm, origin, role
        self.participants, self.entities, self.topics = participants, entities, topics
        self.time_text = time_text
        self.event_start, self.event_end, self.attribute = event_start, event_end, attribute
        self.domain, self.collection = domain, collection
        self._occ: list[Occurrence] | None = occurrences if occurrences is not None else []
        self._source: FactSource | None = None  # a loaded fact's (`unread`)
        # what the occurrences imply (`_view`), kept with the list it was computed from
        self._implied: _Occurrences | None = None

    @classmethod
    def unread(cls, id: str, norm: str, event_start: float | None, source: FactSource) -> Fact:
        """A fact of a loaded version known by its id, normalised text and event start; the rest is
        read from `source` when first needed."""
        out = cls.__new__(cls)
        out.id, out.norm, out.event_start = id, norm, event_start
        out._occ, out._source, out._implied = None, source, None
        return out

    def __getattr__(self, name: str) -> Any:
        """A field of `FACT_DETAIL` not read yet (its slot is empty): read with the others."""
        if name not in _DETAIL or self._source is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        self.take_detail(self._source.fact_detail(self.id))
        return object.__getattribute__(self, name)

    def take_detail(self, values: tuple) -> None:
        """Set the fields of `FACT_DETAIL` to `values` (read by a bulk reader)."""
        for name, value in zip(FACT_DETAIL, values, strict=True):
            setattr(self, name, value)

    @property
    def occurrences(self) -> list[Occurrence]:
        occ = self._occ
        if occ is None:
            assert self._source is not None
            occ = self._occ = self._source.fact_occurrences(self.id)
        return occ

    @occurrences.setter
    def occurrences(self, value: list[Occurrence]) -> None:
        self._occ = value

    @property
    def occurrences_read(self) -> bool:
        return self._occ is not None

    @property
    def is_read(self) -> bool:
        """Whether its occurrences and every field are read (nothing left to read from the store)."""
        return self._occ is not None and (self._source is None or _detail_read(self))

    def _fields(self) -> tuple:
        return tuple(getattr(self, name) for name in _FACT_FIELDS)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Fact):
            return NotImplemented
        return self._fields() == other._fields() and self.occurrences == other.occurrences

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple:
        return Fact, (*self._fields(), self.occurrences)

    def __repr__(self) -> str:
        if self._source is not None and not _detail_read(self):
            return f"Fact({self.id!r}, norm={self.norm!r}, event_start={self.event_start!r}, not read)"
        occ = f"{len(self._occ)} occurrences" if self._occ is not None else "occurrences not read"
        return f"Fact({', '.join(map(repr, self._fields()))}, {occ})"

    def _view(self) -> _Occurrences:
        """What the occurrences imply, computed once per change of the list (a fact said in many
        sessions is read often and changed by appending)."""
        view = self._implied
        occ = self.occurrences
        if view is not None and view.of is occ and view.n == len(occ):
            return view
        view = view.extended(occ) if view is not None and view.is_prefix_of(occ) else _Occurrences(occ)
        self._implied = view
        return view

    def knows_first(self, first: Occurrence | None) -> None:
        """Record the earliest occurrence of the current list, found by its reader (a load), so
        what depends on it alone (`time`, `first`) is not computed again."""
        self._implied = _Occurrences(self.occurrences, first)

    def drop_session(self, kept: list[Occurrence], session_id: str) -> None:
        """Keep `kept`: these occurrences less every one from `session_id`. What they imply is
        derived from what the old list implied (a fact said in many sessions loses one)."""
        view = self._implied
        if view is not None and view.of is self.occurrences and view.n == len(self.occurrences):
            self._implied = view.without(kept, session_id)
        self.occurrences = kept

    def copy_for_write(self) -> Fact:
        """A private copy to change (its own occurrence list); what it implies carries over."""
        out = Fact.__new__(Fact)
        for name in _FACT_FIELDS:
            setattr(out, name, getattr(self, name))
        out._occ, out._source, out._implied = list(self.occurrences), None, self._implied
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


def _detail_read(fact: Fact) -> bool:
    """Whether the fact's `FACT_DETAIL` fields are set (given when it was made, or read since)."""
    try:
        _TEXT_SLOT.__get__(fact, Fact)
    except AttributeError:
        return False
    return True


_TEXT_SLOT = Fact.__dict__["text"]


_SESSION = attrgetter("session_id")
_UNKNOWN = object()
_EARLIEST = attrgetter("source_time", "session_id")


class _Occurrences:
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

    def extended(self, occurrences: list[Occurrence]) -> _Occurrences:
        tail = occurrences[self.n:]
        out = _Occurrences.__new__(_Occurrences)
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

    def without(self, occurrences: list[Occurrence], session_id: str) -> _Occurrences:
        """The view of `occurrences`: this one's list less every occurrence from `session_id`."""
        out = _Occurrences.__new__(_Occurrences)
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
