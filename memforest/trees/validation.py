"""The structural invariants of a MemTree, checked over its root, node map and placement map; O(N)."""

from __future__ import annotations

from collections.abc import Mapping
from itertools import pairwise

from memforest.trees.node import Node, height_bound, require


def check_structure(root_id: int | None, nodes: Mapping[int, Node], placements: Mapping[str, int],
                    fanout: int) -> None:
    """Raise `TreeInvariantError` if the tree rooted at `root_id` violates a structural invariant: node
    shapes and child counts, key ranges and order, counts, the leaf chain, the placement map (item ->
    leaf id) and the height bound."""
    if root_id is None:
        require(not nodes and not placements, "empty tree still has nodes or placements")
        return
    root = nodes.get(root_id)
    require(root is not None and root.parent is None and root.level >= 1, "root is missing or malformed")
    leaves, seen, stack = [], 0, [root_id]
    while stack:
        node, seen = nodes[stack.pop()], seen + 1
        if node.level == 0:
            _check_leaf(node)
            leaves.append(node)
        else:
            require(all(c in nodes for c in node.children), f"node {node.id} has a missing child")
            _check_internal(node, [nodes[c] for c in node.children], fanout)
            stack.extend(reversed(node.children))
    require(seen == len(nodes), f"{len(nodes) - seen} nodes are unreachable or shared")
    _check_chain(leaves)
    require(len(placements) == len(leaves), "placement map size differs from leaf count")
    require(all(placements.get(f.key_lo[1]) == f.id for f in leaves), "placement map is wrong")
    bound, height = height_bound(len(leaves), fanout), nodes[root_id].level
    require(height <= bound, f"height {height} exceeds bound {bound} for N={len(leaves)}")


def _check_leaf(leaf: Node) -> None:
    require(leaf.item is not None and not leaf.children and not leaf.child_keys,
            f"leaf {leaf.id} malformed")
    require(leaf.key_lo == leaf.key_hi == (leaf.t_lo, leaf.item) and leaf.count == 1,
            f"leaf {leaf.id} key")


def _check_internal(node: Node, kids: list[Node], fanout: int) -> None:
    n, nid = len(kids), node.id
    low = (fanout + 1) // 2 if node.parent is not None else (1 if node.level == 1 else 2)
    require(low <= n <= fanout, f"node {nid} has {n} children, outside [{low}, {fanout}]")
    require(node.item is None and node.prev is None and node.next is None, f"node {nid} has leaf fields")
    for kid in kids:
        require(kid.parent == nid, f"child {kid.id} of node {nid} points to parent {kid.parent}")
        require(kid.level == node.level - 1, f"child {kid.id} of node {nid} has level {kid.level}")
        require(node.t_lo <= kid.t_lo and kid.t_hi <= node.t_hi, f"node {nid} time range misses a child")
    for a, b in pairwise(kids):
        require(a.key_hi < b.key_lo, f"children {a.id}, {b.id} of node {nid} are out of order")
    require(node.key_lo == kids[0].key_lo and node.key_hi == kids[-1].key_hi, f"node {nid} keys stale")
    require(node.count == sum(k.count for k in kids), f"node {nid} count is stale")
    require(node.child_keys == [k.key_lo for k in kids], f"node {nid} child keys are stale")


def _check_chain(order: list[Node]) -> None:
    """The explicit prev/next chain must visit `order` (depth-first) with strictly increasing keys."""
    require(order[0].prev is None and order[-1].next is None, "leaf chain has dangling ends")
    for a, b in pairwise(order):
        require(a.next == b.id and b.prev == a.id, f"leaf chain broken between {a.id} and {b.id}")
        require(a.key_lo < b.key_lo, f"leaf keys not increasing at {a.id} -> {b.id}")
