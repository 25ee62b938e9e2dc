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

    def get_many(self, items: list[str]) -> list[float]:
        """`get` of every item, in one pass."""
        if not self.raw:
            return [0.0] * len(items)
        return (self.raw.get_many(items) / self.raw.best).tolist()

    def top(self, k: int) -> list[str]:
        return [item for item, _ in self.raw.top(k)]

    def __len__(self) -> int:
        return len(self.raw)


def lexical_scores(snap: Snapshot, question: str) -> ScaledLexical:
    """BM25 of the items sharing a term with `question`, scaled so that the best is 1."""
    return ScaledLexical(snap.lexical.scores(question))


def candidate_items(snap: Snapshot, question: str, qvec: np.ndarray, k: int,
                    facts: tuple[np.ndarray, np.ndarray] | None = None,
                    dense: dict[str, tuple[float, NodeKey | None]] | None = None) -> tuple[list[str], ScaledLexical]:
    """Items from the dense top-k cells and top-k facts (every leaf of every tree is one or the
    other) and the lexical top-k, and every item's lexical score scaled to the best one (0 for items
    sharing no term). `facts` (optional): the fact index's top-k for `qvec`, searched already.
    `dense` (optional) receives each dense candidate's similarity (and a cell's leaf), for `rank_units`."""
    idx, state = snap.index, snap.state
    found: dict[str, None] = {}
    known: dict[str, tuple[float, NodeKey | None]] = {} if dense is None else dense
    ids, scores = idx.cells.search(qvec, k)
    trees = state.trees
    for uid, score in zip(ids.tolist(), scores.tolist()):
        key = idx.cell_key.get(uid)
        info = trees.get(key[0]) if key is not None else None
        if info is not None:
            node = info.tree.nodes.get(key[1])
            if node is not None and node.item is not None:
                found[node.item] = None
                known[node.item] = (score, key)
    ids, scores = facts if facts is not None else idx.facts.search(qvec, k)
    for uid, score in zip(ids[:k].tolist(), scores[:k].tolist()):
        fid = idx.fact_key.get(uid)
        if fid is not None:
            found[fid] = None
            known[fid] = (score, None)
    scaled = lexical_scores(snap, question)
    found.update((item, None) for item in scaled.top(k))
    return [i for i in found if i in state.cells or i in state.facts], scaled


def rank_units(
    snap: Snapshot, items: list[str], qvec: np.ndarray, lexical: ScaledLexical, target: DateTarget | None,
    cfg: QueryConfig, budget: int, floor: dict[str, float] | None = None,
    dense: dict[str, tuple[float, NodeKey | None]] | None = None,
) -> list[Hit]:
    """The best `budget` units among `items`, chosen greedily with the per-session repeat penalty.
    `floor` (optional) gives an item a score it keeps at least (a planner's sub-query similarity);
    `dense` (from `candidate_items`) the similarity (and a cell's leaf) of items searched already.
    The other similarities are one matrix product over items and one over their sessions' roots."""
    if not items:
        return []
    state, known = snap.state, dense or {}
    cells, facts = state.cells, state.facts
    n = len(items)
    sims, times, groups = [0.0] * n, [0.0] * n, [""] * n
    leaf: list[NodeKey | None] = [None] * n
    is_cell = [False] * n
    missing: list[int] = []
    vecs: list[np.ndarray] = []
    for i, item in enumerate(items):  # one map lookup per item: this loop is the ranking's cost
        hit = known.get(item)
        cell = None if hit is not None and hit[1] is None else cells.get(item)  # a dense fact is no cell
        if cell is not None:
            times[i], groups[i], is_cell[i] = cell.time, cell.session_id, True
            if hit is not None and hit[1] is not None:
                sims[i], leaf[i] = hit
                continue
            key = leaf[i] = _leaf_key(snap, item)
            vec = state.nodes[key].embedding if key is not None else np.zeros(state.dim, np.float32)
        else:
            fact = facts[item]
            first = fact.first
            times[i], groups[i] = fact.time, first.session_id if first is not None else ""
            if hit is not None:
                sims[i] = hit[0]
                continue
            vec = state.fact_vecs[item]
        missing.append(i)
        vecs.append(vec)
    if missing:
        for i, sim in zip(missing, (np.stack(vecs) @ qvec).tolist()):
            sims[i] = sim
    sessions = list(dict.fromkeys(groups))
    roots = dict(zip(sessions, _root_similarities(snap, sessions, qvec)))
    lexical_w, session_w, date_w = cfg.lexical_weight, cfg.session_weight, cfg.date_weight
    base: list[float] = []
    for i, (item, lex) in enumerate(zip(items, lexical.get_many(items))):
        sim = sims[i]
        score = max(sim, floor[item]) if floor and item in floor else sim
        score += lexical_w * lex + session_w * roots[groups[i]]
        if target is not None:
            score += date_w * target.closeness(times[i])
        base.append(score)
    taken: dict[str, int] = {}
    out: list[Hit] = []
    heap = [(-score, item, i, 0) for i, (item, score) in enumerate(zip(items, base))]
    heapq.heapify(heap)
    while heap and len(out) < budget:
        neg, item, i, seen = heapq.heappop(heap)
        count = taken.get(groups[i], 0)
        if count != seen:  # its session gave a unit since: back in line with the penalty
            heapq.heappush(heap, (-(base[i] - cfg.repeat_penalty * count), item, i, count))
            continue
        key = leaf[i] if is_cell[i] else _leaf_key(snap, item)
        if key is not None:
            out.append(Hit(key, -neg, 0))
            taken[groups[i]] = count + 1
    return out


def _root_similarities(snap: Snapshot, sessions: list[str], qvec: np.ndarray) -> list[float]:
    """Similarity of `qvec` to each session tree's root (0 for a session without one), through the
    root index: one gather and one product."""
    trees, roots = snap.state.trees, snap.index.roots
    rows = []
    for sid in sessions:
        info = trees.get(session_tree_id(sid))
        rows.append(roots.row_of(info.rowid) if info is not None else None)
    have = [r for r in rows if r is not None]
    sims = iter(roots.row_scores(np.asarray(have, np.int64), qvec).tolist() if have else [])
    return [next(sims) if r is not None else 0.0 for r in rows]


def _leaf_key(snap: Snapshot, item: str) -> NodeKey | None:
    """The leaf showing `item`: a cell's leaf in its session tree; a fact's leaf in its first tree."""
    state = snap.state
    if item in state.cells:
        info = state.trees.get(session_tree_id(state.cells[item].session_id))
        return (info.tree_id, info.tree.leaf_of(item)) if info is not None and item in info.tree else None
    for tree_id in snap.iter_fact_trees(item):  # the first one holding it
        info = state.trees.get(tree_id)
        if info is not None and item in info.tree:
            return (tree_id, info.tree.leaf_of(item))
    return None
