"""Interval summary of a MemTree node from its children, in time order."""

from __future__ import annotations

from typing import Any

from memforest.prompts import PromptSpec

SPEC = PromptSpec("interval_summary", 2)

SYSTEM = """You summarise a time-ordered list of memory entries about one topic into one paragraph of at
most {words} words. Keep every number, date and name. Stay chronological. When a state changes, write it
as "X -> Y" (for example "lived in Boston -> Davis"). End with the latest state. Use only the entries. \
Answer in JSON, as a list of sentences."""


SENTENCE_CHARS = 200


def schema(words: int) -> dict[str, Any]:
    """Bounded sentences (about 25 words each), so that grammar-constrained decoders stay small."""
    return {
        "type": "object",
        "properties": {
            "sentences": {
                "type": "array",
                "items": {"type": "string", "maxLength": SENTENCE_CHARS},
                "maxItems": max(2, words // 25),
            }
        },
        "required": ["sentences"],
    }


def messages(label: str, entries: list[str], words: int) -> tuple[dict[str, str], ...]:
    listing = "\n".join(f"- {e}" for e in entries)
    user = f"Topic: {label}\nEntries, oldest first:\n{listing}\n\nReturn the summary as JSON."
    return (
        {"role": "system", "content": SYSTEM.format(words=words)},
        {"role": "user", "content": user},
    )
