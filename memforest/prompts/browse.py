"""LLM-guided browse: choose which visible child units of a tree to open for a query."""

from __future__ import annotations

from typing import Any

from memforest.prompts import PromptSpec

SPEC = PromptSpec("browse_select", 1)

SYSTEM = """You navigate a time-ordered memory tree. Each option is either an interval summary (which can
be opened) or a piece of evidence. Pick the options most likely to contain what answers the query,
best first. Pick at most {beam}."""


def schema(beam: int) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"selected": {"type": "array", "items": {"type": "integer"}, "maxItems": beam}},
        "required": ["selected"],
    }


def messages(query: str, options: list[str], beam: int) -> tuple[dict[str, str], ...]:
    listing = "\n".join(f"{i}. {o}" for i, o in enumerate(options))
    user = f"Query: {query}\n\nOptions:\n{listing}\n\nReturn the selected option numbers as JSON."
    return ({"role": "system", "content": SYSTEM.format(beam=beam)}, {"role": "user", "content": user})
