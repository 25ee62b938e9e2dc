"""Output budgets of a simulated backbone: how many completion tokens the served model is charged for.

The content source of a simulated server (a small CPU model) writes far longer answers than the target
model would (SmolLM2 fills a JSON schema to its bounds). A cap per prompt kind bounds the completion
tokens: the content source is asked for at most `min(request max_tokens, cap)` tokens (`limit`), so that
no answer costs the CPU more than the target model's budget, and the latency model decodes and the
usage reports at most the cap, so the simulated decode time follows the target model's output length,
not the content source's. An answer stopped at the cap comes back as a vLLM server returns any answer
cut at its max_tokens: the text generated so far, finish_reason "length" (a JSON answer may then be
unterminated; what the client makes of it is the client's own behaviour). Such an answer is `capped`:
the one thing the simulated server does beyond vLLM, recorded per call and counted. A recorded answer
longer than the cap (a replayed log of an uncapped source) is charged at the cap with its text whole.

A request's kind is the id of the MemForest prompt its system message opens with (`extract_facts`,
`interval_summary`, `fact_equivalence`, `browse_select`, `query_plan`, `answer_from_memory`), else
`json` (any other request for a JSON answer: the baselines' extraction and update prompts) or `text`.
A kind without a cap of its own takes the `default` cap; with neither, it is not capped.

Arrays: the content source also repeats a list item until it reaches its token budget (SmolLM2 under a
schema with an unbounded array writes one entity name over and over), where the target model lists
what the text holds; it also writes one word over and over inside a string. With `SourceBounds`, every
array of a request's schema that sets no `maxItems`, and every free-text string that sets no
`maxLength`, is bounded before the content source decodes under it, the bounds lowered until the
schema's worst case fits the answer's token limit (the cap), as MemForest sizes its own schemas: the
answer then ends inside its budget and still fits the request's schema. A bound of the schema's own is
kept: schemas that bound their arrays and strings (MemForest's) are unchanged. A bounded request is
recorded with the bounds used, as a capped one is. A request for a JSON object with no schema has nothing
to bound, unless its prompt asks for a reply shape the server knows (`reply_shapes`: Mem0's), whose
schema is then bounded the same way."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from memforest.llm.base import ChatRequest
from memforest.prompts import CHARS_PER_TOKEN, answer, browse, equivalence, extraction, planner, summary

DEFAULT = "default"
FALLBACK_KINDS = ("json", "text")


def _opening(system: str) -> str:
    """The fixed start of a system prompt: up to its first placeholder or line end, at most 48 chars."""
    return system.split("{", 1)[0].split("\n", 1)[0][:48]


PROMPT_OPENINGS: tuple[tuple[str, str], ...] = tuple(
    (module.SPEC.id, _opening(module.SYSTEM))
    for module in (extraction, summary, equivalence, browse, planner, answer))
KINDS = (*(kind for kind, _ in PROMPT_OPENINGS), *FALLBACK_KINDS)


def request_kind(request: ChatRequest) -> str:
    """The prompt kind of a request, as the caps name it."""
    first = request.messages[0]["content"] if request.messages else ""
    for kind, opening in PROMPT_OPENINGS:
        if first.startswith(opening):
            return kind
    return "json" if request.json_schema is not None else "text"


@dataclass(frozen=True)
class OutputCaps:
    """Completion-token caps by prompt kind (see the module doc); empty = nothing capped."""

    caps: Mapping[str, int]

    def __post_init__(self) -> None:
        for kind, cap in self.caps.items():
            if kind != DEFAULT and kind not in KINDS:
                raise ValueError(f"output cap for unknown prompt kind {kind!r}: kinds are "
                                 f"{', '.join((*KINDS, DEFAULT))}")
            if int(cap) <= 0:
                raise ValueError(f"output cap for {kind!r} must be positive, got {cap}")

    def cap(self, kind: str) -> int | None:
        value = self.caps.get(kind, self.caps.get(DEFAULT))
        return int(value) if value is not None else None

    def limit(self, kind: str, max_tokens: int) -> int:
        """The most completion tokens the content source is asked for: the request's `max_tokens`,
        lowered to the kind's cap."""
        cap = self.cap(kind)
        return max_tokens if cap is None else min(max_tokens, cap)

    def charged(self, kind: str, completion_tokens: int, *, finish_reason: str = "stop",
                max_tokens: int | None = None) -> tuple[int, int | None, bool]:
        """The completion tokens charged for an answer of `completion_tokens`, the cap applied, and
        whether the answer hit it: longer than the cap, or stopped at the cap (finish_reason "length"
        at the cap) where the request itself (`max_tokens`; None: unbounded) allowed more."""
        cap = self.cap(kind)
        if cap is None:
            return completion_tokens, None, False
        stopped = (finish_reason == "length" and completion_tokens >= cap
                   and (max_tokens is None or max_tokens > cap))
        return min(completion_tokens, cap), cap, completion_tokens > cap or stopped


@dataclass(frozen=True)
class SourceBounds:
    """Bounds the content source decodes a request's JSON schema under (see the module doc): at most
    `items` per array and `chars` per string where the schema sets none (None: that kind unbounded),
    lowered until the schema's worst case fits the answer's token limit (`fit`)."""

    items: int | None = None
    chars: int | None = None

    def __post_init__(self) -> None:
        for name in ("items", "chars"):
            value = getattr(self, name)
            if value is not None and int(value) <= 0:
                raise ValueError(f"source bound on {name} must be positive, got {value}")

    def apply(self, schema: Any) -> tuple[Any, bool]:
        """`schema` with every array that sets no `maxItems` held to `items` items (never fewer than its
        own `minItems`) and every free-text string (no maxLength, pattern, format, enum or const) to
        `chars` characters (never fewer than its `minLength`), and whether any was. The input is not
        modified."""
        changed = False

        def walk(node: Any) -> Any:
            nonlocal changed
            if isinstance(node, list):
                return [walk(v) for v in node]
            if not isinstance(node, dict):
                return node
            out = {k: walk(v) for k, v in node.items()}
            kinds = node.get("type")
            kinds = kinds if isinstance(kinds, list) else [kinds]
            if self.items is not None and "array" in kinds and "maxItems" not in node:
                out["maxItems"] = max(int(self.items), int(node.get("minItems") or 0))
                changed = True
            if (self.chars is not None and "string" in kinds
                    and not {"maxLength", "pattern", "format", "enum", "const"} & node.keys()):
                out["maxLength"] = max(int(self.chars), int(node.get("minLength") or 0))
                changed = True
            return out

        return walk(schema), changed

    def fit(self, schema: Any, limit: int) -> tuple[Any, SourceBounds | None]:
        """`schema` bounded (`apply`), with the bounds lowered until its worst case (`worst_tokens`)
        fits `limit` completion tokens, as MemForest sizes its own schemas below their max_tokens:
        strings halved down to 100 characters, then arrays halved down to one item, then strings down
        to 8 characters. The bounds used (None: the schema was left as sent)."""
        bounds = self
        while True:
            bounded, changed = bounds.apply(schema)
            if not changed:
                return schema, None
            worst = worst_tokens(bounded)
            if worst is None or worst <= limit:
                return bounded, bounds
            items, chars = bounds.items, bounds.chars
            if chars is not None and chars > 100:
                bounds = SourceBounds(items, chars // 2)
            elif items is not None and items > 1:
                bounds = SourceBounds(items // 2, chars)
            elif chars is not None and chars > 8:
                bounds = SourceBounds(items, chars // 2)
            else:
                return bounded, bounds


def worst_tokens(schema: Any) -> int | None:
    """An upper estimate of the completion tokens of an answer under `schema` (MemForest's estimate,
    `memforest.prompts.token_bound`, extended to `$ref`, `anyOf`/`oneOf`, `const`, `null` and type
    lists), or None where the schema leaves the answer unbounded (a free object, an unbounded array or
    string)."""
    root = schema

    def text(chars: int) -> int:
        return 2 + int(chars / CHARS_PER_TOKEN) + 1

    def walk(node: Any, depth: int) -> int | None:
        if not isinstance(node, dict) or depth > 32:
            return None
        if "$ref" in node:
            target: Any = root
            for part in str(node["$ref"]).lstrip("#/").split("/"):
                target = target.get(part) if isinstance(target, dict) else None
            return walk(target, depth + 1)
        branches = node.get("anyOf") or node.get("oneOf")
        if branches:
            costs = [walk(b, depth + 1) for b in branches]
            return None if any(c is None for c in costs) else max(c for c in costs if c is not None)
        if "enum" in node:
            return text(max(len(json.dumps(v)) for v in node["enum"]))
        if "const" in node:
            return text(len(json.dumps(node["const"])))
        kinds = node.get("type")
        if isinstance(kinds, list):
            costs = [walk({**node, "type": k}, depth + 1) for k in kinds]
            return None if any(c is None for c in costs) else max(c for c in costs if c is not None)
        if kinds == "string":
            if "maxLength" in node:
                return text(int(node["maxLength"]))
            return text(40) if "format" in node else None  # a date-time, a uuid; a pattern: unbounded
        if kinds == "array":
            item = walk(node.get("items", {}), depth + 1)
            if "maxItems" not in node or item is None:
                return None
            return 2 + int(node["maxItems"]) * (1 + item)
        if kinds == "object":
            props = node.get("properties")
            if not props:
                return None
            costs = [walk(v, depth + 1) for v in props.values()]
            if any(c is None for c in costs):
                return None
            return 2 + sum(4 + int(len(k) / CHARS_PER_TOKEN) + int(c or 0) for k, c in zip(props, costs))
        return {"integer": 12, "number": 12, "boolean": 2, "null": 2}.get(str(kinds))

    return walk(schema, 0)
