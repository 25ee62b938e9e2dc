"""The query planner: one LLM call that writes a sub-query per recalled tree."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from memforest.errors import ModelError, ModelUnavailableError
from memforest.llm.base import ChatRequest
from memforest.llm.scheduler import Scheduler, parse_json
from memforest.prompts import planner as prompt
from memforest.prompts import token_bound
from memforest.retrieval.results import RecalledTree
from memforest.versions.snapshot import Snapshot

CARD_CHARS = 240
_BEFORE = re.compile(r"\b(before|prior to|previously|earlier than|used to)\b", re.I)
_AFTER = re.compile(r"\b(after|following|since|later than|next)\b", re.I)


@dataclass
class Plan:
    kind: str = "lookup"
    direction: str = "none"
    anchors: list[str] = field(default_factory=list)
    queries: list[tuple[str, str]] = field(default_factory=list)  # (tree id, sub-query)
    error: str | None = None


def question_direction(question: str) -> str:
    """`before`, `after` or `none`, from the question's wording (embedding mode has no planner)."""
    if _BEFORE.search(question):
        return "before"
    if _AFTER.search(question):
        return "after"
    return "none"


def tree_card(snap: Snapshot, tree_id: str) -> str:
    info = snap.state.trees[tree_id]
    root = info.tree.root
    summary = snap.state.nodes[(tree_id, root)].text if root is not None else ""
    return f"{tree_id}: {' '.join(summary.split())[:CARD_CHARS]}"


def plan_query(
    snap: Snapshot, question: str, date: str, recalled: list[RecalledTree], scheduler: Scheduler,
    tags: dict[str, Any],
) -> Plan:
    """The model's plan; trees it leaves out are browsed with the question itself; temporal plans
    add one browse per anchor on every recalled tree. On failure: the question for every tree."""
    ids = [r.tree_id for r in recalled]
    schema = prompt.schema(len(ids))
    req = ChatRequest(prompt.messages(question, date, [tree_card(snap, t) for t in ids]), "plan",
                      prompt.SPEC.id, prompt.SPEC.version, schema, max_tokens=token_bound(schema))
    (res,) = scheduler.run([req], level=0, tags=tags)
    if isinstance(res, ModelUnavailableError):  # a plan around a model that is gone would hide it
        raise res
    if isinstance(res, ModelError):
        return Plan(direction=question_direction(question), queries=[(t, question) for t in ids],
                    error=str(res))
    payload = parse_json(res)
    payload = payload if isinstance(payload, dict) else {}
    kind, direction = payload.get("kind"), payload.get("direction")
    plan = Plan(
        kind=kind if isinstance(kind, str) and kind in ("temporal", "aggregate", "lookup") else "lookup",
        direction=direction if isinstance(direction, str) and direction in ("before", "after") else "none",
        anchors=[a for a in payload.get("anchors", []) if isinstance(a, str) and a.strip()][:2],
    )
    planned: dict[str, str] = {}
    for item in payload.get("plans", []) if isinstance(payload.get("plans"), list) else []:
        if isinstance(item, dict) and isinstance(item.get("tree"), int) and 0 <= item["tree"] < len(ids):
            query = str(item.get("query") or "").strip()
            planned.setdefault(ids[item["tree"]], query or question)
    plan.queries = [(t, planned.get(t, question)) for t in ids]
    if plan.kind == "temporal":
        plan.queries += [(t, a) for a in plan.anchors for t in ids]
    return plan
