"""Forest recall: trees whose roots are near the query, united with the trees holding the top facts."""

from __future__ import annotations

import heapq

import numpy as np

from memforest.config import QueryConfig
from memforest.retrieval.results import RecalledTree
from memforest.versions.snapshot import Snapshot


def recall_trees(snap: Snapshot, qvec: np.ndarray, cfg: QueryConfig,
                 facts: tuple[np.ndarray, np.ndarray] | None = None) -> list[RecalledTree]:
    """Top `top_trees` trees by root_weight * root similarity + fact_weight * best fact similarity.
    `facts` (optional): the fact index's top list for `qvec`, at least `fact_recall` long, when the
    caller searched it already."""
    idx = snap.index
    root_sim: dict[str, float] = {}
    ids, scores = idx.roots.search(qvec, cfg.top_trees)
    for uid, s in zip(ids.tolist(), scores.tolist()):
        root_sim[idx.root_tree[uid]] = s
    fact_sim: dict[str, float] = {}
    ids, scores = facts if facts is not None else idx.facts.search(qvec, cfg.fact_recall)
    for fid, s in zip(ids[: cfg.fact_recall].tolist(), scores[: cfg.fact_recall].tolist()):
        # A fact said in many sessions: past its first top_trees + len(root_sim) session trees (in id
        # order) a tree can be chosen only for a root match (`also`), since at least top_trees of the
        # first ones score as much from this fact alone and win on id.
        for tid in snap.fact_trees(fid, limit=cfg.top_trees + len(root_sim), also=root_sim):
            fact_sim[tid] = max(fact_sim.get(tid, -1.0), s)
    trees = snap.state.trees
    ranked = heapq.nsmallest(cfg.top_trees, (
        (-(cfg.root_weight * root_sim.get(tid, 0.0) + cfg.fact_weight * fact_sim.get(tid, 0.0)), tid)
        for tid in root_sim.keys() | fact_sim.keys() if tid in trees))
    return [RecalledTree(tid, trees[tid].family, -neg, root_sim.get(tid), fact_sim.get(tid))
            for neg, tid in ranked]
