"""Merging materialised forests (migration) without re-extraction.

Facts go through canonicalisation against the target (exact, then embedding candidates checked by
the LLM); trees of a scope the target lacks are copied with their summaries and embeddings; trees
of a shared scope receive the other's leaves in time order, so only the merged paths are refreshed.
Scenes are renumbered, then similar scenes merge as in online routing."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import numpy as np

from memforest.config import MemForestConfig
from memforest.errors import InputError
from memforest.facts.canonical import canonicalize, matrix_neighbours
from memforest.facts.extraction import Candidate
from memforest.llm.scheduler import Scheduler
from memforest.resident.cow import CowMap
from memforest.resident.ondemand import TreeInfo
from memforest.routing import entities, scenes
from memforest.routing.router import Router
from memforest.sentences import stored_sentences
from memforest.state import ChangeSet, UserState
from memforest.trees.memtree import MemTree
from memforest.types import Cell, EntityStat, Session


def merge_into(
    target: UserState, source: UserState, cfg: MemForestConfig, scheduler: Scheduler | None,
    ch: ChangeSet, tags: dict[str, Any],
) -> dict[str, Any]:
    """Merge `source` into `target` (a private copy); record changes in `ch`. Returns counts."""
    if (source.embedder, source.dim) != (target.embedder, target.dim) and target.version:
        raise InputError(f"cannot merge {source.user}: embedder {source.embedder} differs from "
                         f"{target.embedder}")
    clash = sorted(set(source.sessions) & set(target.sessions))
    if clash:
        raise InputError(f"sessions stored for both {source.user!r} and {target.user!r}: {clash[:5]}")
    router = Router(target, cfg, ch)
    _copy_sessions(target, source, ch)
    mapping, stats = _merge_facts(target, source, cfg, scheduler, ch, tags)
    for info in source.trees.values():
        if info.family == "entity":
            _merge_entity_tree(target, source, info, mapping, router, ch)
    _merge_entity_stats(target, source, mapping, router, cfg)
    existing = set(target.scenes)
    touched = {_merge_scene(target, source, sid, mapping, existing, cfg, ch) for sid in sorted(source.scenes)}
    router.merge_scenes(touched)
    return {"source": source.user, "sessions": len(source.sessions), **stats}


def _copy_sessions(target: UserState, source: UserState, ch: ChangeSet) -> None:
    """The sessions and cells of `source`, read whole (the copies never read from `source`'s store),
    with the sentence vectors its store holds for them."""
    ch.sentences.update(stored_sentences(source, [c for cs in source.session_cells.values() for c in cs]))
    for sid, session in source.sessions.items():
        target.add_session(Session(sid, session.time, list(session.turns)))
        target.session_cells[sid] = list(source.session_cells.get(sid, []))
        for cid in target.session_cells[sid]:
            c = source.cells[cid]
            target.cells[cid] = Cell(c.id, c.session_id, c.index, c.turn_lo, c.turn_hi, c.time, c.text)
        ch.sessions.add(sid)
        tid = f"session:{sid}"
        if tid in source.trees:
            _copy_tree(target, source, source.trees[tid], tid, {}, ch)


def _merge_facts(
    target: UserState, source: UserState, cfg: MemForestConfig, scheduler: Scheduler | None,
    ch: ChangeSet, tags: dict[str, Any],
) -> tuple[dict[str, str], dict[str, int]]:
    ids = sorted(source.facts)
    facts = [source.facts[f] for f in ids]
    cands = [Candidate(f.text, f.origin, f.role, f.participants, f.entities, f.topics, f.time_text,
                       f.event_start, f.event_end, f.attribute, f.domain, f.collection, f.occurrences[0])
             for f in facts]
    vecs = source.fact_vecs.stack(ids) if ids else np.zeros((0, source.dim), np.float32)
    existing = list(target.facts)
    matrix = (target.fact_vecs.stack(existing) if existing
              else np.zeros((0, source.dim), np.float32))
    canon_cfg = cfg.canon if scheduler is not None else replace(cfg.canon, max_llm_checks=0)
    target.make_facts()  # (a loaded version's, in one pass: every one is compared)
    by_norm = {f.norm: fid for fid, f in target.facts.items()}
    result = canonicalize(cands, target.facts, by_norm, matrix_neighbours(existing, matrix), vecs,
                          scheduler, canon_cfg, tags, within_batch=False)  # type: ignore[arg-type]
    for fact in result.new_facts:
        target.add_fact(fact, result.new_embeddings[fact.id])
    mapping = dict(zip(ids, result.resolved_ids))
    for src, fid in mapping.items():
        target.facts[fid].occurrences.extend(source.facts[src].occurrences[1:])
        ch.facts.add(fid)
    return mapping, {"facts_new": len(result.new_facts), "facts_merged": result.merged,
                     "dedup_checks": result.llm_checks}


def _copy_tree(target: UserState, source: UserState, info: TreeInfo, new_id: str,
               mapping: dict[str, str], ch: ChangeSet) -> TreeInfo:
    """A verbatim copy (structure, summaries, embeddings) when no leaf is renamed; else a rebuild by
    insertion, whose paths the next refresh summarises."""
    leaves = [(mapping.get(item, item), t) for item, t in info.tree.items()]
    renamed = any(mapping.get(item, item) != item for item, _ in info.tree.items())
    out = target.add_tree(new_id, info.family, info.label, info.tree.fanout)
    if renamed:
        for item, t in leaves:
            if item not in out.tree:
                out.tree.insert(item, t)
    else:
        rows = [dict(r, tree_id=new_id) for r in info.tree.to_rows()]
        out.tree = MemTree.from_rows(new_id, info.tree.fanout, rows, info.tree.next_node_id, validate=False)
        for nid in out.tree.nodes:
            target.nodes[(new_id, nid)] = copy.copy(source.nodes[(info.tree_id, nid)])
            ch.nodes.add((new_id, nid))
    ch.trees.add(new_id)
    return out


def _merge_entity_tree(target: UserState, source: UserState, info: TreeInfo, mapping: dict[str, str],
                       router: Router, ch: ChangeSet) -> None:
    have = target.trees.get(info.tree_id)
    if have is None:
        _copy_tree(target, source, info, info.tree_id, mapping, ch)
        return
    for src_item, _ in info.tree.items():
        item = mapping.get(src_item, src_item)
        if item not in have.tree:
            have.tree.insert(item, target.facts[item].time)
            ch.trees.add(info.tree_id)


def _merge_entity_stats(target: UserState, source: UserState, mapping: dict[str, str], router: Router,
                        cfg: MemForestConfig) -> None:
    for label, stat in source.entities.items():
        mine = target.entities.setdefault(label, EntityStat(label))
        mine.facts |= {mapping.get(f, f) for f in stat.facts}
        if stat.tree_id and f"entity:{label}" in target.trees:
            mine.tree_id = f"entity:{label}"
    for label in sorted(source.entities):
        target.entities[label].sessions = CowMap(entities.session_counts(target, target.entities[label]))
        router.sync_entity(label, set(target.entities[label].facts))


def _merge_scene(target: UserState, source: UserState, scene_id: str, mapping: dict[str, str],
                 candidates: set[str], cfg: MemForestConfig, ch: ChangeSet) -> str:
    """Route a whole source scene as online routing routes a fact: into the best target scene when
    its centroid scores at least `spawn` (same domain, within the size cap), else as a new scene."""
    scene = source.scenes[scene_id]
    ranked = sorted(
        ((scenes.score(t, scene.centroid, scene.t_last, cfg.scene), t.scene_id)
         for t in (target.scenes[c] for c in sorted(candidates) if c in target.scenes)
         if t.domain == scene.domain and t.size + scene.size <= cfg.scene.max_size),
        reverse=True,
    )
    if ranked and ranked[0][0] >= cfg.scene.spawn:
        keep = target.scenes[ranked[0][1]]
        tree = target.trees[keep.tree_id].tree
        for src_item, _ in source.trees[scene.tree_id].tree.items():
            item = mapping.get(src_item, src_item)
            if item not in tree:
                tree.insert(item, target.facts[item].time)
        scenes.recompute(target, keep.scene_id)
        ch.trees.add(keep.tree_id)
        ch.scenes.add(keep.scene_id)
        return keep.scene_id
    return _copy_scene(target, source, scene_id, mapping, ch)


def _copy_scene(target: UserState, source: UserState, scene_id: str, mapping: dict[str, str],
                ch: ChangeSet) -> str:
    scene = source.scenes[scene_id]
    new_id = f"scene:{target.next_scene}"
    target.next_scene += 1
    _copy_tree(target, source, source.trees[scene.tree_id], new_id, mapping, ch)
    target.scenes[new_id] = replace(scene, scene_id=new_id, tree_id=new_id, total=scene.total.copy())
    scenes.recompute(target, new_id)
    ch.scenes.add(new_id)
    return new_id
