"""Property and unit tests of the pure MemTree structure, checked against an independent model."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from memforest.trees.memtree import MemTree, Node, TreeInvariantError, node_row

TIMES = [0.0, 1.0, 1.5, 2.0, 7.0]


def items_under(tree: MemTree) -> dict[int, frozenset[str]]:
    """Node id -> items below it, computed from the children lists alone."""
    out: dict[int, frozenset[str]] = {}

    def visit(node_id: int) -> frozenset[str]:
        node = tree.nodes[node_id]
        if node.level == 0:
            assert node.item is not None
            found = frozenset([node.item])
        else:
            found = frozenset().union(*(visit(c) for c in node.children))
        out[node_id] = found
        return found

    if tree.root is not None:
        visit(tree.root)
    return out


def rows_by_id(tree: MemTree) -> dict[int, dict[str, Any]]:
    return {row["id"]: row for row in tree.to_rows()}


def max_height(n: int, fanout: int) -> int:
    """ceil(log_{ceil(k/2)} n) + 1, by repeated multiplication."""
    m, h = -(-fanout // 2), 0
    while m**h < n:
        h += 1
    return h + 1


def check_shape(tree: MemTree, model: dict[str, float]) -> None:
    """Order, placement, fan-out and height, checked without trusting `validate`."""
    assert [leaf.key_lo for leaf in tree.leaves()] == sorted((t, i) for i, t in model.items())
    placed = tree.placements()
    assert set(placed) == set(model)
    assert all(tree.nodes[leaf].key_lo == (model[item], item) for item, leaf in placed.items())
    if not model:
        assert tree.root is None and not tree.nodes and tree.height == 0
        return
    assert tree.height <= max_height(len(model), tree.fanout)
    low = -(-tree.fanout // 2)
    for node in tree.nodes.values():
        if node.level == 0:
            continue
        if node.id != tree.root:
            assert low <= len(node.children) <= tree.fanout
        elif node.level == 1:
            assert 1 <= len(node.children) <= tree.fanout
        else:
            assert 2 <= len(node.children) <= tree.fanout
    assert {tree.nodes[leaf].level for leaf in placed.values()} == {0}
    assert {len(tree.ancestors(leaf)) for leaf in placed.values()} == {tree.height}


class TrackedTree:
    """A MemTree beside a model, checking every operation's dirty and change sets exactly."""

    def __init__(self, fanout: int) -> None:
        self.tree = MemTree("t", fanout)
        self.model: dict[str, float] = {}
        self.gone: set[str] = set()
        self.dirty: set[int] = set()
        self.changed: set[int] = set()
        self.removed: set[int] = set()
        self.store: dict[int, dict[str, Any]] = {}

    def insert(self, item: str, time: float) -> None:
        self._apply(lambda: self.tree.insert(item, time))
        self.model[item] = time
        self.gone.discard(item)
        self.check()

    def delete(self, item: str) -> None:
        self._apply(lambda: self.tree.delete(item))
        del self.model[item]
        self.gone.add(item)
        self.check()

    def _apply(self, op: Any) -> None:
        """Run `op` and update the expected sets from before/after snapshots.

        Expected dirty: nodes that exist now and were created, or whose leaf set differed between the
        snapshots around some operation, since the last take_dirty. Expected changed: likewise for rows.
        """
        before_sets, before_rows = items_under(self.tree), rows_by_id(self.tree)
        op()
        after_sets, after_rows = items_under(self.tree), rows_by_id(self.tree)
        step_dirty = {i for i, items in after_sets.items() if before_sets.get(i) != items}
        step_changed = {i for i, row in after_rows.items() if before_rows.get(i) != row}
        self.dirty = (self.dirty | step_dirty) & after_sets.keys()
        self.changed = (self.changed | step_changed) & after_rows.keys()
        self.removed |= before_rows.keys() - after_rows.keys()

    def check(self) -> None:
        self.tree.validate()
        check_shape(self.tree, self.model)
        assert self.tree.dirty == self.dirty
        assert self.tree.changed == self.changed
        assert self.tree.removed == self.removed

    def take_dirty(self) -> None:
        by_level = self.tree.take_dirty()
        assert list(by_level) == sorted(by_level)
        for level, ids in by_level.items():
            assert ids == sorted(ids) and ids
            assert all(self.tree.nodes[i].level == level for i in ids)
        assert sorted(i for ids in by_level.values() for i in ids) == sorted(self.dirty)
        self.dirty = set()
        assert not self.tree.dirty

    def take_changes(self) -> None:
        nodes, removed = self.tree.take_changes()
        assert [n.id for n in nodes] == sorted(self.changed) and removed == sorted(self.removed)
        for node_id in removed:
            self.store.pop(node_id, None)
        self.store.update({n.id: node_row("t", n) for n in nodes})
        assert self.store == rows_by_id(self.tree)
        rebuilt = MemTree.from_rows("t", self.tree.fanout, self.store.values(), self.tree.next_node_id)
        assert rebuilt.to_rows() == self.tree.to_rows()
        self.changed, self.removed = set(), set()


class MemTreeMachine(RuleBasedStateMachine):
    """Random interleavings of inserts, deletes, re-inserts and takes over small fan-outs with tied times."""

    def __init__(self) -> None:
        super().__init__()
        self.t = TrackedTree(3)
        self.counter = 0

    @initialize(fanout=st.integers(3, 10))
    def start(self, fanout: int) -> None:
        self.t = TrackedTree(fanout)

    def fresh(self) -> str:
        self.counter += 1
        return f"f{self.counter:04d}"

    @rule(times=st.lists(st.sampled_from(TIMES), min_size=1, max_size=30))
    def insert_new(self, times: list[float]) -> None:
        for time in times:
            self.t.insert(self.fresh(), time)

    @precondition(lambda self: self.t.gone)
    @rule(data=st.data(), time=st.sampled_from(TIMES))
    def reinsert(self, data: st.DataObject, time: float) -> None:
        self.t.insert(data.draw(st.sampled_from(sorted(self.t.gone))), time)

    @precondition(lambda self: self.t.model)
    @rule(data=st.data())
    def delete_some(self, data: st.DataObject) -> None:
        order = data.draw(st.permutations(sorted(self.t.model)))
        for item in order[: data.draw(st.integers(1, len(order)))]:
            self.t.delete(item)

    @precondition(lambda self: self.t.model)
    @rule(data=st.data(), time=st.sampled_from(TIMES))
    def duplicate_rejected(self, data: st.DataObject, time: float) -> None:
        with pytest.raises(ValueError):
            self.t.tree.insert(data.draw(st.sampled_from(sorted(self.t.model))), time)

    @rule()
    def absent_rejected(self) -> None:
        with pytest.raises(KeyError):
            self.t.tree.delete("never-inserted")

    @rule()
    def take_dirty(self) -> None:
        self.t.take_dirty()

    @rule()
    def take_changes(self) -> None:
        self.t.take_changes()

    @invariant()
    def consistent(self) -> None:
        self.t.check()


MemTreeMachine.TestCase.settings = settings(
    max_examples=250, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestMemTreeMachine = MemTreeMachine.TestCase


@pytest.mark.parametrize("fanout", [3, 4, 5, 8, 10])
def test_grow_and_drain_deep_tree(fanout: int) -> None:
    rng = random.Random(fanout)
    t = TrackedTree(fanout)
    for n in range(260):
        t.insert(f"x{n:03d}", float(rng.choice(range(20))))
        if n % 37 == 0:
            t.take_dirty()
    assert t.tree.height >= 3
    items = list(t.model)
    rng.shuffle(items)
    for n, item in enumerate(items):
        t.delete(item)
        if n % 41 == 0:
            t.take_dirty()
            t.take_changes()
    assert t.tree.root is None


def build(fanout: int, times: list[float]) -> MemTree:
    tree = MemTree("t", fanout)
    for n, time in enumerate(times):
        tree.insert(f"i{n:03d}", time)
    return tree


def item_of(node: Node | None) -> str | None:
    return None if node is None else node.item


def test_fanout_below_three_rejected() -> None:
    with pytest.raises(ValueError):
        MemTree("t", 2)


def test_single_insert_into_empty() -> None:
    tree = MemTree("t", 4, next_node_id=10)
    assert tree.root is None and tree.height == 0 and tree.first_leaf() is None
    leaf_id = tree.insert("a", 5.0)
    root = tree.nodes[tree.root or 0]
    assert (root.level, root.children, root.count, root.parent) == (1, [leaf_id], 1, None)
    assert tree.height == 1 and tree.leaf_of("a") == leaf_id
    assert tree.take_dirty() == {0: [leaf_id], 1: [root.id]}
    assert tree.next_node_id == 12
    tree.validate()


@pytest.mark.parametrize("fanout", [3, 4, 7, 8])
def test_split_at_fanout_plus_one(fanout: int) -> None:
    tree = build(fanout, [float(n) for n in range(fanout)])
    old_root = tree.root
    assert tree.height == 1 and len(tree.nodes[old_root or 0].children) == fanout
    tree.take_dirty()
    new_leaf = tree.insert("z", 100.0)
    root = tree.nodes[tree.root or 0]
    assert tree.height == 2 and root.children[0] == old_root
    sizes = [len(tree.nodes[c].children) for c in root.children]
    assert sizes == [(fanout + 1) // 2, fanout + 1 - (fanout + 1) // 2]
    assert tree.take_dirty() == {0: [new_leaf], 1: sorted(root.children), 2: [root.id]}
    tree.validate()


def test_untouched_sibling_is_not_dirty() -> None:
    tree = build(4, [float(n) for n in range(5)])
    left, right = tree.nodes[tree.root or 0].children
    tree.take_dirty()
    leaf = tree.insert("late", 50.0)
    assert tree.take_dirty() == {0: [leaf], 1: [right], 2: [tree.root]}
    tree.delete("late")
    assert left not in tree.dirty and tree.dirty == {right, tree.root}


def test_delete_to_empty() -> None:
    tree = build(3, [float(n % 4) for n in range(30)])
    all_ids = set(tree.nodes)
    tree.take_changes()
    for n in range(30):
        tree.delete(f"i{n:03d}")
        tree.validate()
    assert tree.root is None and not tree.nodes and not tree.dirty and tree.placements() == {}
    assert tree.take_changes() == ([], sorted(all_ids))
    with pytest.raises(KeyError):
        tree.delete("i000")
    assert list(tree.leaves()) == []


def test_rows_round_trip() -> None:
    tree = build(5, [float(n % 7) for n in range(120)])
    for n in range(0, 120, 3):
        tree.delete(f"i{n:03d}")
    rows = json.loads(json.dumps(tree.to_rows()))
    again = MemTree.from_rows("t", 5, rows, next_node_id=tree.next_node_id)
    assert again.to_rows() == tree.to_rows() and again.root == tree.root
    assert again.placements() == tree.placements() and again.next_node_id == tree.next_node_id
    assert again.insert("new", 3.0) == tree.insert("new", 3.0)
    assert again.to_rows() == tree.to_rows()
    assert MemTree.from_rows("t", 5, rows).next_node_id == max(r["id"] for r in rows) + 1
    assert MemTree.from_rows("t", 5, []).root is None


def test_corrupt_rows_rejected() -> None:
    rows = build(4, [float(n) for n in range(20)]).to_rows()
    internal = next(r for r in rows if r["level"] == 1)
    internal["count"] += 1
    with pytest.raises(TreeInvariantError, match="count"):
        MemTree.from_rows("t", 4, rows)
    with pytest.raises(TreeInvariantError):
        MemTree.from_rows("t", 4, rows[1:], validate=True)


def test_predecessor_successor_and_ties() -> None:
    tree = MemTree("t", 3)
    for item, time in [("b", 1.0), ("a", 1.0), ("c", 0.5), ("d", 2.0), ("e", 1.0)]:
        tree.insert(item, time)
    order = [leaf.item for leaf in tree.leaves()]
    assert order == ["c", "a", "b", "e", "d"]
    a = tree.leaf_of("a")
    assert item_of(tree.predecessor(a)) == "c" and item_of(tree.successor(a)) == "b"
    assert tree.predecessor(tree.leaf_of("c")) is None and tree.successor(tree.leaf_of("d")) is None
    assert item_of(tree.first_leaf()) == "c" and item_of(tree.last_leaf()) == "d"
    tree.delete("a")
    assert item_of(tree.successor(tree.leaf_of("c"))) == "b"
    assert item_of(tree.predecessor(tree.leaf_of("b"))) == "c"


def test_ancestors_and_leaves_under() -> None:
    tree = build(3, [float(n) for n in range(40)])
    leaf = tree.leaf_of("i017")
    chain = tree.ancestors(leaf)
    assert chain[-1] == tree.root and len(chain) == tree.height
    assert [tree.nodes[i].level for i in chain] == list(range(1, tree.height + 1))
    for node_id in chain:
        under = tree.leaves_under(node_id)
        assert "i017" in {n.item for n in under} and len(under) == tree.nodes[node_id].count
        assert [n.key_lo for n in under] == sorted(n.key_lo for n in under)
    assert [n.item for n in tree.leaves_under(tree.root or 0)] == [n.item for n in tree.leaves()]
    assert tree.ancestors(tree.root or 0) == []


def test_merge_from() -> None:
    a = build(4, [float(n) for n in range(0, 60, 2)])
    b = MemTree("u", 8)
    for n in range(25):
        b.insert(f"j{n:03d}", float(n) + 0.5)
    a.merge_from(b)
    a.validate()
    assert len(a) == 55 and a.fanout == 4
    assert [n.key_lo for n in a.leaves()] == sorted([n.key_lo for n in a.leaves()])
    clash = MemTree("v", 3)
    clash.insert("j003", 1.0)
    clash.insert("zzz", 1.0)
    before = a.to_rows()
    with pytest.raises(ValueError, match="j003"):
        a.merge_from(clash)
    assert a.to_rows() == before and "zzz" not in a


def test_invalid_times_rejected() -> None:
    tree = MemTree("t", 3)
    with pytest.raises(ValueError):
        tree.insert("a", float("nan"))
    assert tree.root is None and not tree.dirty


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda t: setattr(t.nodes[t.leaf_of("i005")], "next", None),
        lambda t: setattr(t.nodes[t.leaf_of("i005")], "key_lo", (99.0, "i005")),
        lambda t: setattr(t.nodes[t.root], "count", 3),
        lambda t: setattr(t.nodes[t.leaf_of("i002")], "parent", t.root),
        lambda t: t._leaf_of.pop("i001"),
        lambda t: t.nodes[t.root].children.reverse(),
        lambda t: t.dirty.add(10**6),
        lambda t: t.nodes.__setitem__(10**6, Node(10**6, 0, None, item="orphan")),
    ],
)
def test_validate_detects_corruption(corrupt: Any) -> None:
    tree = build(3, [float(n) for n in range(12)])
    tree.validate()
    corrupt(tree)
    with pytest.raises(TreeInvariantError):
        tree.validate()
