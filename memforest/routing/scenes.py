"""Scene scopes: online centroid clustering of facts, gated by domain key, with a recency bonus."""

from __future__ import annotations

import numpy as np

from memforest.config import SceneConfig
from memforest.state import Scene, UserState
from memforest.types import Fact

DAY = 86400.0


def score(scene: Scene, vec: np.ndarray, t: float, cfg: SceneConfig) -> float:
    """Cosine to the centroid, plus `time_bonus * (1 - gap / window)` within the time window."""
    gap_days = abs(t - scene.t_last) / DAY
    bonus = cfg.time_bonus * (1.0 - gap_days / cfg.time_window_days) if gap_days <= cfg.time_window_days else 0.0
    return float(scene.centroid @ vec) + bonus


def choose_scenes(state: UserState, fact: Fact, vec: np.ndarray, cfg: SceneConfig) -> list[str]:
    """Scene ids to assign `fact` to: the best (and a second one above `second_assign`) when the best
    reaches `assign`; the best alone between `spawn` and `assign`; none (spawn a new one) below."""
    domain = fact.domain or ""
    ranked = sorted(
        ((score(s, vec, fact.time, cfg), s.scene_id) for s in state.scenes.values()
         if s.domain == domain and s.size < cfg.max_size),
        reverse=True,
    )
    if not ranked or ranked[0][0] < cfg.spawn:
        return []
    chosen = [ranked[0][1]]
    if ranked[0][0] >= cfg.assign and len(ranked) > 1 and ranked[1][0] >= cfg.second_assign:
        chosen.append(ranked[1][1])
    return chosen


def add_to_scene(scene: Scene, vec: np.ndarray, t: float) -> None:
    scene.total = (scene.total + vec).astype(np.float32)
    scene.size += 1
    scene.t_last = max(scene.t_last, t)


def recompute(scene: Scene, state: UserState) -> None:
    """Size, total and last time from the scene tree's current members."""
    tree = state.trees[scene.tree_id].tree
    members = [item for item, _ in tree.items()]
    scene.size = len(members)
    scene.total = np.sum([state.fact_vecs[m] for m in members], axis=0).astype(np.float32) if members else scene.total * 0
    scene.t_last = max((state.facts[m].time for m in members), default=scene.t_last)


def new_scene(state: UserState, fact: Fact, vec: np.ndarray) -> Scene:
    scene_id = f"scene:{state.next_scene}"
    state.next_scene += 1
    scene = Scene(scene_id, fact.domain or "", np.asarray(vec, np.float32).copy(), 1, fact.time, scene_id)
    state.scenes[scene_id] = scene
    return scene


def merge_candidates(state: UserState, touched: set[str], cfg: SceneConfig) -> list[tuple[str, str]]:
    """(keep, absorb) pairs of scenes with the same domain, centroid cosine >= `merge`, and a combined
    size within the cap; each scene takes part in at most one pair."""
    pairs: list[tuple[str, str]] = []
    used: set[str] = set()
    for sid in sorted(touched):
        a = state.scenes.get(sid)
        if a is None or sid in used:
            continue
        for other in sorted(state.scenes.values(), key=lambda s: s.scene_id):
            if other.scene_id == sid or other.scene_id in used or other.domain != a.domain:
                continue
            if a.size + other.size <= cfg.max_size and float(a.centroid @ other.centroid) >= cfg.merge:
                keep, absorb = sorted((a, other), key=lambda s: (-s.size, s.scene_id))
                pairs.append((keep.scene_id, absorb.scene_id))
                used.update((sid, other.scene_id))
                break
    return pairs
