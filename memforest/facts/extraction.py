"""Fact extraction: one LLM call per cell, all cells of an ingest scheduled as parallel waves."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from memforest.config import ExtractionConfig
from memforest.errors import ModelError, ModelUnavailableError
from memforest.llm.base import ChatRequest, ChatResponse
from memforest.llm.scheduler import Scheduler, parse_json
from memforest.prompts import extraction as prompt
from memforest.prompts import token_bound
from memforest.timeutil import iso_minute, resolve_event_time
from memforest.types import ORIGINS, SEMANTIC_ROLES, Cell, Occurrence

log = logging.getLogger(__name__)


@dataclass
class Candidate:
    """An extracted fact before canonicalisation, with the occurrence it came from."""

    text: str
    origin: str
    role: str
    participants: list[str]
    entities: list[str]
    topics: list[str]
    time_text: str
    event_start: float | None
    event_end: float | None
    attribute: str
    domain: str
    collection: str
    occurrence: Occurrence


def extraction_request(cell: Cell, cfg: ExtractionConfig) -> ChatRequest:
    schema = prompt.schema(cfg.max_items, cfg.max_fact_chars)
    return ChatRequest(
        prompt.messages(cell.text, iso_minute(cell.time)),
        stage="extract",
        prompt_id=prompt.SPEC.id,
        prompt_version=prompt.SPEC.version,
        json_schema=schema,
        max_tokens=token_bound(schema),
    )


def extract(
    cells: list[Cell], scheduler: Scheduler, cfg: ExtractionConfig, degraded_ok: bool, tags: dict[str, Any]
) -> tuple[list[Candidate], list[str]]:
    """Candidates from every cell, in cell order, and the ids of cells whose extraction failed.
    A failure raises ModelError unless `degraded_ok`, in which case the cell is kept without facts; a
    model that is gone (ModelUnavailableError) always raises."""
    results = scheduler.run([extraction_request(c, cfg) for c in cells], level=0, tags=tags)
    candidates: list[Candidate] = []
    failed: list[str] = []
    for cell, result in zip(cells, results):
        if isinstance(result, ModelUnavailableError):
            raise result
        if isinstance(result, ModelError):
            if not degraded_ok:
                raise ModelError(f"extraction of cell {cell.id} failed: {result}")
            failed.append(cell.id)
            continue
        candidates.extend(parse_items(cell, result))
    return candidates, failed


def parse_items(cell: Cell, response: ChatResponse) -> list[Candidate]:
    payload = parse_json(response)
    items = payload.get("facts", []) if isinstance(payload, dict) else []
    out = []
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        text = " ".join(str(item.get("text", "")).split())
        if not text:
            continue
        time_text = _s(item.get("time_text"))
        start = resolve_event_time(_s(item.get("event_start")), time_text, cell.time)
        end = resolve_event_time(_s(item.get("event_end")), "", cell.time)
        if start is not None and end is not None and end < start:
            end = None
        origin = _s(item.get("origin"))
        role = _s(item.get("role"))
        out.append(
            Candidate(
                text=text,
                origin=origin if origin in ORIGINS else "unknown",
                role=role if role in SEMANTIC_ROLES else "detail",
                participants=_strings(item.get("participants")),
                entities=_strings(item.get("entities")),
                topics=_strings(item.get("topics")),
                time_text=time_text,
                event_start=start,
                event_end=end,
                attribute=_s(item.get("attribute")),
                domain=_s(item.get("domain")).lower(),
                collection=_s(item.get("collection")),
                occurrence=Occurrence(cell.session_id, cell.id, cell.turn_lo, cell.turn_hi, cell.time,
                                      start, end),
            )
        )
    return out


def _s(value: Any) -> str:
    return " ".join(str(value).split()) if value is not None else ""


def _strings(value: Any) -> list[str]:
    if not isinstance(value, list):
        return []
    seen: dict[str, None] = {}
    for v in value:
        s = _s(v)
        if s:
            seen.setdefault(s, None)
    return list(seen)
