"""Scene scopes: online centroid clustering of facts, gated by domain key, with a recency bonus.

Scenes are scored all at once over a centroid table per domain (`UserState.scene_tables`), kept in
step with every scene edit, so routing a fact costs one matrix-vector product, not a Python loop."""

from __future__ import annotations

import numpy as np

from memforest.config import SceneConfig
from memforest.resident.vector_table import VectorTable
from memforest.state import UserState
from memforest.types import Fact, Scene

DAY = 86400.0


def score(scene: Scene, vec: np.ndarray, t: float, cfg: SceneConfig) -> float:
    """Cosine to the centroid, plus `time_bonus * (1 - gap / window)` within the time window."""
    gap_days = abs(t - scene.t_last) / DAY
    bonus = (cfg.time_bonus * (1.0 - gap_days / cfg.time_window_days) if gap_days <= cfg.time_window_days
             else 0.0)
    return float(scene.centroid @ vec) + bonus


def _scores(table: VectorTable, vec: np.ndarray, t: float, cfg: SceneConfig) -> tuple[np.ndarray, np.ndarray]:
    """Row numbers and scores (as `score`) of the table's scenes below the size cap."""
    rows, sims = table.scores(vec)
    meta = table.row_meta(rows)
    open_ = meta[:, 0] < cfg.max_size
    rows, sims, meta = rows[open_], sims[open_], meta[open_]
    gap = np.abs(t - meta[:, 1]) / DAY
    bonus = np.where(gap <= cfg.time_window_days, cfg.time_bonus * (1.0 - gap / cfg.time_window_days), 0.0)
    return rows, sims.astype(np.float64) + bonus


def choose_scenes(state: UserState, fact: Fact, vec: np.ndarray, cfg: SceneConfig) -> list[str]:
    """Scene ids to assign `fact` to: the best (and a second one above `second_assign`) when the best
    reaches `assign`; the best alone between `spawn` and `assign`; none (spawn a new one) below."""
    table = state.scene_tables.get(fact.domain or "")
    if table is None or not len(table):
        return []
    rows, scores = _scores(table, vec, fact.time, cfg)
    if not len(rows):
        return []
    best = range(len(rows)) if len(rows) <= 2 else np.argpartition(-scores, 1)[:2].tolist()
    ranked = sorted(((float(scores[i]), str(table.row_key(int(rows[i])))) for i in best), reverse=True)
    if ranked[0][0] < cfg.spawn:
        return []
    chosen = [ranked[0][1]]
    if ranked[0][0] >= cfg.assign and len(ranked) > 1 and ranked[1][0] >= cfg.second_assign:
        chosen.append(ranked[1][1])
    return chosen


def unindex_scene(state: UserState, scene: Scene) -> None:
    table = state.scene_tables.get(scene.domain)
    if table is not None:
        table.remove([scene.scene_id])


def add_to_scene(state: UserState, scene_id: str, vec: np.ndarray, t: float) -> None:
    scene = state.writable_scene(scene_id)
    scene.total = (scene.total + vec).astype(np.float32)
    scene.size += 1
    scene.t_last = max(scene.t_last, t)
    state.index_scene(scene)


def remove_from_scene(state: UserState, scene_id: str, vec: np.ndarray, t: float) -> None:
    """Take a member (vector `vec`, time `t`) out of a scene whose tree no longer holds it: its vector
    is subtracted from the total, as `add_to_scene` adds it, and the last time is found again among
    the members only when the member held it. (Recomputing the total gathers every member's vector:
    as many scattered pages of the facts' mapped vectors, when nothing has read them.)"""
    scene = state.writable_scene(scene_id)
    tree = state.trees[scene.tree_id].tree
    scene.size = len(tree)
    scene.total = (scene.total - vec).astype(np.float32)
    if t >= scene.t_last:
        scene.t_last = max(state.fact_times([item for item, _ in tree.items()]), default=scene.t_last)
    state.index_scene(scene)


def recompute(state: UserState, scene_id: str) -> None:
    """Size, total and last time from the scene tree's current members."""
    scene = state.writable_scene(scene_id)
    tree = state.trees[scene.tree_id].tree
    members = [item for item, _ in tree.items()]
    scene.size = len(members)
    scene.total = (state.fact_vecs.stack(members).sum(axis=0, dtype=np.float32) if members
                   else scene.total * 0)
    scene.t_last = max(state.fact_times(members), default=scene.t_last)
    state.index_scene(scene)


def new_scene(state: UserState, fact: Fact, vec: np.ndarray) -> Scene:
    scene_id = f"scene:{state.next_scene}"
    state.next_scene += 1
    scene = Scene(scene_id, fact.domain or "", np.asarray(vec, np.float32).copy(), 1, fact.time, scene_id)
    state.scenes[scene_id] = scene
    state.writable_scene(scene_id)
    state.index_scene(scene)
    return scene


def drop_scene(state: UserState, scene_id: str) -> None:
    unindex_scene(state, state.scenes.pop(scene_id))


def merge_candidates(state: UserState, touched: set[str], cfg: SceneConfig) -> list[tuple[str, str]]:
    """(keep, absorb) pairs of scenes with the same domain, centroid cosine >= `merge`, and a combined
    size within the cap (the first such scene by id); each scene takes part in at most one pair."""
    pairs: list[tuple[str, str]] = []
    used: set[str] = set()
    for sid in sorted(touched):
        a = state.scenes.get(sid)
        if a is None or sid in used:
            continue
        table = state.scene_tables[a.domain]
        rows, sims = table.scores(a.centroid)
        sizes = table.row_meta(rows)[:, 0]
        ok = (sims >= cfg.merge) & (sizes + a.size <= cfg.max_size)
        others = sorted(str(table.row_key(r)) for r in rows[ok])
        other_id = next((o for o in others if o != sid and o not in used), None)
        if other_id is None:
            continue
        keep, absorb = sorted((a, state.scenes[other_id]), key=lambda s: (-s.size, s.scene_id))
        pairs.append((keep.scene_id, absorb.scene_id))
        used.update((sid, other_id))
    return pairs

