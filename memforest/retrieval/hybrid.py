"""Hybrid unit ranking: leaf items (cells and facts) scored by dense similarity plus BM25, with the
session they were said in and the date the question points at, then chosen with diversity across
sessions.

    score(item) = cos(q, item) + lexical_weight * bm25(item) / best bm25 for q
                  + session_weight * cos(q, the item's session tree root)
                  + date_weight * closeness of the item's date to the date the question names
    unit j of a session: score - repeat_penalty * (units already taken from that session)

Candidates are the union of the dense top list (node and fact indexes) and the lexical top list, or
the items a planner browse reached. Unit scores only fall as units are taken, so they rank the evidence."""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from memforest.config import QueryConfig
from memforest.index.lexical_versions import LexicalScores
from memforest.retrieval.browse import Hit
from memforest.routing.router import session_tree_id
from memforest.snapshot import Snapshot
from memforest.state import NodeKey
from memforest.timeutil import relative_delta

DAY = 86400.0


@dataclass(frozen=True)
class DateTarget:
    """Where a question points in time ("three weeks ago"), with a tolerance that grows with distance."""

    time: float
    days: float

    @property
    def width_days(self) -> float:
        return max(2.0, 0.15 * self.days)

    def closeness(self, t: float) -> float:
        off = abs(t - self.time) / DAY / self.width_days
        return math.exp(-0.5 * off * off)


def date_target(question: str, ref: float) -> DateTarget | None:
    """The past date a question names relative to its reference time; None for none (or the future)."""
    delta = relative_delta(question)
    if delta is None or delta.total_seconds() > -DAY:
        return None
    return DateTarget(ref + delta.total_seconds(), -delta.total_seconds() / DAY)


class ScaledLexical:
    """BM25 scores of a question scaled so that its best match is 1 (0 for items sharing no term)."""

    def __init__(self, raw: LexicalScores) -> None:
        self.raw = raw

    def get(self, item: str, default: float = 0.0) -> float:
        value = self.raw.get(item, 0.0)
        return value / self.raw.best if value > 0.0 else default

    def top(self, k: int) -> list[str]:
        return [item for item, _ in self.raw.top(k)]

    def __len__(self) -> int:
        return len(self.raw)


def lexical_scores(snap: Snapshot, question: str) -> ScaledLexical:
    """BM25 of the items sharing a term with `question`, scaled so that the best is 1."""
    return ScaledLexical(snap.lexical.scores(question))


def candidate_items(snap: Snapshot, question: str, qvec: np.ndarray, k: int,
                    facts: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[list[str], ScaledLexical]:
    """Items from the dense top-k cells and top-k facts (every leaf of every tree is one or the
    other) and the lexical top-k, and every item's lexical score scaled to the best one (0 for items
    sharing no term). `facts` (optional): the fact index's top-k for `qvec`, searched already."""
    idx = snap.index
    found: dict[str, None] = {}
    ids, _ = idx.cells.search(qvec, k)
    for uid in ids.tolist():
        key = idx.cell_key.get(uid)
        if key is not None and key[0] in snap.state.trees:
            node = snap.state.trees[key[0]].tree.nodes.get(key[1])
            if node is not None and node.item is not None:
                found[node.item] = None
    ids, _ = facts if facts is not None else idx.facts.search(qvec, k)
    found.update((idx.fact_key[uid], None) for uid in ids[:k].tolist() if uid in idx.fact_key)
    scaled = lexical_scores(snap, question)
    found.update((item, None) for item in scaled.top(k))
    return [i for i in found if i in snap.state.cells or i in snap.state.facts], scaled


def rank_units(
    snap: Snapshot, items: list[str], qvec: np.ndarray, lexical: ScaledLexical, target: DateTarget | None,
    cfg: QueryConfig, budget: int, floor: dict[str, float] | None = None,
) -> list[Hit]:
    """The best `budget` units among `items`, chosen greedily with the per-session repeat penalty.
    `floor` (optional) gives an item a score it keeps at least (a planner's sub-query similarity).
    Similarities are one matrix product over the items' vectors and one over their sessions' roots."""
    views = [_item_view(snap, item) for item in items]
    if not views:
        return []
    zero = np.zeros(snap.state.dim, np.float32)
    sims = np.stack([v.vec for v in views]) @ qvec
    sessions = list(dict.fromkeys(v.session for v in views))
    roots = dict(zip(sessions, (np.stack([_root_vec(snap, s, zero) for s in sessions]) @ qvec).tolist()))
    base: dict[str, float] = {}
    group: dict[str, str] = {}
    leaf: dict[str, NodeKey | None] = {}
    for v, sim in zip(views, sims.tolist()):
        score = max(sim, floor[v.item]) if floor and v.item in floor else sim
        score += cfg.lexical_weight * lexical.get(v.item, 0.0) + cfg.session_weight * roots[v.session]
        if target is not None:
            score += cfg.date_weight * target.closeness(v.time)
        base[v.item], group[v.item], leaf[v.item] = score, v.session, v.leaf
    taken: dict[str, int] = {}
    out: list[Hit] = []
    heap = [(-score, item, 0) for item, score in base.items()]
    heapq.heapify(heap)
    while heap and len(out) < budget:
        neg, item, seen = heapq.heappop(heap)
        count = taken.get(group[item], 0)
        if count != seen:  # its session gave a unit since: back in line with the penalty
            heapq.heappush(heap, (-(base[item] - cfg.repeat_penalty * count), item, count))
            continue
        key = leaf[item] if item in snap.state.cells else _leaf_key(snap, item)
        if key is not None:
            out.append(Hit(key, -neg, 0))
            taken[group[item]] = count + 1
    return out


@dataclass(frozen=True)
class _View:
    item: str
    vec: np.ndarray
    time: float
    session: str  # a fact's: the first session it was said in
    leaf: NodeKey | None  # a cell's leaf (a fact's is looked up only if it is chosen)


def _item_view(snap: Snapshot, item: str) -> _View:
    """A cell or fact as ranking sees it."""
    state = snap.state
    if item in state.cells:
        cell = state.cells[item]
        key = _leaf_key(snap, item)
        vec = state.nodes[key].embedding if key is not None else np.zeros(state.dim, np.float32)
        return _View(item, vec, cell.time, cell.session_id, key)
    fact = state.facts[item]
    first = fact.first
    return _View(item, state.fact_vecs[item], fact.time, first.session_id if first is not None else "", None)


def _root_vec(snap: Snapshot, session: str, zero: np.ndarray) -> np.ndarray:
    info = snap.state.trees.get(session_tree_id(session))
    if info is None or info.tree.root is None:
        return zero
    return snap.state.nodes[(info.tree_id, info.tree.root)].embedding


def _leaf_key(snap: Snapshot, item: str) -> NodeKey | None:
    """The leaf showing `item`: a cell's leaf in its session tree; a fact's leaf in its first tree."""
    state = snap.state
    if item in state.cells:
        info = state.trees.get(session_tree_id(state.cells[item].session_id))
        return (info.tree_id, info.tree.leaf_of(item)) if info is not None and item in info.tree else None
    for tree_id in snap.fact_trees(item):
        info = state.trees.get(tree_id)
        if info is not None and item in info.tree:
            return (tree_id, info.tree.leaf_of(item))
    return None
