"""Reading a loaded version when first needed. One field descriptor, `OnDemand`, reads what a record
or a tree of the version was loaded without through one protocol, `Source` (the store, in the
snapshot the version was loaded from): a session's turns, a cell's text, a fact's fields and
occurrences, an entity label's members, a tree's structure (`TreeInfo.tree`). Beside it: the node
data of the version's trees, read with them (`LazyNodeMap` over a `NodeSource`), what the indexes
need of the trees not read yet at the open (`BulkRows`), and the node data a tree's nodes carry
(`NodeData`)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, TypeVar, overload

import numpy as np

from memforest.resident.cow import _MISSING, FOLD_AT, CowMap

if TYPE_CHECKING:  # (names for annotations only: the trees and the records use the wing)
    from memforest.trees.memtree import MemTree

NodeKey = tuple[str, int]  # (tree id, node id)
T = TypeVar("T")
# what a source reads, each by the key of what reads it: a session's turns (its id), a cell's text, a
# fact's fields but its id, normalised text and event start (the values of `memforest.types.FACT_DETAIL`,
# in order), a fact's occurrences, an entity label's facts and per-session fact counts (a label), a
# tree's structure (a tree id), a node's data (a `NodeKey`; None when the version has no such node), a
# fact's normalised text and event start (its id: `memforest.store.loaded_facts`), a cell's row but its
# text (its id) and a session's cells in order (a session id: `memforest.store.loaded_cells`); and two
# answers about a fact's occurrences without reading them: whether one is from a session (a (fact id,
# session id) pair: "said"), and the last sequence number of its rows, from which on the fact reads
# its rows no further, its later ones being appended by commits of this process (its id: "last_seq";
# `memforest.types.Appended`)
Kind = Literal["turns", "text", "fact", "occurrences", "members", "tree", "node", "fact_key", "cell_row",
               "session_cells", "said", "last_seq"]


class Waiting:
    """How many threads are inside (a context manager and a count; true while any is)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._n = 0

    def __enter__(self) -> Waiting:
        with self._lock:
            self._n += 1
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._n -= 1

    def __len__(self) -> int:  # (true while any is inside)
        return self._n


class Source(Protocol):
    """Where a loaded version reads what it was loaded without, by `Kind` and key (the store, in the
    snapshot the version was loaded from: `memforest.store.tree_source`). A record reads while
    holding `lock` and counted in `waiting` (a read ahead gives way to it)."""

    @property
    def lock(self) -> threading.RLock: ...

    @property
    def waiting(self) -> Waiting: ...

    def read(self, kind: Kind, key: Any) -> Any: ...


class _NotRead:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NOT_READ"


NOT_READ: Any = _NotRead()  # what the slot of a field not read yet holds (`OnDemand`)


class OnDemand(property, Generic[T]):
    """A field of a record that a loaded version reads from its source the first time something needs
    it, and then keeps. The value is held in the record's slot `slot`, which holds `NOT_READ` until
    it is read: then the record's source (its `_source` slot) is asked to `read(kind, key)`, `key`
    being the value of the record's attribute of that name, under the source's lock, where the slot
    is looked at again (another thread may have read it meanwhile). Setting the field sets its slot.
    A record whose last such field is read or set so forgets its source.

    Fields read together name their slots, the field's own among them, in `together`: one read gives
    a value for each, in that order, and fills them all, so they are read or not read together.
    Setting one of them while they are not read reads them first (what is set then stays set).

    A property whose getter is a closure: a field read costs what a hand-written property's does."""

    def __init__(self, slot: str, kind: Kind, key: str, together: tuple[str, ...] = ()) -> None:
        get, key_of, source_of = attrgetter(slot), attrgetter(key), attrgetter("_source")
        self._slots = together or (slot,)
        self._get = get
        self._put: Any = object.__setattr__  # (`setattr` where the record takes it: `__set_name__`)
        self._marks: Any = None  # one slot of each set of fields read together (`_forget_source`)

        def read(record: Any) -> Any:
            value = get(record)
            if value is NOT_READ:
                source = source_of(record)
                if source is None:
                    raise ValueError(f"{type(record).__name__} {key_of(record)!r} has no {slot[1:]} and no "
                                     "source to read it from")
                with source.waiting, source.lock:  # a read ahead gives way (`StoreTreeSource.warm`)
                    if get(record) is NOT_READ:
                        self.take(record, source.read(kind, key_of(record)))
                        self._forget_source(record)
                value = get(record)
            return value

        def write(record: Any, value: Any) -> None:
            setattr(record, slot, value)
            self._forget_source(record)

        def write_read(record: Any, value: Any) -> None:
            if get(record) is NOT_READ:
                read(record)  # the others first: a read later would need the source
            setattr(record, slot, value)

        super().__init__(read, write_read if len(self._slots) > 1 else write)

    def __set_name__(self, owner: type, name: str) -> None:
        if owner.__setattr__ is object.__setattr__:  # (else it refuses assignment: an immutable `Cell`)
            self._put = setattr

    def take(self, record: object, value: Any) -> None:
        """Keep `value`, what one read of the field's kind gives for `record` (of fields read together,
        a value for each), unless the field is read already: how a reader of many records at once
        fills them (a record filled so keeps its source, as cheap to fill as a slot)."""
        if self._get(record) is NOT_READ:
            put, slots = self._put, self._slots
            if len(slots) == 1:
                put(record, slots[0], value)
            else:
                for slot, one in zip(slots, value, strict=True):
                    put(record, slot, one)

    def _forget_source(self, record: object) -> None:
        """Drop the record's source when it has nothing left to read from it (a record keeps no
        snapshot of the store alive once read, and pickles as one made whole)."""
        marks = self._marks
        if marks is None:
            groups = {d._slots: d._slots[0] for d in vars(type(record)).values() if isinstance(d, OnDemand)}
            marks = self._marks = tuple(map(attrgetter, groups.values()))
        for mark in marks:
            if mark(record) is NOT_READ:
                return
        self._put(record, "_source", None)

    def is_read(self, record: object) -> bool:
        """Whether `record` holds the field (given when it was made, or read since)."""
        return self._get(record) is not NOT_READ

    if TYPE_CHECKING:  # (the field's type, for the type checker; the property's own methods run)
        @overload
        def __get__(self, record: None, owner: type | None = None, /) -> OnDemand[T]: ...

        @overload
        def __get__(self, record: object, owner: type | None = None, /) -> T: ...

        def __get__(self, record: object, owner: type | None = None, /) -> Any: ...

        def __set__(self, record: Any, value: T, /) -> None: ...


@dataclass(frozen=True)
class CellRows:
    """The session trees' leaves as a cache holds them, in arrays: tree `trees[i]` has the leaves
    `bounds[i]:bounds[i + 1]`, each with its node id (`nids`), cell id (`items`) and vector (`vecs`)."""

    trees: list[str]
    bounds: np.ndarray
    nids: np.ndarray
    items: Sequence[str]  # (a cache's: `PackedKeys`)
    vecs: np.ndarray


@dataclass
class BulkRows:
    """What the indexes of a loaded version need of trees not yet read, read at the open in the
    version's snapshot: the leaf items of entity and scene trees (placements), the leaves of session
    trees with their vectors (the cell index) and the root vector of every tree (the root index)."""

    # (a cache's: a mapping that makes each tree's list when first asked for)
    leaf_items: Mapping[str, list[str]] = field(default_factory=dict)
    # (a cache's: a mapping that makes each tree's list when first asked for, over `cells`)
    cell_leaves: Mapping[str, list[tuple[int, str, np.ndarray]]] = field(default_factory=dict)
    roots: dict[str, np.ndarray] = field(default_factory=dict)
    # item -> the entity and scene trees whose leaves hold it, when the rows came with it (a cache's):
    # the version's placements, made for an item when first reached (a `lazy_map.Loaded`)
    held: Any = None
    node_count: int | None = None  # the version's nodes, when the rows came with it (a cache's)
    cells: CellRows | None = None  # the session trees' leaves in arrays, when a cache's


class TreeInfo:
    """One tree of the forest. A tree of a loaded version is read from its source when first reached
    (`tree`); until then its row's root is known (`has_root`) and nothing else."""

    __slots__ = ("tree_id", "family", "label", "rowid", "_tree", "_source", "_root")

    tree: OnDemand[MemTree] = OnDemand("_tree", "tree", "tree_id")

    def __init__(self, tree_id: str, family: str, label: str, rowid: int, tree: MemTree | None = None,
                 source: Source | None = None, root: int | None = None) -> None:
        self.tree_id = tree_id  # "session:<sid>", "entity:user", "entity:<label>", "scene:<n>"
        self.family = family
        self.label = label
        self.rowid = rowid  # stable integer; FAISS ids of the tree's nodes are (rowid << 32) | node id
        if tree is None and source is None:
            raise ValueError(f"tree {tree_id!r} has neither nodes nor a source")
        self._tree = tree if tree is not None else NOT_READ
        self._source = source if tree is None else None
        self._root = root

    @property
    def is_read(self) -> bool:
        """Whether the tree's nodes are in memory (always, for a tree an operation made or changed)."""
        return self._tree is not NOT_READ

    @property
    def has_root(self) -> bool:
        tree = self._tree
        return (tree.root if tree is not NOT_READ else self._root) is not None

    def with_tree(self, tree: MemTree) -> TreeInfo:
        return TreeInfo(self.tree_id, self.family, self.label, self.rowid, tree)

    def __repr__(self) -> str:
        return (f"TreeInfo({self.tree_id!r}, {self.family!r}, {self.label!r}, {self.rowid}, "
                f"read={self.is_read})")


@dataclass(slots=True)
class NodeData:
    """Derived artifacts of a node: its text (leaf evidence or interval summary) and embedding."""

    text: str
    mode: str  # leaf | llm | extractive (extractive marks a degraded or generator-free summary)
    embedding: np.ndarray


class NodeSource(Source, Protocol):
    """What a `LazyNodeMap` reads node data through: a source ("node" reads) and the data it has
    read so far."""

    data: dict[NodeKey, NodeData]  # node data of the trees read so far
    partial: set[str]  # trees read whose nodes' data are not all in `data` yet
    total_nodes: int  # nodes of the version loaded

    def read_ahead(self, keys: Iterable[NodeKey]) -> None: ...

    def ensure_all(self) -> None: ...


_GONE: Any = object()  # a key a version dropped, in a folded base (`LazyNodeMap.fork`)


class LazyNodeMap(CowMap[NodeKey, NodeData]):
    """The node data of a loaded version whose trees are read on demand: a `CowMap` whose base is what
    its `NodeSource` has read so far, a key not read yet read from the source (with its siblings,
    after its tree's structure). A fold (`fork` past `FOLD_AT` private entries) copies what has been
    read into a new base and records the trees whose data it holds whole as `covered`: their keys are
    never looked up in the source again; a dropped key of another tree stays in the base as a
    tombstone, so the source never gives it back."""

    __slots__ = ("_source", "_covered")

    def __init__(self, source: NodeSource) -> None:
        super().__init__()
        self._base = source.data  # grows as trees are read: keys no version has changed
        self._source = source
        self._covered: frozenset[str] = frozenset()
        self._len = source.total_nodes

    def _fallback(self, key: NodeKey) -> Any:
        if key[0] in self._covered:
            return _MISSING
        found = self._source.read("node", key)
        return _MISSING if found is None else found

    def fork(self) -> LazyNodeMap:
        out: LazyNodeMap = LazyNodeMap.__new__(LazyNodeMap)
        out._source, out._len = self._source, self._len
        if len(self._over) + len(self._gone) <= FOLD_AT:
            out._base, out._covered = self._base, self._covered
            out._over, out._gone = dict(self._over), set(self._gone)
            return out
        with self._source.lock:
            data = self._source.data
            base = dict(data) if self._base is data else {  # what a version set or dropped wins
                **{k: v for k, v in data.items() if k[0] not in self._covered}, **self._base}
            covered = self._covered | ({k[0] for k in data} - self._source.partial)
        for key in self._gone:  # a key of a tree whose data are not all read stays gone: a tombstone
            if key[0] in covered:
                base.pop(key, None)
            else:
                base[key] = _GONE
        base.update(self._over)
        out._base, out._covered, out._over, out._gone = base, frozenset(covered), {}, set()
        return out

    def read_ahead(self, keys: Iterable[NodeKey]) -> None:
        """Have the source read, in few statements, those of `keys` this map would read from it."""
        over, gone, base, covered = self._over, self._gone, self._base, self._covered
        self._source.read_ahead(k for k in keys
                                if k not in over and k not in gone and k not in base and k[0] not in covered)

    def __getitem__(self, key: NodeKey) -> NodeData:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def get(self, key: NodeKey, default: Any = None) -> Any:
        value = CowMap.get(self, key, _MISSING)
        if value is _MISSING and key not in self._gone:  # not in the base: not read yet?
            value = self._fallback(key)
        return default if value is _MISSING or value is _GONE else value

    def __contains__(self, key: object) -> bool:
        return self.get(key, _MISSING) is not _MISSING  # type: ignore[arg-type]

    def __delitem__(self, key: NodeKey) -> None:
        if key not in self:
            raise KeyError(key)
        self._over.pop(key, None)
        self._gone.add(key)
        self._len -= 1

    def __iter__(self) -> Iterator[NodeKey]:
        self._source.ensure_all()
        over, gone, base = self._over, self._gone, self._base
        for key, value in base.items():
            if value is not _GONE and key not in over and key not in gone:
                yield key
        if base is not self._source.data:
            for key in list(self._source.data):
                if key[0] not in self._covered and key not in base and key not in over and key not in gone:
                    yield key
        yield from over
