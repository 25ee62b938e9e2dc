"""Prompts, each beside its response schema, with an id and version written into every call record."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

CHARS_PER_TOKEN = 2.0  # pessimistic: degenerate outputs tokenise worse than prose


@dataclass(frozen=True)
class PromptSpec:
    id: str
    version: int


def token_bound(schema: dict[str, Any]) -> int:
    """An upper estimate of the tokens a response under a bounded JSON schema can take, so that a
    request's max_tokens lies above the schema's worst case (a truncated answer is a failure)."""
    kind = schema.get("type")
    if "enum" in schema:
        return 2 + int(max(len(str(v)) for v in schema["enum"]) / CHARS_PER_TOKEN) + 1
    if kind == "string":
        if "maxLength" not in schema:
            raise ValueError("unbounded string in a response schema")
        return 2 + int(schema["maxLength"] / CHARS_PER_TOKEN) + 1
    if kind == "array":
        if "maxItems" not in schema:
            raise ValueError("unbounded array in a response schema")
        return 2 + schema["maxItems"] * (1 + token_bound(schema["items"]))
    if kind == "object":
        props = schema.get("properties", {})
        return 2 + sum(4 + int(len(k) / CHARS_PER_TOKEN) + token_bound(v) for k, v in props.items())
    if kind in ("integer", "number"):
        return 12
    if kind == "boolean":
        return 2
    raise ValueError(f"cannot bound schema type {kind!r}")
