"""Canonicalisation: exact match on normalised text, then embedding candidates checked by the LLM.

Merged facts keep every occurrence; a non-equivalent update stays a separate fact, so a newer state
never overwrites older evidence."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memforest.config import CanonConfig
from memforest.errors import ModelError, ModelUnavailableError
from memforest.facts.extraction import Candidate
from memforest.llm.base import ChatRequest
from memforest.llm.scheduler import Scheduler, parse_json
from memforest.prompts import equivalence as prompt
from memforest.prompts import token_bound
from memforest.types import Fact

_NON_WORD = re.compile(r"[^0-9a-z]+")
BLOCK_CELLS = 1 << 22  # similarities computed at once while looking for candidates (16 MiB of float32)


def normalize_text(text: str) -> str:
    return _NON_WORD.sub(" ", text.lower()).strip()


def fact_id(norm: str) -> str:
    """Deterministic: the same canonical text always gets the same id within a user."""
    return "f_" + hashlib.sha1(norm.encode()).hexdigest()[:16]


@dataclass
class CanonResult:
    new_facts: list[Fact] = field(default_factory=list)
    updated_facts: list[Fact] = field(default_factory=list)  # existing facts with new occurrences
    before: dict[str, Fact] = field(default_factory=dict)  # each updated fact as it was before
    sessions_gained: dict[str, set[str]] = field(default_factory=dict)  # of each updated fact, new to it
    new_embeddings: dict[str, np.ndarray] = field(default_factory=dict)
    resolved_ids: list[str] = field(default_factory=list)  # the canonical fact of each candidate
    llm_checks: int = 0
    merged: int = 0


Neighbours = Callable[[np.ndarray, float], list[list[tuple[float, str]]]]


def matrix_neighbours(ids: list[str], matrix: np.ndarray) -> Neighbours:
    """Existing facts at or above a cosine for each row of a query matrix, by a scan of `matrix`."""
    def search(queries: np.ndarray, floor: float) -> list[list[tuple[float, str]]]:
        sims = queries @ matrix.T if len(ids) else np.zeros((len(queries), 0), np.float32)
        return [[(float(row[j]), ids[j]) for j in np.flatnonzero(row >= floor)] for row in sims]
    return search


def canonicalize(
    candidates: list[Candidate],
    existing: MutableMapping[str, Fact],
    by_norm: Mapping[str, str],
    neighbours: Neighbours,
    embeddings: np.ndarray,
    scheduler: Scheduler,
    cfg: CanonConfig,
    tags: dict[str, Any],
    within_batch: bool = True,
    writable: Callable[[str], Fact] | None = None,
) -> CanonResult:
    """Canonical facts for `candidates` (whose embeddings are `embeddings`, row-aligned) against
    `existing` facts (`by_norm`: normalised text -> id; `neighbours` finds similar existing facts).
    An existing fact that gains an occurrence is first replaced by `writable(id)` (a private copy).
    `within_batch=False` skips comparing candidates with each other (they are already canonical, as
    when merging forests)."""
    target: list[str | None] = [None] * len(candidates)  # fact id each candidate resolves to
    pending: list[int] = []
    first_new: dict[str, int] = {}
    for i, cand in enumerate(candidates):
        norm = normalize_text(cand.text)
        if norm in by_norm:
            target[i] = by_norm[norm]
        elif norm in first_new and within_batch:
            target[i] = f"#{first_new[norm]}"
        else:
            first_new[norm] = i
            pending.append(i)

    checks = _pairs_to_check(pending, neighbours, embeddings, cfg, within_batch)
    requests = [_request(_text(ref, existing, candidates), candidates[i].text) for i, ref in checks]
    results = scheduler.run(requests, level=0, tags=tags) if requests else []
    same: dict[int, list[str]] = {}
    for (i, other), res in zip(checks, results):
        if isinstance(res, ModelUnavailableError):  # no verdict will come: the write fails whole
            raise res
        if not isinstance(res, ModelError) and _is_same(res):
            same.setdefault(i, []).append(other)

    out = CanonResult(llm_checks=len(checks))
    resolved: dict[int, Fact] = {}
    for i, cand in enumerate(candidates):
        ref = target[i]
        if ref is None and i in same:
            ref = same[i][0]
        fact = _resolve(ref, existing, resolved)
        if fact is None:
            fact = _new_fact(cand)
            resolved[i] = fact
            out.new_facts.append(fact)
            out.new_embeddings[fact.id] = embeddings[i]
            out.resolved_ids.append(fact.id)
            continue
        if fact.id in existing and fact.id not in out.before:
            out.before[fact.id] = fact
            fact = writable(fact.id) if writable is not None else fact
        out.resolved_ids.append(fact.id)
        resolved[i] = fact
        before, sid = out.before.get(fact.id), cand.occurrence.session_id
        # (asked before the append: without `writable`, `before` is the fact itself; a fact said in
        # thousands of sessions answers by a probe, not by reading them: `Fact.said_in`)
        if before is not None and sid not in out.sessions_gained.get(fact.id, ()) and not before.said_in(sid):
            out.sessions_gained.setdefault(fact.id, set()).add(sid)
        fact.add_occurrence(cand.occurrence)
        out.merged += 1
        if fact.id in existing and all(f.id != fact.id for f in out.updated_facts):
            out.updated_facts.append(fact)
    return out


def _pairs_to_check(
    pending: list[int],
    neighbours: Neighbours,
    embeddings: np.ndarray,
    cfg: CanonConfig,
    within_batch: bool,
    block_cells: int = BLOCK_CELLS,
) -> list[tuple[int, str]]:
    """(candidate index, reference) pairs; a reference is an existing fact id or `#j` for an
    earlier candidate of the same batch. Top `candidates` above `min_cosine`, at most `max_llm_checks`.

    Similarities are computed a block of rows at a time, at most `block_cells` entries at once, so
    memory stays bounded however many candidates one write brings (never an N x N matrix)."""
    pairs: list[tuple[int, str]] = []
    if not pending:
        return pairs
    sub = embeddings[pending]
    rows = max(1, block_cells // max(len(pending) if within_batch else 1, 1))
    for lo in range(0, len(pending), rows):
        hi = min(lo + rows, len(pending))
        block = sub[lo:hi]
        near = neighbours(block, cfg.min_cosine)
        sims_new = block @ sub[:hi].T if within_batch else np.zeros((hi - lo, 0), np.float32)
        for r in range(hi - lo):
            row = lo + r
            scored = list(near[r])
            if within_batch:
                hits = np.flatnonzero(sims_new[r, :row] >= cfg.min_cosine)
                scored += [(float(sims_new[r, c]), f"#{pending[c]}") for c in hits]
            scored.sort(key=lambda x: -x[0])
            pairs.extend((pending[row], ref) for _, ref in scored[: cfg.candidates][: cfg.max_llm_checks])
    return pairs


def _text(ref: str, existing: Mapping[str, Fact], candidates: list[Candidate]) -> str:
    return candidates[int(ref[1:])].text if ref.startswith("#") else existing[ref].text


def _request(existing_text: str, new_text: str) -> ChatRequest:
    return ChatRequest(
        prompt.messages(existing_text, new_text),
        stage="dedup",
        prompt_id=prompt.SPEC.id,
        prompt_version=prompt.SPEC.version,
        json_schema=prompt.SCHEMA,
        max_tokens=token_bound(prompt.SCHEMA),
    )


def _is_same(response: Any) -> bool:
    payload = parse_json(response)
    return isinstance(payload, dict) and payload.get("same") is True


def _resolve(ref: str | None, existing: Mapping[str, Fact], resolved: dict[int, Fact]) -> Fact | None:
    if ref is None:
        return None
    if ref.startswith("#"):
        return resolved[int(ref[1:])]
    return existing.get(ref)


def _new_fact(c: Candidate) -> Fact:
    norm = normalize_text(c.text)
    return Fact(
        id=fact_id(norm), text=c.text, norm=norm, origin=c.origin, role=c.role,
        participants=c.participants, entities=c.entities, topics=c.topics, time_text=c.time_text,
        event_start=c.event_start, event_end=c.event_end, attribute=c.attribute, domain=c.domain,
        collection=c.collection, occurrences=[c.occurrence],
    )
