"""Hybrid unit ranking: leaf items (cells and facts) scored by dense similarity plus BM25, with the
session they were said in and the date the question points at, then chosen with diversity across
sessions.

    score(item) = cos(q, item) + lexical_weight * bm25(item) / best bm25 for q
                  + session_weight * cos(q, the item's session tree root)
                  + date_weight * closeness of the item's date to the window the question names
    unit j of a session: score - repeat_penalty * (units already taken from that session)

The window is the question's date phrase read against its date (`memforest.retrieval.temporal`): a
soft prior, never a filter.

Candidates are the union of the dense top list (node and fact indexes) and the lexical top list, or
the items a planner browse reached. Unit scores only fall as units are taken, so they rank the evidence.
The best `sentence_rerank` cells by that score are looked at closer where they are longer than their leaf
vector reads (`TreeConfig.leaf_words`): cos(q, item) becomes the larger of the cell vector's and its
closest user sentence's (`memforest.sentences`; such a cell's vector never saw its later words and
averages every topic of the rest; a question usually asks about one sentence). The sentences' vectors
are those the write stored with the cell, read in one statement for all of them; a cell stored without
them has its sentences embedded here, in one call. A cell the vector reads whole is scored by the vector
alone: the best of its few sentences only adds noise (LoCoMo's cells: median 41 words; LongMemEval's: 314)."""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from memforest.config import QueryConfig
from memforest.index.lexical_versions import LexicalScores
from memforest.llm.base import Embedder
from memforest.resident.ondemand import NodeKey
from memforest.retrieval.browse import Hit
from memforest.retrieval.temporal import TimeWindow
from memforest.routing.router import session_tree_id
from memforest.sentences import cell_turns, read_whole, stored_sentences, turn_words, user_sentences
from memforest.state import UserState
from memforest.types import Cell
from memforest.versions.snapshot import Snapshot


@dataclass(frozen=True)
class Sentences:
    """What scoring long cells by their sentences needs: the embedder, how many words of a cell its
    leaf vector reads (`TreeConfig.leaf_words`; longer cells are rescored, all of them when it is 0),
    and whether the sentence vectors stored with the cells are used (False: every one is embedded
    at query time, as for cells stored without them)."""

    embedder: Embedder
    leaf_words: int
    stored: bool = True


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


# What ranking needs of a dense candidate, read from its index row: (similarity, a cell's leaf or None
# for a fact, time, group: the rowid of the tree of the session it was first said in, else that session's id)
Dense = tuple[float, NodeKey | None, float, int | str]


def candidate_items(snap: Snapshot, question: str, qvec: np.ndarray, k: int,
                    facts: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
                    dense: dict[str, Dense] | None = None) -> tuple[list[str], ScaledLexical]:
    """Items from the dense top-k cells and top-k facts (every leaf of every tree is one or the
    other) and the lexical top-k, and every item's lexical score scaled to the best one (0 for items
    sharing no term). `facts` (optional): the fact index's `search_meta` for `qvec`, searched already.
    `dense` (optional) receives what `rank_units` needs of each dense candidate, from its index row."""
    idx, state = snap.index, snap.state
    known: dict[str, Dense] = {} if dense is None else dense
    ids, scores, meta = idx.cells.search_meta(qvec, k)
    cell_key = idx.cell_key
    for uid, score, (t, rowid) in zip(ids.tolist(), scores.tolist(), meta.tolist()):
        key = cell_key.get(uid)
        if key is not None:
            known[key[2]] = (score, (key[0], key[1]), t, int(rowid))
    ids, scores, meta = facts if facts is not None else idx.facts.search_meta(qvec, k)
    for fid, score, (t, rowid) in zip(ids[:k].tolist(), scores[:k].tolist(), meta[:k].tolist()):
        known[fid] = (score, None, t, int(rowid) if rowid >= 0 else _fact_group(state, fid))
    scaled = lexical_scores(snap, question)
    found = dict.fromkeys(known)
    cells, facts_ = state.cells, state.facts
    found.update((i, None) for i in scaled.top(k) if i not in found and (i in cells or i in facts_))
    return list(found), scaled


def rank_units(
    snap: Snapshot, items: list[str], qvec: np.ndarray, lexical: ScaledLexical, target: TimeWindow | None,
    cfg: QueryConfig, budget: int, floor: dict[str, float] | None = None,
    dense: dict[str, Dense] | None = None, rank_sessions: int = 0, sentences: Sentences | None = None,
) -> list[Hit]:
    """The best `budget` units among `items`, chosen greedily with the per-session repeat penalty,
    then (with `rank_sessions`) more in the same order until the units name that many sessions: the
    greedy order makes the first `budget` the same either way.
    `floor` (optional) gives an item a score it keeps at least (a planner's sub-query similarity);
    `dense` (from `candidate_items`) what the index rows of items searched already hold. The other
    similarities are one matrix product over items and one over their sessions' roots."""
    if not items:
        return []
    state, known = snap.state, dense or {}
    cells, facts, trees = state.cells, state.facts, state.trees
    n = len(items)
    sims, times = [0.0] * n, [0.0] * n
    groups: list[int | str] = [""] * n
    leaf: list[NodeKey | None] = [None] * n
    missing: list[int] = []
    vecs: list[np.ndarray] = []
    # (position in items, uid) of cells found by text: read from their rows
    by_row: list[tuple[int, int]] = []
    cell_uid = snap.index.cell_uid
    for i, item in enumerate(items):
        hit = known.get(item)
        if hit is not None:  # a dense candidate: nothing to look up
            sims[i], leaf[i], times[i], groups[i] = hit
            continue
        uid = cell_uid.get(item)
        if uid is not None:
            by_row.append((i, uid))
            continue
        cell = cells.get(item)
        if cell is not None:
            info = trees.get(session_tree_id(cell.session_id))
            times[i], groups[i] = cell.time, info.rowid if info is not None else cell.session_id
            key = leaf[i] = ((info.tree_id, info.tree.leaf_of(item)) if info is not None and item in info.tree
                             else None)
            vec = state.nodes[key].embedding if key is not None else np.zeros(state.dim, np.float32)
        else:
            times[i], groups[i] = facts[item].time, _fact_group(state, item)
            vec = state.fact_vecs[item]
        missing.append(i)
        vecs.append(vec)
    if missing:
        for i, sim in zip(missing, (np.stack(vecs) @ qvec).tolist()):
            sims[i] = sim
    if by_row:
        _from_rows(snap, by_row, qvec, sims, leaf, times, groups)
    sessions = list(dict.fromkeys(groups))
    roots = dict(zip(sessions, _root_similarities(snap, sessions, qvec)))
    lexical_w, session_w, date_w = cfg.lexical_weight, cfg.session_weight, cfg.date_weight
    base: list[float] = []
    closeness: list[float] = []  # the similarity term each score holds
    for i, (item, lex) in enumerate(zip(items, lexical.get_many(items))):
        sim = sims[i]
        score = max(sim, floor[item]) if floor and item in floor else sim
        closeness.append(score)
        score += lexical_w * lex + session_w * roots[groups[i]]
        if target is not None:
            score += date_w * target.closeness(times[i])
        base.append(score)
    if sentences is not None and cfg.sentence_rerank > 0:
        for i, sim in _best_sentences(state, items, base, qvec, sentences, cfg.sentence_rerank).items():
            if sim > closeness[i]:
                base[i] += sim - closeness[i]
    taken: dict[int | str, int] = {}
    out: list[Hit] = []
    heap = [(-score, item, i, 0) for i, (item, score) in enumerate(zip(items, base))]
    heapq.heapify(heap)
    while heap and (len(out) < budget or len(taken) < rank_sessions):
        neg, item, i, seen = heapq.heappop(heap)
        count = taken.get(groups[i], 0)
        if count != seen:  # its session gave a unit since: back in line with the penalty
            heapq.heappush(heap, (-(base[i] - cfg.repeat_penalty * count), item, i, count))
            continue
        key = leaf[i] if item in cells else _leaf_key(snap, item)
        if key is not None:
            out.append(Hit(key, -neg, 0))
            taken[groups[i]] = count + 1
    return out


def _best_sentences(state: UserState, items: list[str], base: list[float], qvec: np.ndarray,
                    sentences: Sentences, top: int) -> dict[int, float]:
    """For the long cells among the `top` best-scored cells of `items`: the similarity of the question to
    the closest of their user sentences (`memforest.sentences`), by position in `items`; the stored
    vectors of all of them read in one statement, the sentences of cells stored without them embedded
    in one call."""
    ranked: list[tuple[int, Cell]] = []
    for i in sorted(range(len(items)), key=lambda i: -base[i]):
        cell = state.cells.get(items[i])
        if cell is not None:
            ranked.append((i, cell))
            if len(ranked) == top:
                break
    stored = stored_sentences(state, [cell.id for _, cell in ranked]) if sentences.stored else {}
    texts: list[str] = []
    owner: list[int] = []
    held: list[np.ndarray] = []
    held_owner: list[int] = []
    for i, cell in ranked:
        row = stored.get(cell.id)
        if row is not None and read_whole(row.words, sentences.leaf_words):
            continue  # its vector read all of it
        if row is not None and row.vectors is not None:
            held.append(row.vectors)
            held_owner += [i] * len(row.vectors)
            continue
        turns = cell_turns(state, cell)
        if row is None and read_whole(turn_words(turns), sentences.leaf_words):
            continue
        found = user_sentences(turns)
        texts += found
        owner += [i] * len(found)
    best: dict[int, float] = {}
    for at, vecs in ((held_owner, np.concatenate(held) if held_owner else None),
                     (owner, sentences.embedder.embed(texts, "passage") if texts else None)):
        if vecs is not None:
            for i, sim in zip(at, (vecs @ qvec).tolist()):
                best[i] = max(best.get(i, -1.0), sim)
    return best


def _from_rows(snap: Snapshot, by_row: list[tuple[int, int]], qvec: np.ndarray, sims: list[float],
               leaf: list[NodeKey | None], times: list[float], groups: list[int | str]) -> None:
    """Fill in what ranking needs of cells from their rows in the cell index (one gather and one
    product for all of them): similarity, leaf, time and the rowid of their session's tree."""
    table, cell_key = snap.index.cells, snap.index.cell_key
    rows = table.rows_of(np.fromiter((uid for _, uid in by_row), np.int64, len(by_row)))
    scores, meta = table.row_scores(rows, qvec).tolist(), table.row_meta(rows).tolist()
    for (i, uid), sim, (t, rowid) in zip(by_row, scores, meta):
        tree_id, nid, _ = cell_key[uid]
        sims[i], leaf[i], times[i], groups[i] = sim, (tree_id, nid), t, int(rowid)


def _fact_group(state: UserState, fact_id: str) -> int | str:
    """A fact's ranking group: the rowid of its first session's tree, else that session's id."""
    first = state.facts[fact_id].first
    if first is None:
        return ""
    info = state.trees.get(session_tree_id(first.session_id))
    return info.rowid if info is not None else first.session_id


def _root_similarities(snap: Snapshot, groups: list[int | str], qvec: np.ndarray) -> list[float]:
    """Similarity of `qvec` to the root of each group's session tree (0 for a group without one: a
    session id), through the root index: one lookup of every group's row, one gather, one product."""
    roots = snap.index.roots
    at = [i for i, g in enumerate(groups) if isinstance(g, int)]
    out = np.zeros(len(groups))
    if at:
        rows = roots.rows_of(np.fromiter((groups[i] for i in at), np.int64, len(at)))
        held = rows >= 0
        out[np.asarray(at, np.int64)[held]] = roots.row_scores(rows[held], qvec)
    return out.tolist()


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
