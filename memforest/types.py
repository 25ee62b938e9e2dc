"""Records of the memory: turns, sessions, cells and their stored sentences, canonical facts and
their occurrences, entity labels' members, and scenes. A record of a loaded version reads what it was
loaded without when first needed (`memforest.resident.ondemand.OnDemand`).

Times are floats: seconds since the Unix epoch, UTC. Source time (when something was said) and
event time (when what it asserts happened) are separate fields and are never interchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import Any, NamedTuple

import numpy as np

from memforest.fact_views import OccurrenceView
from memforest.resident.cow import CowMap, CowSet
from memforest.resident.ondemand import NOT_READ, Kind, OnDemand, Source

ROLES = ("user", "assistant")
ORIGINS = ("user", "assistant", "mixed", "unknown")
SEMANTIC_ROLES = ("event", "state", "preference", "constraint", "plan", "detail", "reference")


@dataclass(frozen=True)
class Turn:
    role: str
    content: str
    time: float


class Session:
    """`turns`: every turn as given, in order, so a turn's index in the list is the one the caller
    gave it (cells and occurrences name turns by it). A turn with nothing readable is kept blank
    (content "") in its place, and no cell holds it. A session of a loaded version reads its turns
    from its `source` when they are first needed (`OnDemand`)."""

    __slots__ = ("session_id", "time", "_turns", "_source")
    turns: OnDemand[list[Turn]] = OnDemand("_turns", "turns", "session_id")

    def __init__(self, session_id: str, time: float, turns: list[Turn] | None = None,
                 source: Source | None = None) -> None:
        if turns is None and source is None:
            raise ValueError(f"session {session_id!r} has neither turns nor a source")
        self.session_id, self.time = session_id, time
        self._turns = turns if turns is not None else NOT_READ
        self._source = source if turns is None else None

    @property
    def is_read(self) -> bool:
        return self._turns is not NOT_READ

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Session):
            return NotImplemented
        return (self.session_id, self.time, self.turns) == (other.session_id, other.time, other.turns)

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple:
        return Session, (self.session_id, self.time, self.turns)

    def __repr__(self) -> str:
        turns = f"{len(self.turns)} turns" if self.is_read else "turns not read"
        return f"Session({self.session_id!r}, {self.time!r}, {turns})"


class Cell:
    """A chunk of at most b consecutive turns of one session: the unit of extraction and a
    session-tree leaf. Immutable; a cell of a loaded version reads its text from its `source` when
    it is first needed (`OnDemand`)."""

    __slots__ = ("id", "session_id", "index", "turn_lo", "turn_hi", "time", "_text", "_source")
    id: str
    session_id: str
    index: int
    turn_lo: int
    turn_hi: int  # inclusive
    time: float
    _text: str  # (or `NOT_READ`)
    text: OnDemand[str] = OnDemand("_text", "text", "id")

    def __init__(self, id: str, session_id: str, index: int, turn_lo: int, turn_hi: int, time: float,
                 text: str | None = None, source: Source | None = None) -> None:
        if text is None and source is None:
            raise ValueError(f"cell {id!r} has neither text nor a source")
        put = object.__setattr__
        put(self, "id", id)
        put(self, "session_id", session_id)
        put(self, "index", index)
        put(self, "turn_lo", turn_lo)
        put(self, "turn_hi", turn_hi)
        put(self, "time", time)
        put(self, "_text", text if text is not None else NOT_READ)
        put(self, "_source", source if text is None else None)

    @property
    def is_read(self) -> bool:
        return self._text is not NOT_READ

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
        text = repr(self.text) if self.is_read else "text not read"
        return (f"Cell({self.id!r}, {self.session_id!r}, {self.index}, {self.turn_lo}, {self.turn_hi}, "
                f"{self.time!r}, {text})")


@dataclass(frozen=True)
class CellSentences:
    """What the store holds of a cell's sentences (`memforest.sentences`): the words of its turns,
    and its sentences' vectors, one row each (None: not embedded, the cell being no longer than the
    write's leaf vector read; no rows: it has no sentence long enough)."""

    words: int
    vectors: np.ndarray | None


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


_FACT_FIELDS = ("id", "text", "norm", "origin", "role", "participants", "entities", "topics", "time_text",
                "event_start", "event_end", "attribute", "domain", "collection")
# what a loaded fact reads when first needed, in one read: every field but its id, normalised text and
# event start (what dedup and a leaf's place in a tree need: `time`)
FACT_DETAIL = tuple(name for name in _FACT_FIELDS if name not in ("id", "norm", "event_start"))
_DETAIL_SLOTS = tuple(f"_{name}" for name in FACT_DETAIL)


def _detail(name: str) -> OnDemand[Any]:
    """A field of `FACT_DETAIL`: one read of a fact's ("fact") gives it with the others."""
    return OnDemand(f"_{name}", "fact", "id", _DETAIL_SLOTS)


_EARLIEST = attrgetter("source_time", "session_id")  # the order of `Fact.first`


class Appended:
    """What a copy of a loaded fact whose occurrences are not read holds instead of them
    (`Fact.copy_for_write`): the loaded fact (`root`, whose occurrences the store holds), the
    occurrences appended since (`tail`), and the root's earliest source time (`root_time`, as its
    fact table row's meta holds it). The copy reads its occurrences through it (a `Source`: the
    root's, then the tail), so a fact said again in a new session is written without reading the
    thousands of sessions that said it before (`memforest.store.commit`). The root's own reads are
    bounded to the rows it was loaded with (`StoreTreeSource.last_seqs`)."""

    __slots__ = ("root", "tail", "root_time", "lock", "waiting")

    def __init__(self, root: Fact, tail: list[Occurrence], root_time: float, store: Source) -> None:
        self.root, self.tail, self.root_time = root, tail, root_time
        self.lock, self.waiting = store.lock, store.waiting  # (the root's: its reads take them again)

    def read(self, kind: Kind, key: Any) -> Any:
        """The copy's occurrences (its fields were copied read: `Fact.copy_for_write`)."""
        if kind != "occurrences":
            raise ValueError(f"an appended fact reads no {kind!r}")
        return [*self.root.occurrences, *self.tail]

    def extended(self) -> Appended:
        """A copy of its own tail, for the next version's copy of the fact."""
        out = Appended.__new__(Appended)
        out.root, out.tail, out.root_time = self.root, list(self.tail), self.root_time
        out.lock, out.waiting = self.lock, self.waiting
        return out

    @property
    def source_time(self) -> float:
        return min(self.root_time, min((o.source_time for o in self.tail), default=self.root_time))

    def first_of_tail(self) -> Occurrence | None:
        """The earliest occurrence when it is one of the tail's, earlier than every one of the root's;
        None when it may be the root's (the root's earliest source time is not later)."""
        first = min(self.tail, key=_EARLIEST, default=None)
        return first if first is not None and first.source_time < self.root_time else None

    def keeps_root_first(self) -> bool:
        """Whether the root's earliest occurrence is still the earliest (every appended one later)."""
        return all(o.source_time > self.root_time for o in self.tail)


class Fact:
    """A canonical fact: the stable write unit. Merged duplicates add occurrences. A fact of a
    loaded version may read its occurrences, and its fields but the id, normalised text and event
    start (`FACT_DETAIL`, all in one read), from its `source` when they are first needed
    (`OnDemand`); a fact shared with older versions is replaced, never changed (`copy_for_write`).
    A copy of a loaded fact made to be said again leaves its occurrences unread (`Appended`)."""

    __slots__ = ("id", "norm", "event_start", *_DETAIL_SLOTS, "_occ", "_source", "_implied")
    id: str
    norm: str
    event_start: float | None
    text: OnDemand[str] = _detail("text")
    origin: OnDemand[str] = _detail("origin")
    role: OnDemand[str] = _detail("role")
    participants: OnDemand[list[str]] = _detail("participants")
    entities: OnDemand[list[str]] = _detail("entities")
    topics: OnDemand[list[str]] = _detail("topics")
    time_text: OnDemand[str] = _detail("time_text")
    event_end: OnDemand[float | None] = _detail("event_end")
    attribute: OnDemand[str] = _detail("attribute")
    domain: OnDemand[str] = _detail("domain")
    collection: OnDemand[str] = _detail("collection")
    occurrences: OnDemand[list[Occurrence]] = OnDemand("_occ", "occurrences", "id")

    def __init__(self, id: str, text: str, norm: str, origin: str, role: str, participants: list[str],
                 entities: list[str], topics: list[str], time_text: str, event_start: float | None,
                 event_end: float | None, attribute: str, domain: str, collection: str,
                 occurrences: list[Occurrence] | None = None) -> None:
        self.id, self.norm, self.event_start = id, norm, event_start
        self._text, self._origin, self._role, self._time_text = text, origin, role, time_text
        self._participants, self._entities, self._topics = participants, entities, topics
        self._event_end, self._attribute = event_end, attribute
        self._domain, self._collection = domain, collection
        self._occ = occurrences if occurrences is not None else []
        self._source: Source | None = None  # a loaded fact's (`unread`)
        # what the occurrences imply (`_view`), kept with the list it was computed from
        self._implied: OccurrenceView | None = None

    @classmethod
    def unread(cls, id: str, norm: str, event_start: float | None, source: Source) -> Fact:
        """A fact of a loaded version known by its id, normalised text and event start; the rest is
        read from `source` when first needed."""
        out = cls.__new__(cls)
        out.id, out.norm, out.event_start = id, norm, event_start
        out._text = out._origin = out._role = out._participants = out._entities = out._topics = NOT_READ
        out._time_text = out._event_end = out._attribute = out._domain = out._collection = NOT_READ
        out._occ, out._source, out._implied = NOT_READ, source, None
        return out

    @property
    def is_read(self) -> bool:
        """Whether its occurrences and every field are read (nothing left to read from the store)."""
        return self._occ is not NOT_READ and self._text is not NOT_READ  # (`FACT_DETAIL`: read together)

    @property
    def knows_time(self) -> bool:
        """Whether `time` needs nothing read from the store (an event start, its occurrences read, or
        the root's earliest source time of an `appended` copy)."""
        return self.event_start is not None or self._occ is not NOT_READ or isinstance(self._source, Appended)

    @property
    def appended(self) -> Appended | None:
        """What a copy whose occurrences are not read holds instead (`copy_for_write`); else None."""
        source = self._source
        return source if self._occ is NOT_READ and isinstance(source, Appended) else None

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
        if self._text is NOT_READ:
            return f"Fact({self.id!r}, norm={self.norm!r}, event_start={self.event_start!r}, not read)"
        occ = f"{len(self._occ)} occurrences" if self._occ is not NOT_READ else "occurrences not read"
        return f"Fact({', '.join(map(repr, self._fields()))}, {occ})"

    def _view(self) -> OccurrenceView:
        """What the occurrences imply, computed once per change of the list (a fact said in many
        sessions is read often and changed by appending)."""
        view = self._implied
        occ = self.occurrences
        if view is not None and view.of is occ and view.n == len(occ):
            return view
        view = view.extended(occ) if view is not None and view.is_prefix_of(occ) else OccurrenceView(occ)
        self._implied = view
        return view

    def knows_first(self, first: Occurrence | None) -> None:
        """Record the earliest occurrence of the current list, found by its reader (a load), so
        what depends on it alone (`time`, `first`) is not computed again."""
        self._implied = OccurrenceView(self.occurrences, first)

    def drop_session(self, kept: list[Occurrence], session_id: str) -> None:
        """Keep `kept`: these occurrences less every one from `session_id`. What they imply is
        derived from what the old list implied (a fact said in many sessions loses one)."""
        view = self._implied
        if view is not None and view.of is self.occurrences and view.n == len(self.occurrences):
            self._implied = view.without(kept, session_id)
        self.occurrences = kept

    def copy_for_write(self, root_time: float | None = None) -> Fact:
        """A private copy to change (its own occurrence list); what it implies carries over. Of a
        loaded fact without an event start whose occurrences are not read, given its earliest source
        time (`root_time`, as its fact table row's meta holds it), or of such a copy: a copy whose
        occurrences stay unread, to be said again (`add_occurrence`; `Appended`)."""
        out = Fact.__new__(Fact)
        out.id, out.norm, out.event_start = self.id, self.norm, self.event_start
        for slot, name in zip(_DETAIL_SLOTS, FACT_DETAIL):
            setattr(out, slot, getattr(self, name))
        out._implied = self._implied
        appended, source = self.appended, self._source
        if appended is not None:
            out._occ, out._source = NOT_READ, appended.extended()
        elif (root_time is not None and self._occ is NOT_READ and self.event_start is None
              and source is not None and source.read("last_seq", self.id) is not None):
            out._occ, out._source = NOT_READ, Appended(self, [], root_time, source)
        else:
            out._occ, out._source = list(self.occurrences), None
        return out

    def add_occurrence(self, occurrence: Occurrence) -> None:
        """Say the fact again (at the end of its occurrences; not read for it when `appended`)."""
        appended = self.appended
        if appended is not None:
            appended.tail.append(occurrence)
        else:
            self.occurrences.append(occurrence)

    def appended_since(self, older: Fact) -> list[Occurrence] | None:
        """The occurrences this fact appended to `older` (an earlier version of it), when it is an
        `appended` copy of it or of its root, neither read; None otherwise (compare the lists)."""
        appended = self.appended
        if appended is None:
            return None
        if older is appended.root:
            return list(appended.tail)
        was = older.appended
        if was is None or was.root is not appended.root or appended.tail[: len(was.tail)] != was.tail:
            return None
        return appended.tail[len(was.tail):]

    def said_in(self, session_id: str) -> bool:
        """Whether some occurrence is from `session_id`; a loaded fact whose occurrences are not
        read asks its source (one probe of an index), an `appended` one its tail first."""
        appended = self.appended
        if appended is not None:
            return any(o.session_id == session_id for o in appended.tail) or appended.root.said_in(session_id)
        source = self._source
        if self._occ is NOT_READ and source is not None:
            with source.waiting, source.lock:
                if self._occ is NOT_READ:
                    return bool(source.read("said", (self.id, session_id)))
        return session_id in self.sessions

    @property
    def source_time(self) -> float:
        appended = self.appended
        return appended.source_time if appended is not None else self._view().source_time

    @property
    def first(self) -> Occurrence | None:
        """The earliest occurrence (by source time, then session id)."""
        appended = self.appended
        if appended is not None and (first := appended.first_of_tail()) is not None:
            return first
        return self._view().first

    @property
    def keeps_root_first(self) -> bool:
        """Whether this is an `appended` copy whose earliest occurrence is still its root's (so the
        fact table row's meta of the version it was copied from holds its time and first session)."""
        appended = self.appended
        return appended is not None and appended.keeps_root_first()

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


_MEMBERS = ("_facts", "_sessions")  # what one read of a label's members ("members") gives


class EntityStat:
    """A label's facts and per-session fact counts. A copy made for a write records the members it
    changes (`edited`), so a commit writes those rows only. A label of a loaded version reads its
    members from its `source` when they are first needed (`OnDemand`: both in one read)."""

    __slots__ = ("label", "_facts", "_sessions", "tree_id", "edited", "_source")
    facts: OnDemand[CowSet[str]] = OnDemand("_facts", "members", "label", _MEMBERS)
    sessions: OnDemand[CowMap[str, int]] = OnDemand("_sessions", "members", "label", _MEMBERS)  # id -> facts

    def __init__(self, label: str, facts: CowSet[str] | None = None, sessions: CowMap[str, int] | None = None,
                 tree_id: str | None = None, edited: tuple[set[str], set[str]] | None = None,
                 source: Source | None = None) -> None:
        self.label, self.tree_id = label, tree_id
        self.edited = edited  # facts, sessions
        self._source = source if facts is None and sessions is None else None
        unread = self._source is not None
        self._facts = NOT_READ if unread else facts if facts is not None else CowSet()
        self._sessions = NOT_READ if unread else sessions if sessions is not None else CowMap()

    @property
    def is_read(self) -> bool:
        return self._facts is not NOT_READ and self._sessions is not NOT_READ

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, EntityStat):
            return NotImplemented
        return (self.label, self.tree_id, self.facts, self.sessions) == (
            other.label, other.tree_id, other.facts, other.sessions)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        members = f"{len(self.facts)} facts" if self.is_read else "members not read"
        return f"EntityStat({self.label!r}, {members}, tree_id={self.tree_id!r})"

    def copy(self) -> EntityStat:
        """A private version (copy-on-write: O(the edits since the last fold), not O(members))."""
        return EntityStat(self.label, self.facts.fork(), self.sessions.fork(), self.tree_id, (set(), set()))

    def add_fact(self, fact_id: str) -> None:
        self.facts.add(fact_id)
        if self.edited is not None:
            self.edited[0].add(fact_id)

    def discard_fact(self, fact_id: str) -> None:
        self.facts.discard(fact_id)
        if self.edited is not None:
            self.edited[0].add(fact_id)

    def count(self, session_id: str, delta: int) -> None:
        n = self.sessions.get(session_id, 0) + delta
        if n > 0:
            self.sessions[session_id] = n
        else:
            self.sessions.pop(session_id, None)
        if self.edited is not None:
            self.edited[1].add(session_id)


@dataclass
class Scene:
    """An online cluster of facts. `total` is the sum of its members' embeddings, so adding and
    removing members are exact inverses; `centroid` is its direction."""

    scene_id: str
    domain: str
    total: np.ndarray
    size: int
    t_last: float
    tree_id: str

    @property
    def centroid(self) -> np.ndarray:
        norm = float(np.linalg.norm(self.total))
        return self.total / norm if norm else self.total
