"""The retrieval settings that bypass or shorten tree browsing (ablations of the query path).

- flat: the top-k facts by similarity to the question, no trees (facts are indexed whatever the tree
  families); a memory without facts (the generator-free write path) gives no evidence, unless
  `query.flat_units` is `cells`: then the top-k cells, no trees.
- root: the recalled trees' root summaries, best first, no descent.
- embed_planner: the planner's sub-queries, each browsed by embedding beam descent in its tree.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from memforest.config import QueryConfig
from memforest.llm.base import Embedder
from memforest.retrieval.browse import Hit, embed_browse
from memforest.retrieval.planner import Plan
from memforest.retrieval.results import Evidence, RecalledTree
from memforest.timeutil import iso_date
from memforest.versions.snapshot import Snapshot


def flat_evidence(snap: Snapshot, qvec: np.ndarray, k: int,
                  units: str = "facts") -> tuple[list[Evidence], dict[str, Any]]:
    """The `k` facts (`units` = "cells": cells) nearest the question, in time order."""
    idx = snap.index
    out = []
    if units == "cells":
        ids, scores = idx.cells.search(qvec, k)
        for uid, score in zip(ids.tolist(), scores.tolist()):
            key = idx.cell_key.get(uid)
            cell = snap.state.cells.get(key[2]) if key is not None else None
            if cell is not None:
                out.append(Evidence("cell", cell.id, cell.text, iso_date(cell.time), float(score), "", "flat",
                                    [cell.session_id]))
        indexed = {"cells_indexed": len(idx.cell_key)}
    else:
        ids, scores = idx.facts.search(qvec, k)
        for fid, score in zip(ids.tolist(), scores.tolist()):
            fact = snap.state.facts.get(fid)
            if fact is not None:
                out.append(Evidence("fact", fact.id, fact.text, iso_date(fact.time), float(score), "", "flat",
                                    list(fact.sorted_sessions)))
        indexed = {"facts_indexed": len(idx.facts)}
    trace = {**indexed, "kept": [[e.id, round(e.score, 4)] for e in out]}
    return sorted(out, key=lambda e: (e.time, e.id)), trace


def root_evidence(snap: Snapshot, recalled: list[RecalledTree], k: int) -> list[Evidence]:
    """The root summary of each of the best `k` recalled trees, in time order; a root that is a leaf
    (a one-item tree) is that item's text."""
    out = []
    for r in recalled[:k]:
        tree = snap.state.trees[r.tree_id].tree
        if tree.root is None:
            continue
        node = tree.nodes[tree.root]
        data = snap.state.nodes[(r.tree_id, tree.root)]
        sessions = sorted({s for item, _ in tree.items() for s in _sessions_of(snap, item)})
        out.append(Evidence("summary", f"{r.tree_id}#{tree.root}", data.text, iso_date(node.t_hi), r.score,
                            r.tree_id, "root", sessions))
    return sorted(out, key=lambda e: (e.time, e.id))


def _sessions_of(snap: Snapshot, item: str) -> list[str]:
    if item in snap.state.facts:
        return list(snap.state.facts[item].sorted_sessions)
    cell = snap.state.cells.get(item)
    return [cell.session_id] if cell is not None else []


def planned_embed_browse(
    snap: Snapshot, plan: Plan, embedder: Embedder, cfg: QueryConfig, stop_level: int,
) -> tuple[list[Hit], list[dict[str, Any]]]:
    """Embedding beam descent of each planned (tree, sub-query); a unit reached by several keeps its
    best score."""
    queries = sorted({q for _, q in plan.queries})
    vecs = dict(zip(queries, embedder.embed(queries, "query"))) if queries else {}
    best: dict[tuple[str, int], Hit] = {}
    path: list[dict[str, Any]] = []
    for tree_id, query in plan.queries:
        hits, steps = embed_browse(snap, vecs[query], [tree_id], cfg.beam, stop_level)
        path.append({"tree": tree_id, "query": query, "depths": len(steps),
                     "kept": [[*h.key, round(h.score, 4)] for h in hits]})
        for h in hits:
            if h.key not in best or h.score > best[h.key].score:
                best[h.key] = h
    return sorted(best.values(), key=lambda h: (-h.score, h.key)), path
