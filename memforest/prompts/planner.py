"""Query planning: one targeted sub-query per recalled tree."""

from __future__ import annotations

from typing import Any

from memforest.prompts import PromptSpec

SPEC = PromptSpec("query_plan", 1)

SYSTEM = """You plan a search over memory trees for a question. Each tree covers one scope (a session,
a person or thing, or a recurring scene) and shows a summary of its whole time range.
Decide the question kind: "temporal" (about order, dates or durations: give two anchors, the events
whose times matter), "aggregate" (counts or totals across many sessions), or "lookup".
If the question asks what held before or after some event, set direction to "before" or "after".
For each useful tree, write one short search query aimed at what that tree can answer."""


def schema(max_trees: int) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "kind": {"type": "string", "enum": ["temporal", "aggregate", "lookup"]},
            "direction": {"type": "string", "enum": ["before", "after", "none"]},
            "anchors": {"type": "array", "items": {"type": "string", "maxLength": 120}, "maxItems": 2},
            "plans": {
                "type": "array",
                "maxItems": max_trees,
                "items": {
                    "type": "object",
                    "properties": {
                        "tree": {"type": "integer"},
                        "query": {"type": "string", "maxLength": 160},
                    },
                    "required": ["tree", "query"],
                },
            },
        },
        "required": ["kind", "direction", "anchors", "plans"],
    }


def messages(question: str, date: str, cards: list[str]) -> tuple[dict[str, str], ...]:
    listing = "\n".join(f"{i}. {c}" for i, c in enumerate(cards))
    user = f"Question date: {date}\nQuestion: {question}\n\nTrees:\n{listing}\n\nReturn the plan as JSON."
    return ({"role": "system", "content": SYSTEM}, {"role": "user", "content": user})
