"""Fact extraction from one dialogue cell."""

from __future__ import annotations

from typing import Any

from memforest.prompts import PromptSpec
from memforest.types import ORIGINS, SEMANTIC_ROLES

SPEC = PromptSpec("extract_facts", 1)

SYSTEM = """You turn a short piece of dialogue into memory facts.
Write each fact as one self-contained sentence in the third person ("The user ...", "The assistant ..."),
keeping every name, number, amount and date. Record only what the dialogue states; if nothing is worth
remembering, return an empty list.
For each fact give: origin (who stated it: user, assistant, mixed or unknown); role (event, state,
preference, constraint, plan, detail or reference); participants; entities (people, places,
organisations, objects, named things); 2 to 5 short topics; time_text (the time expression used, or "");
event_start and event_end as ISO dates YYYY-MM-DD resolved against the dialogue date (a relative
expression such as "last week" counts back from the dialogue date), or "" when no time is stated;
attribute (what property of the subject the fact sets, e.g. residence, job, diet), domain (a broad area,
e.g. home, work, health, travel, food, hobby) and collection (a set the fact belongs to, e.g. trips,
purchases; or "")."""


def schema(max_items: int, max_fact_chars: int) -> dict[str, Any]:
    def text(n: int) -> dict[str, Any]:
        return {"type": "string", "maxLength": n}

    def texts(items: int, n: int) -> dict[str, Any]:
        return {"type": "array", "items": text(n), "maxItems": items}

    item = {
        "type": "object",
        "properties": {
            "text": text(max_fact_chars),
            "origin": {"type": "string", "enum": list(ORIGINS)},
            "role": {"type": "string", "enum": list(SEMANTIC_ROLES)},
            "participants": texts(3, 40),
            "entities": texts(4, 40),
            "topics": texts(5, 30),
            "time_text": text(40),
            "event_start": text(10),
            "event_end": text(10),
            "attribute": text(30),
            "domain": text(20),
            "collection": text(30),
        },
        "required": [
            "text", "origin", "role", "participants", "entities", "topics",
            "time_text", "event_start", "event_end", "attribute", "domain", "collection",
        ],
    }
    return {
        "type": "object",
        "properties": {"facts": {"type": "array", "items": item, "maxItems": max_items}},
        "required": ["facts"],
    }


def messages(cell_text: str, cell_date: str) -> tuple[dict[str, str], ...]:
    user = f"Dialogue date: {cell_date}\n\nDialogue:\n{cell_text}\n\nReturn the facts as JSON."
    return ({"role": "system", "content": SYSTEM}, {"role": "user", "content": user})
