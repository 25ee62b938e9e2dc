"""Localized maintenance: refresh the dirty nodes of touched trees, bottom-up, level by level.

All dirty nodes of one level, across all trees, form one batch of independent requests (scheduled as
waves of at most P). Leaves get their evidence text and embedding (fact leaves reuse the fact's
embedding); internal nodes get an interval summary and its embedding. Nothing outside the dirty
paths is re-summarised or re-embedded."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memforest.config import TreeConfig
from memforest.errors import ModelError, ModelUnavailableError
from memforest.llm.base import ChatRequest, Embedder, normalize_rows
from memforest.llm.scheduler import Scheduler, parse_json
from memforest.prompts import summary as prompt
from memforest.prompts import token_bound
from memforest.resident.ondemand import LazyNodeMap, NodeData, NodeKey, TreeInfo
from memforest.sentences import cell_turns, read_whole, turn_words, user_sentences
from memforest.state import ChangeSet, UserState
from memforest.timeutil import interval_header, iso_date, iso_minute
from memforest.types import Cell, CellSentences

CHILD_CHARS = 600


@dataclass
class RefreshStats:
    leaves: int = 0
    summaries: int = 0
    degraded: int = 0
    levels: int = 0
    per_level: dict[int, int] = field(default_factory=dict)


def leaf_text(state: UserState, item: str) -> str:
    if item in state.facts:
        fact = state.facts[item]
        return f"[{iso_date(fact.time)}] {fact.text}"
    cell = state.cells[item]
    return f"[{iso_minute(cell.time)}] {cell.text}"


def refresh(
    state: UserState,
    tree_ids: Iterable[str],
    scheduler: Scheduler | None,
    embedder: Embedder,
    cfg: TreeConfig,
    changes: ChangeSet,
    degraded_ok: bool,
    tags: dict[str, Any],
) -> RefreshStats:
    """Refresh every dirty node of the given trees; `scheduler=None` or `cfg.summary_mode ==
    'extractive'` writes extractive summaries with mean-child embeddings (no generator)."""
    infos = [state.trees[t] for t in sorted(set(tree_ids)) if t in state.trees]
    dirty: dict[int, list[tuple[TreeInfo, int]]] = {}
    for info in infos:
        for level, ids in info.tree.take_dirty().items():
            dirty.setdefault(level, []).extend((info, nid) for nid in ids)
    stats = RefreshStats()
    _refresh_leaves(state, dirty.pop(0, []), embedder, changes, stats, cfg.leaf_words)
    generate = scheduler is not None and cfg.summary_mode == "llm"
    for level in sorted(dirty):
        nodes = dirty[level]
        if isinstance(state.nodes, LazyNodeMap):
            _read_children(state.nodes, nodes, dirty.get(level + 1, []))
        stats.levels += 1
        stats.per_level[level] = len(nodes)
        summaries = _summaries(state, nodes, scheduler if generate else None, cfg, level, degraded_ok, tags)
        headed = [f"{_header(info, nid)} {text}" for (info, nid), (text, _) in zip(nodes, summaries)]
        if generate:
            vecs = embedder.embed(headed, "passage")
        else:
            vecs = normalize_rows(np.stack([_mean_child(state, info, nid) for info, nid in nodes]))
        for (info, nid), text, vec, (_, mode) in zip(nodes, headed, vecs, summaries):
            state.nodes[(info.tree_id, nid)] = NodeData(text, mode, vec)
            changes.nodes.add((info.tree_id, nid))
            stats.summaries += mode == "llm"
            stats.degraded += mode == "degraded"
    return stats


def _read_children(lazy: LazyNodeMap, nodes: list[tuple[TreeInfo, int]],
                   upper: list[tuple[TreeInfo, int]]) -> None:
    """Read the data of `nodes` (one level's dirty nodes: replacing a node's data reads its old data),
    of their children and of the children of `upper` (the next level's dirty nodes, whose children are
    `nodes` and their siblings) not read yet, one statement per tree: the next level then finds what
    it reads read, and a tree read ahead with its upper levels' data (a large one) takes one
    statement per write."""
    lazy.read_ahead([*((info.tree_id, nid) for info, nid in nodes),
                     *((info.tree_id, c) for info, nid in (*nodes, *upper)
                       for c in info.tree.nodes[nid].children)])


def cell_embed_text(state: UserState, cell: Cell, words: int) -> str:
    """What a cell's leaf vector encodes: the whole cell (`words` <= 0; the encoder truncates it), or at
    most `words` words of it with the user's turns served first, each turn cut to its share."""
    if words <= 0:
        return cell.text
    session = state.sessions.get(cell.session_id)
    turns = session.turns[cell.turn_lo : cell.turn_hi + 1] if session is not None else []
    if not turns:
        return " ".join(cell.text.split()[:words])
    split = [t.content.split() for t in turns]
    keep = [0] * len(turns)
    budget = words
    for i in sorted(range(len(turns)), key=lambda i: (turns[i].role != "user", i)):
        keep[i] = min(len(split[i]), budget)
        budget -= keep[i]
    return "\n".join(f"{t.role}: {' '.join(w[:k])}" for t, w, k in zip(turns, split, keep) if k)


def _refresh_leaves(
    state: UserState, leaves: list[tuple[TreeInfo, int]], embedder: Embedder, changes: ChangeSet,
    stats: RefreshStats, words: int,
) -> None:
    cells: list[tuple[NodeKey, str]] = []
    for info, nid in leaves:
        item = info.tree.nodes[nid].item
        assert item is not None
        key = (info.tree_id, nid)
        text = leaf_text(state, item)
        if item in state.facts:
            state.nodes[key] = NodeData(text, "leaf", state.fact_vecs[item])
        else:
            cells.append((key, text))
        changes.nodes.add(key)
    if cells:
        made = [state.cells[_item(state, k)] for k, _ in cells]
        said = _sentences(state, made, words, changes)
        vecs = embedder.embed([cell_embed_text(state, cell, words) for cell in made]
                              + [s for _, _, found in said for s in found or ()])
        for (key, text), vec in zip(cells, vecs):
            state.nodes[key] = NodeData(text, "leaf", vec)
        at = len(cells)
        for cell_id, n, found in said:
            rows = None if found is None else np.asarray(vecs[at : at + len(found)], np.float32)
            changes.sentences[cell_id] = CellSentences(n, rows)
            at += len(found or ())
    stats.leaves += len(leaves)


def _sentences(state: UserState, cells: list[Cell], words: int, changes: ChangeSet
               ) -> list[tuple[str, int, list[str] | None]]:
    """(cell id, words, the sentences to embed, None for a cell its leaf vector reads whole) of the
    cells of `cells` this operation made (of a session it writes), embedded in the cells' batch."""
    out: list[tuple[str, int, list[str] | None]] = []
    for cell in cells:
        if cell.session_id in changes.sessions and cell.id not in changes.sentences:
            turns = cell_turns(state, cell)
            n = turn_words(turns)
            out.append((cell.id, n, None if read_whole(n, words) else user_sentences(turns)))
    return out


def _item(state: UserState, key: NodeKey) -> str:
    item = state.trees[key[0]].tree.nodes[key[1]].item
    assert item is not None, f"{key} is not a leaf"
    return item


def _children_texts(state: UserState, info: TreeInfo, nid: int) -> list[str]:
    return [state.nodes[(info.tree_id, c)].text[:CHILD_CHARS] for c in info.tree.nodes[nid].children]


def _summaries(
    state: UserState,
    nodes: list[tuple[TreeInfo, int]],
    scheduler: Scheduler | None,
    cfg: TreeConfig,
    level: int,
    degraded_ok: bool,
    tags: dict[str, Any],
) -> list[tuple[str, str]]:
    """(summary, mode) per node. Mode `extractive` without a generator; `degraded` where a failed call
    fell back to an extractive summary (allowed only with `degraded_ok`; `memforest refresh` redoes it)."""
    entries = [_children_texts(state, info, nid) for info, nid in nodes]
    if scheduler is None:
        return [(extractive_summary(e, cfg.summary_words), "extractive") for e in entries]
    schema = prompt.schema(cfg.summary_words)
    requests = [
        ChatRequest(prompt.messages(info.label, e, cfg.summary_words), "summarize", prompt.SPEC.id,
                    prompt.SPEC.version, schema, token_bound(schema))
        for (info, _), e in zip(nodes, entries)
    ]
    out: list[tuple[str, str]] = []
    for (info, nid), e, res in zip(nodes, entries, scheduler.run(requests, level=level, tags=tags)):
        if isinstance(res, ModelUnavailableError):  # never summarised around a model that is gone
            raise res
        if isinstance(res, ModelError):
            if not degraded_ok:
                raise ModelError(f"summary of {info.tree_id} node {nid} failed: {res}")
            out.append((extractive_summary(e, cfg.summary_words), "degraded"))
        else:
            text = _summary_text(res)
            out.append((text, "llm") if text else (extractive_summary(e, cfg.summary_words), "degraded"))
    return out


def _summary_text(response: Any) -> str:
    payload = parse_json(response)
    sentences = payload.get("sentences", []) if isinstance(payload, dict) else []
    return (" ".join(" ".join(str(s).split()) for s in sentences if isinstance(s, str))
            if isinstance(sentences, list) else "")


def extractive_summary(entries: list[str], words: int) -> str:
    """The leading words of each child text, in time order, within the word budget."""
    per_child = max(8, words // max(1, len(entries)))
    parts = [" ".join(e.split()[:per_child]) for e in entries]
    return " | ".join(parts)


def _header(info: TreeInfo, nid: int) -> str:
    node = info.tree.nodes[nid]
    return interval_header(node.t_lo, node.t_hi, info.label)


def _mean_child(state: UserState, info: TreeInfo, nid: int) -> np.ndarray:
    return np.mean([state.nodes[(info.tree_id, c)].embedding for c in info.tree.nodes[nid].children], axis=0)
