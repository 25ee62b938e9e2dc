"""MemTree: a balanced, time-ordered k-ary tree over the items of one scope (pure, no models, no I/O).

Leaves (level 0) hold one item each (a fact id or a dialogue-cell id) and are ordered by the key
``(time, item)``; every leaf sits at the same depth. Internal nodes (levels 1..height) hold ``2..k``
children at the root (a level-1 root may hold ``1..k``) and ``ceil(k/2)..k`` elsewhere; ``k`` is fixed
when the tree is built. Every mutation records which nodes need a summary refresh (``dirty``: new nodes
and nodes whose set of leaves changed) and which rows must be persisted (``changed``, ``removed``).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterable, MutableMapping
from typing import Any

from memforest.resident.cow import CowMap
from memforest.trees.navigation import TreeNavigation
from memforest.trees.node import (
    NO_CHILDREN,
    Key,
    Node,
    TreeInvariantError,
    clone_node,
    height_bound,
    node_from_row,
    node_row,
    require,
)
from memforest.trees.validation import check_structure

# The node record and its row format live in `node`, the read-only walks in `navigation`, the invariant
# checks in `validation`; the names are importable from here as before.
__all__ = ["Key", "MemTree", "Node", "TreeInvariantError", "height_bound", "node_from_row", "node_row"]


class MemTree(TreeNavigation):
    """A time-ordered B+-tree-like index over one scope's items, with dirty and change tracking.

    ``dirty``: ids of nodes created, or whose set of leaves changed at some point, since the last
    `take_dirty` (removed nodes excluded). ``changed`` / ``removed``: ids of nodes created or modified /
    deleted since the last `take_changes`.

    `fork()` returns a copy-on-write version: it shares every node with this tree and clones a node
    only when it first changes it, so a fork costs O(nodes changed) and this tree never changes.
    """

    def __init__(self, tree_id: str, fanout: int, next_node_id: int = 1) -> None:
        if fanout < 3:
            raise ValueError(f"fanout must be >= 3, got {fanout}")
        self.tree_id = tree_id
        self.fanout = fanout
        self.min_children = (fanout + 1) // 2
        self.next_node_id = next_node_id
        self.root: int | None = None
        self.nodes: MutableMapping[int, Node] = {}
        self._leaf_of: MutableMapping[str, int] = {}
        self.dirty: set[int] = set()
        self.changed: set[int] = set()
        self.removed: set[int] = set()
        self._owned: set[int] | None = None  # ids this version may edit in place (None: all)

    def fork(self) -> MemTree:
        """A copy-on-write version of this tree (pending change tracking stays with this one)."""
        out = MemTree.__new__(MemTree)
        out.tree_id, out.fanout, out.min_children = self.tree_id, self.fanout, self.min_children
        out.next_node_id, out.root = self.next_node_id, self.root
        out.nodes, out._leaf_of = _fork_map(self.nodes), _fork_map(self._leaf_of)
        out.dirty, out.changed, out.removed, out._owned = set(), set(), set(), set()
        return out

    def _w(self, node_id: int) -> Node:
        """The node `node_id`, cloned first if this version shares it with an older one."""
        node = self.nodes[node_id]
        if self._owned is None or node_id in self._owned:
            return node
        node = clone_node(node)
        self.nodes[node_id] = node
        self._owned.add(node_id)
        return node

    @property
    def height(self) -> int:
        """Number of internal levels (0 for an empty tree)."""
        return 0 if self.root is None else self.nodes[self.root].level

    def __len__(self) -> int:
        return len(self._leaf_of)

    def __contains__(self, item: object) -> bool:
        return item in self._leaf_of

    def insert(self, item: str, time: float) -> int:
        """Place `item` at `time` and return the new leaf's id; O(k log N)."""
        if item in self._leaf_of:
            raise ValueError(f"item {item!r} is already placed in tree {self.tree_id!r}")
        time = float(time)
        if math.isnan(time):
            raise ValueError(f"time of item {item!r} is NaN")
        key = (time, item)
        if self.root is None:
            leaf = self._new_leaf(item, key, None)
            self.root = self._new_internal(1, None, [leaf.id]).id
            return leaf.id
        parent = self._descend_for_insert(key)
        leaf = self._new_leaf(item, key, parent.id)
        self._link_leaf(parent, leaf)
        node = parent
        while len(node.children) > self.fanout:
            node = self._split(node)
        return leaf.id

    def delete(self, item: str) -> None:
        """Remove `item`'s leaf (KeyError if absent), rebalancing by borrowing from or merging siblings."""
        if item not in self._leaf_of:
            raise KeyError(f"item {item!r} is not in tree {self.tree_id!r}")
        leaf = self.nodes[self._leaf_of.pop(item)]
        self._join(leaf.prev, leaf.next)
        assert leaf.parent is not None
        parent = self._w(leaf.parent)
        pos = parent.children.index(leaf.id)
        del parent.children[pos], parent.child_keys[pos]
        self._remove(leaf.id)
        node: Node | None = parent
        while node is not None:
            up = node.parent
            if node.children:
                self._refresh(node)
                self._mark(node)
            if up is not None and len(node.children) < self.min_children:
                self._rebalance(node)
            node = None if up is None else self._w(up)
        self._shrink_root()

    def merge_from(self, other: MemTree) -> None:
        """Insert every leaf of `other` (item and time); ValueError, and no change, if any item clashes."""
        clash = self._leaf_of.keys() & other._leaf_of.keys()
        if clash:
            raise ValueError(f"items already placed in tree {self.tree_id!r}: {sorted(clash)[:5]}")
        for leaf in other.leaves():
            time, item = leaf.key_lo
            self.insert(item, time)

    def leaf_of(self, item: str) -> int:
        """The id of the leaf holding `item` (KeyError if absent)."""
        return self._leaf_of[item]

    def placements(self) -> dict[str, int]:
        """A copy of the placement map: item -> leaf id."""
        return dict(self._leaf_of)

    def take_dirty(self) -> dict[int, list[int]]:
        """Dirty node ids grouped by level (levels ascending, ids sorted); clears ``dirty``."""
        by_level: dict[int, list[int]] = {}
        for node_id in sorted(self.dirty):
            by_level.setdefault(self.nodes[node_id].level, []).append(node_id)
        self.dirty = set()
        return dict(sorted(by_level.items()))

    def take_changes(self) -> tuple[list[Node], list[int]]:
        """(Nodes created or modified that still exist, ids removed) since the last call; clears both."""
        out = [self.nodes[i] for i in sorted(self.changed)], sorted(self.removed)
        self.changed, self.removed = set(), set()
        return out

    def to_rows(self) -> list[dict[str, Any]]:
        """One row per node, by id; `from_rows` with ``next_node_id`` rebuilds this tree exactly."""
        return [node_row(self.tree_id, self.nodes[i]) for i in sorted(self.nodes)]

    @classmethod
    def from_rows(
        cls, tree_id: str, fanout: int, rows: Iterable[dict[str, Any]],
        next_node_id: int | None = None, validate: bool = True,
    ) -> MemTree:
        """Rebuild a tree from its rows; ``next_node_id`` defaults to the largest id + 1."""
        return cls.from_nodes(tree_id, fanout, map(node_from_row, rows), next_node_id, validate)

    @classmethod
    def from_nodes(
        cls, tree_id: str, fanout: int, nodes: Iterable[Node], next_node_id: int | None = None,
        validate: bool = True,
    ) -> MemTree:
        """`from_rows` for nodes already made from their rows (the tree takes them, their repeated
        fields shared: `_share_fields`)."""
        tree = cls(tree_id, fanout)
        for node in nodes:
            require(node.id not in tree.nodes, f"tree {tree_id!r}: duplicate node id {node.id}")
            tree.nodes[node.id] = node
            if node.parent is None:
                require(tree.root is None, f"tree {tree_id!r}: more than one root row")
                tree.root = node.id
            if node.level == 0 and node.item is not None:
                tree._leaf_of[node.item] = node.id
        tree._share_fields()
        default_next = max(tree.nodes, default=0) + 1
        tree.next_node_id = default_next if next_node_id is None else next_node_id
        require(tree.next_node_id >= default_next, f"tree {tree_id!r}: next_node_id reuses an id")
        if validate:
            tree.validate()
        return tree

    def _share_fields(self) -> None:
        """Derive the internal nodes' child keys, and let every node name a node id, a key and an item
        by the one object the node it names holds (a tree read from rows otherwise holds a string, a
        float and an int per mention): a large tree read from the store is mostly such fields. Lower
        levels first, so a node's key range takes its children's already shared keys."""
        by_id = self.nodes
        for node in sorted((n for n in by_id.values() if n.children), key=lambda n: n.level):
            try:
                kids = [by_id[c] for c in node.children]
            except KeyError:
                why = f"tree {self.tree_id!r}: node {node.id} has a missing child"
                raise TreeInvariantError(why) from None
            node.children = [k.id for k in kids]
            node.child_keys = [k.key_lo for k in kids]
            if node.key_lo == kids[0].key_lo:
                node.key_lo = kids[0].key_lo
            if node.key_hi == kids[-1].key_hi:
                node.key_hi = kids[-1].key_hi
            for k in kids:
                if k.parent == node.id:
                    k.parent = node.id
        for node in by_id.values():
            if node.prev is not None and (prev := by_id.get(node.prev)) is not None:
                node.prev = prev.id
            if node.next is not None and (nxt := by_id.get(node.next)) is not None:
                node.next = nxt.id

    def validate(self) -> None:
        """Raise `TreeInvariantError` if any structural invariant is violated; O(N)."""
        check_structure(self.root, self.nodes, self._leaf_of, self.fanout)
        if self.root is not None:
            require(self.dirty <= self.nodes.keys() and self.changed <= self.nodes.keys(),
                    "tracking removed ids")

    def _mark(self, node: Node) -> None:
        """Record that `node`'s leaf set changed (needs refresh) and its row changed."""
        self.dirty.add(node.id)
        self.changed.add(node.id)

    def _set_parent(self, child_id: int, parent_id: int | None) -> None:
        """Re-parent a node (its row changes, its leaf set does not)."""
        self._w(child_id).parent = parent_id
        self.changed.add(child_id)

    def _new_leaf(self, item: str, key: Key, parent: int | None) -> Node:
        leaf = Node(self.next_node_id, 0, parent, NO_CHILDREN, key, key, item=item, child_keys=NO_CHILDREN)
        self.next_node_id += 1
        self.nodes[leaf.id] = leaf
        if self._owned is not None:
            self._owned.add(leaf.id)
        self._leaf_of[item] = leaf.id
        self._mark(leaf)
        return leaf

    def _new_internal(self, level: int, parent: int | None, children: list[int]) -> Node:
        node = Node(self.next_node_id, level, parent, children)
        self.next_node_id += 1
        self.nodes[node.id] = node
        if self._owned is not None:
            self._owned.add(node.id)
        for child in children:
            self._set_parent(child, node.id)
        self._refresh(node)
        self._mark(node)
        return node

    def _remove(self, node_id: int) -> None:
        del self.nodes[node_id]
        self.dirty.discard(node_id)
        self.changed.discard(node_id)
        self.removed.add(node_id)

    def _refresh(self, node: Node) -> None:
        """Recompute `node`'s child keys, key range and count from its (non-empty, ordered) children."""
        kids = [self.nodes[c] for c in node.children]
        node.child_keys = [k.key_lo for k in kids]
        node.key_lo, node.key_hi = kids[0].key_lo, kids[-1].key_hi
        node.count = sum(k.count for k in kids)

    def _descend_for_insert(self, key: Key) -> Node:
        """The level-1 node that receives `key`; counts and key ranges on the path are updated."""
        dirty, changed = self.dirty, self.changed
        assert self.root is not None
        node = self._w(self.root)
        while True:
            node.count += 1
            if key < node.key_lo:
                node.key_lo = key
            elif key > node.key_hi:
                node.key_hi = key
            dirty.add(node.id)
            changed.add(node.id)
            if node.level == 1:
                return node
            i = bisect_right(node.child_keys, key) - 1
            if i < 0:
                i = 0
                node.child_keys[0] = key
            node = self._w(node.children[i])

    def _link_leaf(self, parent: Node, leaf: Node) -> None:
        """Put `leaf` among `parent`'s children and into the leaf chain, by key."""
        nodes, kids = self.nodes, parent.children
        pos = bisect_right(parent.child_keys, leaf.key_lo)
        if pos > 0:
            leaf.prev = kids[pos - 1]
            leaf.next = nodes[leaf.prev].next
        else:
            leaf.next = kids[0]
            leaf.prev = nodes[leaf.next].prev
        kids.insert(pos, leaf.id)
        parent.child_keys.insert(pos, leaf.key_lo)
        self._join(leaf.prev, leaf.id)
        self._join(leaf.id, leaf.next)

    def _join(self, left: int | None, right: int | None) -> None:
        """Make leaves `left` and `right` neighbours in the chain (either may be None, meaning an end)."""
        if left is not None:
            self._w(left).next = right
            self.changed.add(left)
        if right is not None:
            self._w(right).prev = left
            self.changed.add(right)

    def _split(self, node: Node) -> Node:
        """Move the upper half of an overfull `node`'s children to a new right sibling; return the parent."""
        half = len(node.children) // 2
        sibling = self._new_internal(node.level, node.parent, node.children[half:])
        del node.children[half:]
        self._refresh(node)
        self._mark(node)
        if node.parent is None:
            root = self._new_internal(node.level + 1, None, [node.id, sibling.id])
            self.root = root.id
            return root
        parent = self._w(node.parent)
        pos = parent.children.index(node.id) + 1
        parent.children.insert(pos, sibling.id)
        parent.child_keys.insert(pos, sibling.key_lo)
        self.changed.add(parent.id)
        return parent

    def _rebalance(self, node: Node) -> None:
        """Fix an underfull non-root `node`: borrow a child from a sibling, else merge with one."""
        assert node.parent is not None
        parent = self._w(node.parent)
        i = parent.children.index(node.id)
        left = self._w(parent.children[i - 1]) if i > 0 else None
        right = self._w(parent.children[i + 1]) if i + 1 < len(parent.children) else None
        if left is not None and len(left.children) > self.min_children:
            self._move_child(left, node, left.children.pop(), 0)
        elif right is not None and len(right.children) > self.min_children:
            self._move_child(right, node, right.children.pop(0), len(node.children))
        elif left is not None:
            self._merge(left, node, parent)
        else:
            assert right is not None
            self._merge(node, right, parent)

    def _move_child(self, donor: Node, receiver: Node, child: int, pos: int) -> None:
        receiver.children.insert(pos, child)
        self._set_parent(child, receiver.id)
        for node in (donor, receiver):
            self._refresh(node)
            self._mark(node)

    def _merge(self, keep: Node, gone: Node, parent: Node) -> None:
        """Append `gone`'s children to its left neighbour `keep` and remove `gone`."""
        for child in gone.children:
            self._set_parent(child, keep.id)
        keep.children.extend(gone.children)
        pos = parent.children.index(gone.id)
        del parent.children[pos], parent.child_keys[pos]
        self._remove(gone.id)
        self._refresh(keep)
        self._mark(keep)

    def _shrink_root(self) -> None:
        """Drop an empty root, and collapse roots above level 1 that have a single child."""
        while self.root is not None:
            root = self.nodes[self.root]
            if not root.children:
                self._remove(root.id)
                self.root = None
            elif root.level >= 2 and len(root.children) == 1:
                self._remove(root.id)
                self.root = root.children[0]
                self._set_parent(self.root, None)
            else:
                return


def _fork_map(m: MutableMapping[Any, Any]) -> CowMap[Any, Any]:
    """A copy-on-write fork of `m`; a plain dict becomes the shared base (it must not change again)."""
    return m.fork() if isinstance(m, CowMap) else CowMap.over(m)  # type: ignore[arg-type]
