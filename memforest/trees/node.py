"""MemTree nodes: the node record, its persisted row, and the height a tree of N leaves may reach."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

Key = tuple[float, str]

# The children (and child keys) of every leaf: one empty tuple, so a leaf holds no lists of its own (a
# large tree is mostly leaves). Typed as the list an internal node holds; changing it raises.
NO_CHILDREN: list[Any] = cast(list[Any], ())


class TreeInvariantError(ValueError):
    """A MemTree violates one of its structural invariants."""


@dataclass(slots=True)
class Node:
    """One MemTree node: a leaf (level 0, one item) or an internal node (level >= 1).

    ``child_keys`` mirrors the children's ``key_lo`` (internal nodes only) so descent is a plain bisect;
    it is derived state and not part of the persisted row.
    """

    id: int
    level: int
    parent: int | None
    children: list[int] = field(default_factory=list)
    key_lo: Key = (0.0, "")
    key_hi: Key = (0.0, "")
    count: int = 1
    item: str | None = None
    prev: int | None = None
    next: int | None = None
    child_keys: list[Key] = field(default_factory=list)

    @property
    def t_lo(self) -> float:
        """Earliest leaf time below this node."""
        return self.key_lo[0]

    @property
    def t_hi(self) -> float:
        """Latest leaf time below this node."""
        return self.key_hi[0]


def clone_node(node: Node) -> Node:
    """A copy of `node` whose lists are its own (a leaf's stay `NO_CHILDREN`)."""
    if node.children is NO_CHILDREN:
        return Node(node.id, node.level, node.parent, NO_CHILDREN, node.key_lo, node.key_hi, node.count,
                    node.item, node.prev, node.next, NO_CHILDREN)
    return Node(node.id, node.level, node.parent, list(node.children), node.key_lo, node.key_hi, node.count,
                node.item, node.prev, node.next, list(node.child_keys))


def node_row(tree_id: str, node: Node) -> dict[str, Any]:
    """A flat, JSON-ready row for one node (the persistence format of `MemTree.to_rows`)."""
    return {
        "tree_id": tree_id, "id": node.id, "level": node.level, "parent": node.parent,
        "children": list(node.children), "t_lo": node.key_lo[0], "item_lo": node.key_lo[1],
        "t_hi": node.key_hi[0], "item_hi": node.key_hi[1], "count": node.count,
        "item": node.item, "prev": node.prev, "next": node.next,
    }


def node_from_row(row: dict[str, Any]) -> Node:
    """The node described by a row produced by `node_row`."""
    return make_node(int(row["id"]), int(row["level"]), row["parent"], list(row["children"]),
                     float(row["t_lo"]), str(row["item_lo"]), float(row["t_hi"]), str(row["item_hi"]),
                     int(row["count"]), row["item"], row["prev"], row["next"])


def make_node(nid: int, level: int, parent: int | None, children: list[int], t_lo: float, item_lo: str,
              t_hi: float, item_hi: str, count: int, item: str | None, prev: int | None,
              next_: int | None) -> Node:
    """A node from its persisted fields. A leaf whose key range is its own key (every leaf a tree
    makes) holds one key tuple for both ends, its item's string once, and `NO_CHILDREN`."""
    if level == 0 and not children:
        if t_lo == t_hi and item_lo == item_hi == item:
            key = (t_lo, item)
            return Node(nid, 0, parent, NO_CHILDREN, key, key, count, item, prev, next_, NO_CHILDREN)
        return Node(nid, 0, parent, NO_CHILDREN, (t_lo, item_lo), (t_hi, item_hi), count, item, prev, next_,
                    NO_CHILDREN)
    return Node(nid, level, parent, children, (t_lo, item_lo), (t_hi, item_hi), count, item, prev, next_)


def height_bound(n_leaves: int, fanout: int) -> int:
    """Largest height allowed for `n_leaves >= 1`: ``ceil(log_m n) + 1`` with ``m = ceil(k/2)``."""
    m, exponent, reach = (fanout + 1) // 2, 0, 1
    while reach < n_leaves:
        reach *= m
        exponent += 1
    return exponent + 1


def require(ok: bool, message: str) -> None:
    """Raise `TreeInvariantError(message)` unless `ok`."""
    if not ok:
        raise TreeInvariantError(message)
