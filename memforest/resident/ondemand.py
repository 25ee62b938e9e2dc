"""Reading a loaded version when first needed: the trees no operation has reached yet (`TreeInfo`,
`LazyNodeMap` over a `TreeSource`), what the indexes need of them at the open (`BulkRows`), and the
node data a tree's nodes carry (`NodeData`)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from memforest.resident.cow import _MISSING, FOLD_AT, CowMap

if TYPE_CHECKING:  # (names for annotations only: the trees and the records may use the wing)
    from memforest.trees.memtree import MemTree
    from memforest.types import Fact

NodeKey = tuple[str, int]  # (tree id, node id)


@dataclass
class BulkRows:
    """What the indexes of a loaded version need of trees not yet read, read at the open in the
    version's snapshot: the leaf items of entity and scene trees (placements), the leaves of session
    trees with their vectors (the cell index) and the root vector of every tree (the root index)."""

    leaf_items: dict[str, list[str]] = field(default_factory=dict)
    cell_leaves: dict[str, list[tuple[int, str, np.ndarray]]] = field(default_factory=dict)
    roots: dict[str, np.ndarray] = field(default_factory=dict)


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

    def __bool__(self) -> bool:
        return self._n > 0


class TreeSource(Protocol):
    """Where the trees of a loaded version that no operation has reached yet are read from (the
    store, in the snapshot the version was loaded from: `memforest.store.tree_source`)."""

    lock: threading.RLock
    data: dict[NodeKey, NodeData]  # node data of the trees read so far
    total_nodes: int  # nodes of the version loaded
    waiting: Waiting  # readers of a tree, waiting for the lock or reading
    bulk: BulkRows | None  # until the indexes of the version loaded are built

    partial: set[str]  # trees read whose nodes' data are not all in `data` yet

    def read_tree(self, info: TreeInfo) -> MemTree: ...

    def node_data(self, key: NodeKey) -> NodeData | None: ...

    def read_ahead(self, keys: Iterable[NodeKey]) -> None: ...

    def read_data(self, tree_id: str) -> None: ...

    def ensure_all(self) -> None: ...

    def read_facts(self, facts: Iterable[Fact]) -> None: ...


class TreeInfo:
    """One tree of the forest. A tree of a loaded version is read from its `TreeSource` when first
    reached (`tree`); until then its row's root is known (`has_root`) and nothing else."""

    __slots__ = ("tree_id", "family", "label", "rowid", "_tree", "_source", "_root")

    def __init__(self, tree_id: str, family: str, label: str, rowid: int, tree: MemTree | None = None,
                 source: TreeSource | None = None, root: int | None = None) -> None:
        self.tree_id = tree_id  # "session:<sid>", "entity:user", "entity:<label>", "scene:<n>"
        self.family = family
        self.label = label
        self.rowid = rowid  # stable integer; FAISS ids of the tree's nodes are (rowid << 32) | node id
        self._tree = tree
        self._source = source if tree is None else None
        self._root = root

    @property
    def tree(self) -> MemTree:
        if self._tree is None:
            source = self._source
            assert source is not None, f"tree {self.tree_id!r} has neither nodes nor a source"
            with source.waiting, source.lock:  # a read ahead gives way (`StoreTreeSource.warm`)
                if self._tree is None:
                    self._tree = source.read_tree(self)
                    self._source = None
        return self._tree

    @tree.setter
    def tree(self, tree: MemTree) -> None:
        self._tree, self._source = tree, None

    @property
    def is_read(self) -> bool:
        """Whether the tree's nodes are in memory (always, for a tree an operation made or changed)."""
        return self._tree is not None

    @property
    def has_root(self) -> bool:
        return (self._tree.root if self._tree is not None else self._root) is not None

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


class MemberSource(Protocol):
    """Where the members of a loaded version's entity labels are read the first time something
    needs them (the store, in the snapshot the version was loaded from)."""

    def entity_members(self, label: str) -> tuple[list[str], dict[str, int]]: ...


_GONE: Any = object()  # a key a version dropped, in a folded base (`LazyNodeMap.fork`)


class LazyNodeMap(CowMap[NodeKey, NodeData]):
    """The node data of a loaded version whose trees are read on demand: a `CowMap` whose base is what
    its `TreeSource` has read so far, a key not read yet read from the source (with its siblings,
    after its tree's structure). A fold (`fork` past `FOLD_AT` private entries) copies what has been
    read into a new base and records the trees whose data it holds whole as `covered`: their keys are
    never looked up in the source again; a dropped key of another tree stays in the base as a
    tombstone, so the source never gives it back."""

    __slots__ = ("_source", "_covered")

    def __init__(self, source: TreeSource) -> None:
        super().__init__()
        self._base = source.data  # grows as trees are read: keys no version has changed
        self._source = source
        self._covered: frozenset[str] = frozenset()
        self._len = source.total_nodes

    def _fallback(self, key: NodeKey) -> Any:
        if key[0] in self._covered:
            return _MISSING
        found = self._source.node_data(key)
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
