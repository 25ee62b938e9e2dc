"""Routing (no LLM calls): cells to session trees; facts to entity and scene trees."""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet

from memforest.config import MemForestConfig
from memforest.routing import entities, scenes
from memforest.state import ChangeSet, UserState
from memforest.types import Fact


def session_tree_id(session_id: str) -> str:
    return f"session:{session_id}"


class Router:
    """Applies routing decisions to the state's trees and records what changed."""

    def __init__(self, state: UserState, cfg: MemForestConfig, changes: ChangeSet) -> None:
        self.state = state
        self.cfg = cfg
        self.ch = changes

    def builds(self, family: str) -> bool:
        """Whether trees of `family` are built (`tree.families`, an ablation switch)."""
        return family in self.cfg.tree.families

    def add_session_tree(self, session_id: str) -> None:
        if not self.builds("session"):
            return
        tid = session_tree_id(session_id)
        info = self.state.add_tree(tid, "session", session_id, self.cfg.tree.fanout_session)
        for cid in self.state.session_cells[session_id]:
            cell = self.state.cells[cid]
            info.tree.insert(cid, cell.time)
        self.ch.trees.add(tid)

    def route_facts(self, new_facts: list[Fact],
                    updated: list[tuple[Fact, AbstractSet[str]]]) -> None:
        """Route new facts to every scope; update entity stats of facts seen again (`updated` gives a
        fact with the sessions it gained in this operation, having lost none)."""
        added: dict[str, set[str]] = {}
        touched_scenes: set[str] = set()
        for fact in new_facts:
            if fact.origin == "user" and self.builds("entity"):
                self._place(entities.USER_TREE, "entity", "user", fact)
            if self.builds("scene"):
                touched_scenes |= self._route_scene(fact)
        none: frozenset[str] = frozenset()
        for fact, gained in [*((f, none) for f in new_facts), *updated]:
            for label, is_new in entities.record_mentions(self.state, fact, self.cfg.entity,
                                                          (gained, none)).items():
                added.setdefault(label, set()).update([fact.id] if is_new else [])
        for label in sorted(added):
            self.sync_entity(label, added[label])
        self.merge_scenes(touched_scenes)

    def _place(self, tree_id: str, family: str, label: str, fact: Fact) -> None:
        if tree_id not in self.state.trees:
            fanout = self.cfg.tree.fanout_scene if family == "scene" else self.cfg.tree.fanout_entity
            self.state.add_tree(tree_id, family, label, fanout)
        if fact.id not in self.state.trees[tree_id].tree:
            self.state.writable_tree(tree_id).tree.insert(fact.id, fact.time)
            self.state.place(tree_id, fact.id)
            self.ch.trees.add(tree_id)

    def sync_entity(self, label: str, added: set[str] | None = None) -> None:
        """Activate (and back-fill) or extend a label's tree with the facts `added` to it; drop the tree
        when the label falls below the rule."""
        stat = self.state.writable_entity(label)
        self.ch.entities.add(label)
        if entities.is_active(stat, self.cfg.entity) and self.builds("entity"):
            fill = stat.facts if stat.tree_id is None else (added or set()) & stat.facts
            stat.tree_id = stat.tree_id or f"entity:{label}"
            for fid in sorted(fill, key=lambda f: (self.state.facts[f].time, f)):
                self._place(stat.tree_id, "entity", label, self.state.facts[fid])
            return
        if stat.tree_id is not None:
            self.drop_tree(stat.tree_id)
            stat.tree_id = None
        if not stat.facts:
            del self.state.entities[label]
            self.ch.deleted_entities.add(label)

    def _route_scene(self, fact: Fact) -> set[str]:
        vec = self.state.fact_vecs[fact.id]
        chosen = scenes.choose_scenes(self.state, fact, vec, self.cfg.scene)
        if not chosen:
            chosen = [scenes.new_scene(self.state, fact, vec).scene_id]
        else:
            for sid in chosen:
                scenes.add_to_scene(self.state, sid, vec, fact.time)
        for sid in chosen:
            self._place(sid, "scene", self._scene_label(sid), fact)
            self.ch.scenes.add(sid)
        return set(chosen)

    def _scene_label(self, scene_id: str) -> str:
        domain = self.state.scenes[scene_id].domain
        return f"{domain} scene" if domain else "scene"

    def merge_scenes(self, touched: set[str]) -> None:
        for keep_id, absorb_id in scenes.merge_candidates(self.state, touched, self.cfg.scene):
            keep, absorb = self.state.scenes[keep_id], self.state.scenes[absorb_id]
            target = self.state.writable_tree(keep.tree_id).tree
            for item, t in list(self.state.trees[absorb.tree_id].tree.items()):
                if item not in target:
                    target.insert(item, t)
                    self.state.place(keep.tree_id, item)
            scenes.recompute(self.state, keep_id)
            self.ch.trees.add(keep.tree_id)
            self.ch.scenes.add(keep_id)
            self.drop_tree(absorb.tree_id)
            scenes.drop_scene(self.state, absorb_id)
            self.ch.deleted_scenes.add(absorb_id)

    def drop_tree(self, tree_id: str) -> None:
        info = self.state.trees.pop(tree_id)
        for nid in info.tree.nodes:
            self.state.nodes.pop((tree_id, nid), None)
        if info.family != "session":
            for item in info.tree.placements():
                self.state.unplace(tree_id, item)
        self.ch.deleted_trees.add(tree_id)
        self.ch.trees.discard(tree_id)

    def remove_fact(self, fact: Fact) -> None:
        """Remove a fact's leaves from every tree and its weight from entity and scene stats."""
        for tid in self.state.trees_holding(fact.id):
            info = self.state.writable_tree(tid)
            info.tree.delete(fact.id)
            self.state.unplace(tid, fact.id)
            self.ch.trees.add(tid)
            if info.family == "scene":
                if len(info.tree):
                    (t,) = self.state.fact_times([fact.id])
                    scenes.remove_from_scene(self.state, tid, self.state.fact_vecs[fact.id], t)
                    self.ch.scenes.add(tid)
                else:
                    self.drop_tree(tid)
                    scenes.drop_scene(self.state, tid)
                    self.ch.deleted_scenes.add(tid)
            elif not len(info.tree):
                self.drop_tree(tid)
        self.state.remove_fact(fact.id)
        self.ch.deleted_facts.add(fact.id)
        self.ch.facts.discard(fact.id)
        for label in sorted(entities.forget_fact(self.state, fact, self.cfg.entity)):
            self.sync_entity(label)

    def recount(self, facts: Sequence[Fact], lost: str) -> None:
        """Update entity stats of facts that lost their occurrences from session `lost` (a deleted
        session) and gained none."""
        labels: set[str] = set()
        moved = (frozenset[str](), frozenset([lost]))
        for fact in facts:
            labels |= set(entities.record_mentions(self.state, fact, self.cfg.entity, moved))
        for label in sorted(labels):
            self.sync_entity(label)

    def drop_session_tree(self, session_id: str) -> None:
        tid = session_tree_id(session_id)
        if tid in self.state.trees:
            self.drop_tree(tid)
