"""The query path: recall trees, browse them, assemble evidence, answer."""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

import numpy as np

from memforest.config import LLM_QUERY_MODES, QueryConfig
from memforest.errors import ModelError
from memforest.llm.base import ChatRequest, Embedder
from memforest.llm.calllog import CallLog, summarize
from memforest.llm.scheduler import Scheduler
from memforest.prompts import answer as answer_prompt
from memforest.retrieval.assemble import assemble, render, temporal_neighbours, to_evidence
from memforest.retrieval.browse import Hit, embed_browse, llm_browse
from memforest.retrieval.hybrid import (
    Dense,
    Sentences,
    candidate_items,
    lexical_scores,
    rank_units,
)
from memforest.retrieval.modes import flat_evidence, planned_embed_browse, root_evidence
from memforest.retrieval.planner import Plan, plan_query, question_direction
from memforest.retrieval.recall import recall_trees
from memforest.retrieval.results import Evidence, QueryResult
from memforest.retrieval.temporal import TimeWindow, question_window
from memforest.timeutil import iso_date, parse_time
from memforest.versions.snapshot import Snapshot


def retrieve(
    snap: Snapshot,
    question: str,
    date: str,
    cfg: QueryConfig,
    embedder: Embedder,
    scheduler: Scheduler | None,
    tags: dict[str, Any],
    leaf_words: int,
    stored_sentences: bool = True,
) -> tuple[list[Evidence], dict[str, Any], list[Evidence]]:
    """Evidence for `question`, the trace of how it was found, and the ranked units past the served
    evidence (`QueryConfig.rank_sessions`; only the hybrid ranking goes on past the budget).
    `leaf_words` is how much of a cell its leaf vector reads (`TreeConfig.leaf_words`);
    `stored_sentences=False` embeds every long cell's sentences here, ignoring those stored with it
    (the same ranking, slower: for comparisons)."""
    sentences = Sentences(embedder, leaf_words, stored_sentences)
    lat: dict[str, float] = {}
    t = time.perf_counter()
    qvec = embedder.embed([question], "query")[0]
    lat["embed"] = _lap(t)
    t = time.perf_counter()
    if cfg.mode == "flat":  # no trees: the top-k facts (or cells)
        evidence, flat = flat_evidence(snap, qvec, cfg.final_units, cfg.flat_units)
        lat["recall"] = _lap(t)
        return (evidence,
                {"mode": cfg.mode, "version": snap.version, "recalled": [], "flat": flat, "latency": lat},
                [])
    hybrid = cfg.mode == "embed" and not cfg.complete_expansion  # ranks dense and lexical candidates
    facts = snap.index.facts.search_meta(qvec, max(cfg.fact_recall, cfg.candidates if hybrid else 0))
    recalled = recall_trees(snap, qvec, cfg, facts[:2])
    lat["recall"] = _lap(t)
    trace: dict[str, Any] = {"mode": cfg.mode, "version": snap.version,
                             "recalled": [asdict(r) for r in recalled]}
    if not recalled:
        trace["latency"] = lat
        return [], trace, []
    if cfg.mode == "root":  # the recalled trees' root summaries, no descent
        trace["latency"] = lat
        return root_evidence(snap, recalled, cfg.final_units), trace, []
    t = time.perf_counter()
    if cfg.mode in LLM_QUERY_MODES and scheduler is None:
        raise ModelError(f"{cfg.mode} mode needs a chat model")
    if cfg.mode in ("planner", "embed_planner", "llm"):
        assert scheduler is not None
        if cfg.mode == "llm":  # LLM browse with the question itself for every recalled tree
            plan = Plan(direction=question_direction(question),
                        queries=[(r.tree_id, question) for r in recalled])
        else:
            plan = plan_query(snap, question, date, recalled, scheduler, tags)
            lat["plan"] = _lap(t)
            t = time.perf_counter()
        expand = cfg.complete_expansion or plan.kind == "aggregate"
        stop = 1 if expand else 0
        if cfg.mode == "embed_planner":
            hits, path = planned_embed_browse(snap, plan, embedder, cfg, stop)
        else:
            hits, path = _planned_browse(snap, plan, qvec, embedder, scheduler, cfg, tags, stop)
        trace["plan"] = asdict(plan)
        if not expand:  # the leaves reached, ranked like embedding mode's candidates
            hits = _rerank(snap, question, date, qvec, hits, cfg, sentences)
    else:
        plan = Plan(direction=question_direction(question))
        expand = cfg.complete_expansion
        if expand:
            hits, path = embed_browse(snap, qvec, [r.tree_id for r in recalled], cfg.beam, stop_level=1)
        else:
            dense: dict[str, Dense] = {}
            items, lexical = candidate_items(snap, question, qvec, cfg.candidates, facts, dense)
            window = _window(question, date, cfg)
            hits = rank_units(snap, items, qvec, lexical, window, cfg, cfg.final_units, dense=dense,
                              rank_sessions=cfg.rank_sessions, sentences=sentences)
            path = [{"candidates": len(items), "lexical_matches": len(lexical),
                     "date_window": _window_trace(window),
                     "kept": [[*h.key, round(h.score, 4)] for h in hits[: cfg.final_units]]}]
    beyond: list[Hit] = []
    if not expand:  # the hybrid ranking past the budget, when asked for
        hits, beyond = hits[: cfg.final_units], hits[cfg.final_units:]
    lat["browse"] = _lap(t)
    t = time.perf_counter()
    budget = cfg.final_units
    if expand:  # the budget counts native tree units; each returns every leaf below it
        units = sorted(hits, key=lambda h: (-h.score, h.key))[: cfg.final_units]
        trace["units"] = [[*h.key, h.level] for h in units]
        hits = _expand(snap, units, qvec)
        budget = len(hits)
    neighbours = temporal_neighbours(snap, hits, plan.direction, qvec)
    evidence = assemble(snap, hits, neighbours, budget + len(neighbours) * expand, plan.direction)
    trace["expanded"] = expand
    lat["assemble"] = _lap(t)
    trace["browse"] = path
    trace["temporal"] = [{"tree_id": a.key[0], "from_leaf": a.key[1], "to_leaf": k[1],
                          "direction": plan.direction}
                         for a, k in neighbours]
    trace["latency"] = lat
    served = {(e.kind, e.id) for e in evidence}
    ranked = [to_evidence(snap, h.key, h.score, "ranking") for h in beyond]
    return evidence, trace, [e for e in ranked if (e.kind, e.id) not in served]


def _planned_browse(
    snap: Snapshot, plan: Plan, qvec: np.ndarray, embedder: Embedder, scheduler: Scheduler, cfg: QueryConfig,
    tags: dict[str, Any], stop_level: int,
) -> tuple[list[Hit], list[dict[str, Any]]]:
    """LLM-guided browse of every planned (tree, sub-query); units are scored by their best similarity
    to the question or to their sub-query."""
    queries = sorted({q for _, q in plan.queries})
    vecs = embedder.embed(queries, "query") if queries else np.zeros((0, len(qvec)), np.float32)
    qvec_of = dict(zip(queries, vecs))
    hits, path = llm_browse(snap, plan.queries, qvec_of, scheduler, cfg.beam, tags, stop_level)
    return ([Hit(h.key, max(h.score, float(snap.state.nodes[h.key].embedding @ qvec)), h.level)
             for h in hits], path)


def _rerank(snap: Snapshot, question: str, date: str, qvec: np.ndarray, hits: list[Hit], cfg: QueryConfig,
            sentences: Sentences) -> list[Hit]:
    """Planner-reached leaves scored by the hybrid ranking, each keeping at least its browse score."""
    floor: dict[str, float] = {}
    for h in hits:
        item = snap.state.trees[h.key[0]].tree.nodes[h.key[1]].item
        if item is not None:
            floor[item] = max(floor.get(item, -1.0), h.score)
    return rank_units(snap, list(floor), qvec, lexical_scores(snap, question), _window(question, date, cfg),
                      cfg, cfg.final_units, floor, rank_sessions=cfg.rank_sessions, sentences=sentences)


def _window(question: str, date: str, cfg: QueryConfig) -> TimeWindow | None:
    """The window of days the question's date phrase names, against the query's reference date."""
    return question_window(question, parse_time(date), cfg.date_lag_days, cfg.relative_date_confidence)


def _window_trace(window: TimeWindow | None) -> dict[str, Any] | None:
    """The date window a question named, for the trace: its phrase, first and last day, confidence."""
    if window is None:
        return None
    return {"phrase": window.phrase, "from": iso_date(window.start), "to": iso_date(window.end),
            "confidence": window.confidence}


def _expand(snap: Snapshot, hits: list[Hit], qvec: np.ndarray) -> list[Hit]:
    """Every leaf under each selected unit, scored by the unit's score then the leaf's own."""
    out: list[Hit] = []
    for h in hits:
        if h.level == 0:
            out.append(h)
            continue
        tree = snap.state.trees[h.key[0]].tree
        for leaf in tree.leaves_under(h.key[1]):
            key = (h.key[0], leaf.id)
            out.append(Hit(key, h.score + 1e-3 * float(snap.state.nodes[key].embedding @ qvec), 0))
    return out


def answer(
    question: str, date: str, evidence: list[Evidence], scheduler: Scheduler, max_tokens: int,
    tags: dict[str, Any],
) -> str:
    req = ChatRequest(answer_prompt.messages(question, date, render(evidence) or "(no evidence)"), "answer",
                      answer_prompt.SPEC.id, answer_prompt.SPEC.version, None, max_tokens)
    return scheduler.run_strict([req], tags=tags)[0].text.strip()


def run_query(
    snap: Snapshot, question: str, date: str, cfg: QueryConfig, embedder: Embedder,
    scheduler: Scheduler | None, log: CallLog, with_answer: bool, tags: dict[str, Any], leaf_words: int,
) -> QueryResult:
    first = len(log)
    evidence, trace, beyond = retrieve(snap, question, date, cfg, embedder, scheduler, tags, leaf_words)
    text = None
    if with_answer:
        if scheduler is None:
            raise ModelError("answering needs a chat model")
        t = time.perf_counter()
        text = answer(question, date, evidence, scheduler, cfg.answer_max_tokens, tags)
        trace["latency"]["answer"] = _lap(t)
    calls = [r for r in log.since(first) if r.tags.get("query") == tags.get("query")]
    trace["llm_calls"] = summarize(calls)
    return QueryResult(question, text, evidence, trace, beyond)


def _lap(t: float) -> float:
    return round(time.perf_counter() - t, 6)
