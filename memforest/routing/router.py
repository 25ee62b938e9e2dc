"""Routing (no LLM calls): cells to session trees; facts to entity and scene trees."""

from __future__ import annotations

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

    def route_facts(self, new_facts: list[Fact], updated: list[Fact]) -> None:
        """Route new facts to every scope; refresh entity stats for facts seen again."""
        touched_labels: set[str] = set()
        touched_scenes: set[str] = set()
        for fact in new_facts:
            if fact.origin == "user" and self.builds("entity"):
                self._place(entities.USER_TREE, "entity", "user", fact)
            if self.builds("scene"):
                touched_scenes |= self._route_scene(fact)
        for fact in [*new_facts, *updated]:
            touched_labels |= entities.record_mentions(self.state, fact, self.cfg.entity)
        for label in sorted(touched_labels):
            self.sync_entity(label)
        self.merge_scenes(touched_scenes)

    def _place(self, tree_id: str, family: str, label: str, fact: Fact) -> None:
        info = self.state.trees.get(tree_id)
        if info is None:
            fanout = self.cfg.tree.fanout_scene if family == "scene" else self.cfg.tree.fanout_entity
            info = self.state.add_tree(tree_id, family, label, fanout)
        if fact.id not in info.tree:
            info.tree.insert(fact.id, fact.time)
            self.ch.trees.add(tree_id)

    def sync_entity(self, label: str) -> None:
        """Activate (and back-fill) or extend a label's tree; drop it when the label falls below the rule."""
        stat = self.state.entities[label]
        self.ch.entities.add(label)
        if entities.is_active(stat, self.cfg.entity) and self.builds("entity"):
            stat.tree_id = stat.tree_id or f"entity:{label}"
            for fid in sorted(stat.facts, key=lambda f: (self.state.facts[f].time, f)):
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
                scenes.add_to_scene(self.state.scenes[sid], vec, fact.time)
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
            target = self.state.trees[keep.tree_id].tree
            for item, t in list(self.state.trees[absorb.tree_id].tree.items()):
                if item not in target:
                    target.insert(item, t)
            scenes.recompute(keep, self.state)
            self.ch.trees.add(keep.tree_id)
            self.ch.scenes.add(keep_id)
            self.drop_tree(absorb.tree_id)
            del self.state.scenes[absorb_id]
            self.ch.deleted_scenes.add(absorb_id)

    def drop_tree(self, tree_id: str) -> None:
        info = self.state.trees.pop(tree_id)
        for nid in info.tree.nodes:
            self.state.nodes.pop((tree_id, nid), None)
        self.ch.deleted_trees.add(tree_id)
        self.ch.trees.discard(tree_id)

    def remove_fact(self, fact: Fact) -> None:
        """Remove a fact's leaves from every tree and its weight from entity and scene stats."""
        for tid in self.state.trees_holding(fact.id):
            info = self.state.trees[tid]
            info.tree.delete(fact.id)
            self.ch.trees.add(tid)
            if info.family == "scene":
                scene = self.state.scenes[tid]
                if len(info.tree):
                    scenes.recompute(scene, self.state)
                    self.ch.scenes.add(tid)
                else:
                    self.drop_tree(tid)
                    del self.state.scenes[tid]
                    self.ch.deleted_scenes.add(tid)
            elif not len(info.tree):
                self.drop_tree(tid)
        labels = entities.fact_labels(fact, self.cfg.entity)
        del self.state.facts[fact.id]
        self.state.fact_vecs.pop(fact.id, None)
        self.ch.deleted_facts.add(fact.id)
        self.ch.facts.discard(fact.id)
        for label in sorted(entities.forget_fact(self.state, fact.id, labels)):
            self.sync_entity(label)

    def recount(self, facts: list[Fact]) -> None:
        """Re-derive entity stats of facts whose occurrences changed (sessions may have gone)."""
        labels: set[str] = set()
        for fact in facts:
            labels |= entities.record_mentions(self.state, fact, self.cfg.entity)
        for label in sorted(labels):
            self.sync_entity(label)

    def drop_session_tree(self, session_id: str) -> None:
        tid = session_tree_id(session_id)
        if tid in self.state.trees:
            self.drop_tree(tid)
