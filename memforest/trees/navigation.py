"""Read-only walks over a MemTree: its leaves in key order along the leaf chain, a node's ancestors and
the leaves below it. They read `root` and `nodes` only: no copy-on-write, no change tracking."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from memforest.trees.node import Node


class TreeNavigation:
    """The queries of a MemTree (its base class) that only read the root id and the node map."""

    root: int | None
    nodes: Mapping[int, Node]

    def leaves(self) -> Iterator[Node]:
        """All leaves in key order, following the explicit next pointers."""
        leaf = self.first_leaf()
        while leaf is not None:
            yield leaf
            leaf = self._get(leaf.next)

    def items(self) -> Iterator[tuple[str, float]]:
        """(item, time) of every leaf, in key order."""
        for leaf in self.leaves():
            yield leaf.key_lo[1], leaf.key_lo[0]

    def first_leaf(self) -> Node | None:
        """The leaf with the smallest key, or None when empty."""
        return None if self.root is None else self._edge_leaf(self.nodes[self.root], 0)

    def last_leaf(self) -> Node | None:
        """The leaf with the largest key, or None when empty."""
        return None if self.root is None else self._edge_leaf(self.nodes[self.root], -1)

    def predecessor(self, leaf_id: int) -> Node | None:
        """The leaf just before `leaf_id` in key order."""
        return self._get(self.nodes[leaf_id].prev)

    def successor(self, leaf_id: int) -> Node | None:
        """The leaf just after `leaf_id` in key order."""
        return self._get(self.nodes[leaf_id].next)

    def ancestors(self, node_id: int) -> list[int]:
        """Ids of the parent chain of `node_id`, nearest first, ending at the root."""
        chain, parent = [], self.nodes[node_id].parent
        while parent is not None:
            chain.append(parent)
            parent = self.nodes[parent].parent
        return chain

    def leaves_under(self, node_id: int) -> list[Node]:
        """The leaves below `node_id` in key order; O(height + count)."""
        node = self.nodes[node_id]
        leaf: Node | None = self._edge_leaf(node, 0)
        out: list[Node] = []
        while leaf is not None and len(out) < node.count:
            out.append(leaf)
            leaf = self._get(leaf.next)
        return out

    def _get(self, node_id: int | None) -> Node | None:
        return None if node_id is None else self.nodes[node_id]

    def _edge_leaf(self, node: Node, end: int) -> Node:
        """The first (`end` = 0) or last (`end` = -1) leaf below `node`."""
        while node.level > 0:
            node = self.nodes[node.children[end]]
        return node
