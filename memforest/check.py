"""`memforest check`: the store's invariants, placements and index rows."""

from __future__ import annotations

from typing import Any

from memforest.index.forest_index import ForestIndex
from memforest.routing import entities
from memforest.state import UserState
from memforest.trees.memtree import TreeInvariantError


def check_state(state: UserState, index: ForestIndex | None) -> dict[str, Any]:
    """A list of problems (empty when the store is sound); `index`: the resident indexes of the same
    version, checked row for row against the store (None: they are rebuilt from it)."""
    problems: list[str] = []
    for tid, info in state.trees.items():
        try:
            info.tree.validate()
        except TreeInvariantError as e:
            problems.append(f"{tid}: {e}")
            continue
        for nid in info.tree.nodes:
            if (tid, nid) not in state.nodes:
                problems.append(f"{tid} node {nid}: no summary or embedding")
        problems += _placements(state, tid)
    problems += _facts(state)
    if index is not None and not index.rows_match(state):
        problems.append("index rows differ from store rows")
    rebuilt = index is None
    return {"user": state.user, "version": state.version, "ok": not problems, "problems": problems,
            "index_rebuilt": rebuilt, "trees": len(state.trees), "facts": len(state.facts)}


def _placements(state: UserState, tid: str) -> list[str]:
    info = state.trees[tid]
    items = set(info.tree.placements())
    if info.family == "session":
        expected = set(state.session_cells.get(info.label, []))
        return [] if items == expected else [f"{tid}: leaves differ from the session's cells"]
    missing = sorted(i for i in items if i not in state.facts)
    return [f"{tid}: leaf for unknown fact {m}" for m in missing[:5]]


def _facts(state: UserState) -> list[str]:
    problems = []
    user_tree = state.trees.get(entities.USER_TREE)
    in_scene = {item for s in state.scenes.values() if s.tree_id in state.trees
                for item in state.trees[s.tree_id].tree.placements()}
    for f in state.facts.values():
        if not f.occurrences:
            problems.append(f"fact {f.id} has no occurrence")
        for o in f.occurrences:
            if o.session_id not in state.sessions or o.cell_id not in state.cells:
                problems.append(f"fact {f.id}: occurrence in missing session or cell {o.cell_id}")
        if f.origin == "user" and (user_tree is None or f.id not in user_tree.tree):
            problems.append(f"fact {f.id}: user fact missing from {entities.USER_TREE}")
        if f.id not in in_scene:
            problems.append(f"fact {f.id}: in no scene")
    for sid, scene in state.scenes.items():
        if scene.tree_id not in state.trees or len(state.trees[scene.tree_id].tree) != scene.size:
            problems.append(f"{sid}: size {scene.size} differs from its tree")
    return problems
