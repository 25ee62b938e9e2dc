"""The write path of one ingest: chunk, extract (parallel waves), canonicalise, route, refresh.

It edits a private copy of the user's state and records every change in a ChangeSet; the caller
commits that ChangeSet in one transaction."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from memforest.config import MemForestConfig
from memforest.errors import InputError
from memforest.facts.canonical import canonicalize
from memforest.facts.chunking import chunk_session
from memforest.facts.extraction import extract
from memforest.llm.base import Embedder
from memforest.llm.scheduler import Scheduler
from memforest.refresh import refresh
from memforest.routing.router import Router
from memforest.state import ChangeSet, UserState
from memforest.timing import Clock
from memforest.types import Cell, Session


@dataclass
class IngestReport:
    user: str
    sessions: int = 0
    turns: int = 0  # turns with something readable, held by cells
    turns_dropped: int = 0  # turns with nothing readable, kept blank in their place in no cell
    cells: int = 0
    candidates: int = 0
    new_facts: int = 0
    merged: int = 0
    dedup_checks: int = 0
    failed_cells: list[str] = field(default_factory=list)
    trees_touched: int = 0
    nodes_refreshed: int = 0
    summaries: int = 0
    degraded: int = 0
    version: int = 0
    llm_calls: int = 0
    timings: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def ingest_sessions(
    state: UserState,
    sessions: list[Session],
    cfg: MemForestConfig,
    scheduler: Scheduler | None,
    embedder: Embedder,
    changes: ChangeSet,
) -> IngestReport:
    """Apply `sessions` to `state` (a private copy); record changes in `changes`.

    `scheduler=None` is the generator-free write path: session trees over raw cells with
    extractive summaries, no facts."""
    report = IngestReport(state.user, sessions=len(sessions))
    clock = Clock(report.timings)
    for s in sessions:
        if s.session_id in state.sessions:
            raise InputError(f"session {s.session_id!r} is already stored for user {state.user!r}")
    cells = []
    for s in sessions:
        state.add_session(s)
        session_cells = chunk_session(s, cfg.chunk)
        state.session_cells[s.session_id] = [c.id for c in session_cells]
        state.cells.update((c.id, c) for c in session_cells)
        changes.sessions.add(s.session_id)
        cells.extend(session_cells)
        blank = sum(not t.content for t in s.turns)
        report.turns += len(s.turns) - blank
        report.turns_dropped += blank
    report.cells = len(cells)
    router = Router(state, cfg, changes)
    for s in sessions:
        router.add_session_tree(s.session_id)
    clock.lap("chunk")
    tags = {"op": "ingest", "user": state.user}
    if scheduler is not None:
        _write_facts(state, cells, cfg, scheduler, embedder, changes, router, report, tags, clock)
    touched = set(changes.trees)
    stats = refresh(state, touched, scheduler, embedder, cfg.tree, changes, cfg.degraded_ok, tags)
    clock.lap("refresh")
    report.trees_touched = len(touched)
    report.nodes_refreshed = stats.leaves + sum(stats.per_level.values())
    report.summaries = stats.summaries
    report.degraded = stats.degraded
    return report


def refresh_pending(
    state: UserState, cfg: MemForestConfig, scheduler: Scheduler, embedder: Embedder, changes: ChangeSet,
) -> IngestReport:
    """Retry extraction of cells that failed in degraded mode, then refresh degraded summaries."""
    report = IngestReport(state.user)
    clock = Clock(report.timings)
    cells = [state.cells[c] for c in sorted(state.pending_cells) if c in state.cells]
    state.pending_cells.clear()
    changes.pending_cells = True
    tags = {"op": "refresh", "user": state.user}
    router = Router(state, cfg, changes)
    if cells:
        _write_facts(state, cells, cfg, scheduler, embedder, changes, router, report, tags, clock)
    for (tid, nid), data in list(state.nodes.items()):
        if data.mode == "degraded" and tid in state.trees:
            tree = state.trees[tid].tree
            tree.dirty.update([nid, *tree.ancestors(nid)])
            changes.trees.add(tid)
    touched = set(changes.trees)
    stats = refresh(state, touched, scheduler, embedder, cfg.tree, changes, cfg.degraded_ok, tags)
    clock.lap("refresh")
    report.cells, report.trees_touched = len(cells), len(touched)
    report.nodes_refreshed = stats.leaves + sum(stats.per_level.values())
    report.summaries, report.degraded = stats.summaries, stats.degraded
    return report


def _write_facts(
    state: UserState, cells: list[Cell], cfg: MemForestConfig, scheduler: Scheduler, embedder: Embedder,
    changes: ChangeSet, router: Router, report: IngestReport, tags: dict[str, Any], clock: Clock,
) -> None:
    candidates, failed = extract(cells, scheduler, cfg.extraction, cfg.degraded_ok, tags)
    report.candidates, report.failed_cells = len(candidates), failed
    if failed:
        state.pending_cells.update(failed)
        changes.pending_cells = True
    clock.lap("extract")
    vecs = (embedder.embed([c.text for c in candidates]) if candidates
            else np.zeros((0, embedder.dim), np.float32))
    clock.lap("embed")
    result = canonicalize(candidates, state.facts, state.norms, state.similar_facts, vecs, scheduler,
                          cfg.canon, tags, writable=state.writable_fact)
    if result.new_facts:
        state.add_facts(result.new_facts, np.stack([result.new_embeddings[f.id] for f in result.new_facts]))
    changes.facts |= {f.id for f in result.new_facts} | {f.id for f in result.updated_facts}
    report.new_facts, report.merged, report.dedup_checks = (len(result.new_facts), result.merged,
                                                            result.llm_checks)
    clock.lap("canonicalize")
    router.route_facts(result.new_facts,
                       [(f, result.sessions_gained.get(f.id, set())) for f in result.updated_facts])
    clock.lap("route")
