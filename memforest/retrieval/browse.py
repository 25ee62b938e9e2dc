"""Browsing inside recalled trees, from interval summaries down to leaf evidence.

Embedding mode keeps one beam across all recalled trees and scores every visible child (leaves
included) by similarity to the query. LLM mode lets the model pick children per (tree, sub-query),
with the calls of one depth for all trees in one parallel batch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from memforest.errors import ModelError, ModelUnavailableError
from memforest.llm.base import ChatRequest
from memforest.llm.scheduler import Scheduler, parse_json
from memforest.prompts import browse as prompt
from memforest.prompts import token_bound
from memforest.resident.ondemand import NodeKey
from memforest.versions.snapshot import Snapshot

OPTION_CHARS = 300
MAX_OPTIONS = 40


@dataclass
class Hit:
    key: NodeKey
    score: float
    level: int


def _level(snap: Snapshot, key: NodeKey) -> int:
    return snap.state.trees[key[0]].tree.nodes[key[1]].level


def _children(snap: Snapshot, key: NodeKey) -> list[NodeKey]:
    return [(key[0], c) for c in snap.state.trees[key[0]].tree.nodes[key[1]].children]


def score_nodes(snap: Snapshot, keys: list[NodeKey], qvec: np.ndarray) -> np.ndarray:
    if not keys:
        return np.zeros(0, np.float32)
    return np.stack([snap.state.nodes[k].embedding for k in keys]) @ qvec


def embed_browse(
    snap: Snapshot, qvec: np.ndarray, tree_ids: list[str], beam: int, stop_level: int = 0
) -> tuple[list[Hit], list[dict[str, Any]]]:
    """Beam descent over all `tree_ids` at once; stops when every unit in the beam is at or below
    `stop_level`. Returns the final beam, best first, and the path (one entry per depth)."""
    roots = [(t, snap.state.trees[t].tree.root) for t in tree_ids
             if snap.state.trees[t].tree.root is not None]
    frontier = [Hit(k, float(s), _level(snap, k)) for k, s in zip(roots, score_nodes(snap, roots, qvec))]  # type: ignore[arg-type]
    path: list[dict[str, Any]] = []
    while any(h.level > stop_level for h in frontier):
        kept = [h for h in frontier if h.level <= stop_level]
        opened = [h for h in frontier if h.level > stop_level]
        kids = [c for h in opened for c in _children(snap, h.key)]
        scores = score_nodes(snap, kids, qvec)
        pool = kept + [Hit(k, float(s), _level(snap, k)) for k, s in zip(kids, scores)]
        pool.sort(key=lambda h: (-h.score, h.key))
        frontier = _distinct(snap, pool, beam)
        path.append({"opened": [list(h.key) for h in opened], "considered": len(pool),
                     "kept": [[*h.key, round(h.score, 4)] for h in frontier]})
    frontier.sort(key=lambda h: (-h.score, h.key))
    return frontier, path


def _distinct(snap: Snapshot, pool: list[Hit], beam: int) -> list[Hit]:
    """The best `beam` units, counting leaves of the same fact or cell in several trees once."""
    out: list[Hit] = []
    items: set[str] = set()
    for h in pool:
        if h.level == 0:
            item = snap.state.trees[h.key[0]].tree.nodes[h.key[1]].item or ""
            if item in items:
                continue
            items.add(item)
        out.append(h)
        if len(out) == beam:
            break
    return out


def llm_browse(
    snap: Snapshot,
    plans: list[tuple[str, str]],
    qvec_of: dict[str, np.ndarray],
    scheduler: Scheduler,
    beam: int,
    tags: dict[str, Any],
    stop_level: int = 0,
) -> tuple[list[Hit], list[dict[str, Any]]]:
    """Descend each (tree id, sub-query) plan with LLM choices; one batch of calls per depth. Units
    reached at or below `stop_level` are scored by embedding similarity to their plan's sub-query."""
    units: dict[NodeKey, float] = {}
    frontiers: list[list[NodeKey]] = []
    for tree_id, query in plans:
        root_id = snap.state.trees[tree_id].tree.root
        assert root_id is not None, f"{tree_id} is empty"
        root = (tree_id, root_id)
        if _level(snap, root) <= stop_level:
            units[root] = max(units.get(root, -1.0), float(snap.state.nodes[root].embedding @ qvec_of[query]))
            frontiers.append([])
        else:
            frontiers.append([root])
    path: list[dict[str, Any]] = []
    depth = 0
    while any(frontiers):
        depth += 1
        options = [[c for k in f for c in _children(snap, k)][:MAX_OPTIONS] for f in frontiers]
        active = [i for i, o in enumerate(options) if o]
        requests = [_request(plans[i][1], options[i], snap, beam) for i in active]
        results = scheduler.run(requests, level=depth, tags=tags)
        step: dict[str, Any] = {"depth": depth, "calls": len(requests), "selected": {}}
        new_frontiers: list[list[NodeKey]] = [[] for _ in plans]
        for i, res in zip(active, results):
            chosen = _chosen(res, options[i], snap, qvec_of[plans[i][1]], beam)
            step["selected"][f"{plans[i][0]}|{plans[i][1]}"] = [list(k) for k in chosen]
            for key in chosen:
                if _level(snap, key) <= stop_level:
                    score = float(snap.state.nodes[key].embedding @ qvec_of[plans[i][1]])
                    units[key] = max(units.get(key, -1.0), score)
                else:
                    new_frontiers[i].append(key)
        frontiers = new_frontiers
        path.append(step)
    hits = sorted((Hit(k, s, _level(snap, k)) for k, s in units.items()), key=lambda h: (-h.score, h.key))
    return hits, path


def _request(query: str, options: list[NodeKey], snap: Snapshot, beam: int) -> ChatRequest:
    texts = [" ".join(snap.state.nodes[k].text.split())[:OPTION_CHARS] for k in options]
    schema = prompt.schema(beam)
    return ChatRequest(prompt.messages(query, texts, beam), "browse", prompt.SPEC.id, prompt.SPEC.version,
                       schema, max_tokens=token_bound(schema))


def _chosen(res: Any, options: list[NodeKey], snap: Snapshot, qvec: np.ndarray, beam: int) -> list[NodeKey]:
    """The model's valid picks; on a failed call, the embedding ranking of the options (recorded in
    the call log as a failure); a model that is gone fails the query."""
    if isinstance(res, ModelUnavailableError):
        raise res
    if not isinstance(res, ModelError):
        payload = parse_json(res)
        picks = payload.get("selected", []) if isinstance(payload, dict) else []
        valid = list(dict.fromkeys(i for i in picks if isinstance(i, int) and 0 <= i < len(options)))
        if valid:
            return [options[i] for i in valid[:beam]]
    order = np.argsort(-score_nodes(snap, options, qvec), kind="stable")
    return [options[i] for i in order[:beam]]
