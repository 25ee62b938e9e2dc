"""Reply shapes of schema-less JSON requests: what a library's own prompt asks the model to return, for
the content source of a simulated backbone only.

Some libraries ask for `response_format: {"type": "json_object"}` with no schema and describe the reply
they parse in the prompt (Mem0: a list of facts, then a list of memory actions). A served target model
follows that description; the simulated backbone's content source (a small CPU model) decoding a free
JSON object writes whatever object it likes until its token budget, which the library cannot parse, so
the library's write path stops after its first call. The source is therefore given, for each request
this table recognises, the JSON schema of the reply the prompt describes; the source bounds
(`output_caps.SourceBounds`) then hold its arrays and strings as they hold any request's schema. A
served backbone (vLLM) never sees this table: requests reach it as sent.

A shape is recognised by a distinctive phrase of the library's prompt (case-insensitive) in the first
message of a request whose schema is a free object (`{"type": "object"}`: a `json_object` request with
no schema of its own). A free JSON request that no shape recognises is decoded as before and counted as
`unknown`. Each shape names the library version and prompt it was read from, and what the call does in
the library's write path (`role`: `extract` or `update`), so that the write-path table can count a
library's update calls. Schemas keep the prompt's field names and value sets; ids, which the libraries
number 0, 1, ... in the prompt, are held to 8 characters. Where the prompt ties a value to what it
shows, the schema follows the request (`ReplyShape.schema_for`): Mem0's update prompt says to "use
existing ID for updates/deletes, or new ID for additions" and "if the current memory is empty, then you
have to add the new retrieved facts", so an action on an id the prompt lists is UPDATE, DELETE or NONE,
an action on any other id is ADD, and a request around an empty memory allows ADD alone."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from memforest.llm.base import ChatRequest

FREE_OBJECT: dict[str, Any] = {"type": "object"}
UNKNOWN = "unknown"  # a free JSON request that no shape recognises
ROLES = ("extract", "update")


@dataclass(frozen=True)
class ReplyShape:
    """The reply a library's prompt asks for: `name` (as calls record it), `library` and `prompt` (where
    the phrase and the shape were read), `role` in the write path, `phrases` (any one recognises the
    request) and the reply's JSON `schema` (arrays and strings unbounded unless the prompt bounds them);
    `follows`, where given, narrows the schema to what one request's prompt shows (`schema_for`)."""

    name: str
    library: str
    prompt: str
    role: str
    phrases: tuple[str, ...]
    schema: dict[str, Any]
    follows: Callable[[str], dict[str, Any]] | None = None

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"reply shape {self.name}: role {self.role!r} is not one of {ROLES}")

    def matches(self, text: str) -> bool:
        folded = text.casefold()
        return any(phrase.casefold() in folded for phrase in self.phrases)

    def schema_for(self, text: str) -> dict[str, Any]:
        """The reply schema for a request whose first message is `text`."""
        return self.follows(text) if self.follows is not None else self.schema

    def describe(self) -> dict[str, Any]:
        """What run.json records of the shape."""
        return {"library": self.library, "prompt": self.prompt, "role": self.role,
                "phrases": list(self.phrases), "follows_request": self.follows is not None}


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required}


def _list(items: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": items}


TEXT: dict[str, Any] = {"type": "string"}
ID: dict[str, Any] = {"type": "string", "maxLength": 8}

MEM0_FACTS = ReplyShape(
    name="mem0.facts", library="mem0ai 1.0.11 (also 2.x)",
    prompt="mem0/configs/prompts.py FACT_RETRIEVAL_PROMPT, USER_ and AGENT_MEMORY_EXTRACTION_PROMPT; "
           "mem0/memory/utils.py ensure_json_instruction (custom prompts); parsed as reply['facts']",
    role="extract",
    phrases=('in json with a key as "facts"', "with a 'facts' key containing an array of strings"),
    schema=_object({"facts": _list(TEXT)}, ["facts"]))

EVENTS = ("ADD", "UPDATE", "DELETE", "NONE")
_ON_SHOWN = ("UPDATE", "DELETE", "NONE")  # what may happen to a memory the prompt lists


def _action(id_schema: dict[str, Any], events: tuple[str, ...]) -> dict[str, Any]:
    return _object({"id": id_schema, "text": TEXT, "event": {"type": "string", "enum": list(events)},
                    "old_memory": TEXT}, ["id", "text", "event"])


def _update_schema(actions: dict[str, Any]) -> dict[str, Any]:
    return _object({"memory": _list(actions)}, ["memory"])


_MEMORY_SHOWN = re.compile(r"current content of my memory(.*?)the new retrieved facts", re.S | re.I)
_SHOWN_ID = re.compile(r"""["']id["']\s*:\s*["']([^"']{1,64})["']""")


def _mem0_update_for(text: str) -> dict[str, Any]:
    """Mem0's update reply for one request: the memories its prompt lists (as `{'id': '0', 'text': ...}`,
    the ids Mem0 numbers) may be updated, deleted or left; any other id is an addition; an empty memory
    (the prompt's "Current memory is empty.") leaves additions alone."""
    shown = _MEMORY_SHOWN.search(text)
    ids = sorted(set(_SHOWN_ID.findall(shown.group(1)))) if shown else []
    added = _action(ID, ("ADD",))
    if not ids:
        return _update_schema(added)
    kept = _action({"type": "string", "enum": ids}, _ON_SHOWN)
    return _update_schema({"anyOf": [kept, added]})


MEM0_UPDATE = ReplyShape(
    name="mem0.update", library="mem0ai 1.0.11",
    prompt="mem0/configs/prompts.py get_update_memory_messages (around DEFAULT_UPDATE_MEMORY_PROMPT or a "
           "custom update prompt); parsed as reply['memory'], each with id, text, event, old_memory",
    role="update",
    phrases=("determine whether these facts should be added, updated, or deleted in the memory",),
    schema=_update_schema(_action(ID, EVENTS)), follows=_mem0_update_for)

MEM0_ADDITIVE = ReplyShape(
    name="mem0.additive", library="mem0ai 2.2.1",
    prompt="mem0/configs/prompts.py ADDITIVE_EXTRACTION_PROMPT (its OUTPUT FORMAT); parsed as "
           "reply['memory'], each with id, text, attributed_to, linked_memory_ids",
    role="extract",
    phrases=("your sole operation is add",),
    schema=_object({"memory": _list(_object(
        {"id": ID, "text": TEXT, "attributed_to": {"type": "string", "enum": ["user", "assistant"]},
         "linked_memory_ids": _list(ID)}, ["id", "text", "attributed_to"]))}, ["memory"]))

SHAPES: tuple[ReplyShape, ...] = (MEM0_FACTS, MEM0_UPDATE, MEM0_ADDITIVE)
BY_NAME = {shape.name: shape for shape in SHAPES}


def is_free_json(request: ChatRequest) -> bool:
    """Whether `request` asks for a JSON object with no schema of its own."""
    return request.json_schema == FREE_OBJECT


def reply_shape(request: ChatRequest) -> ReplyShape | None:
    """The known shape of a free JSON request's reply (None: not a free JSON request, or no shape known)."""
    if not is_free_json(request) or not request.messages:
        return None
    first = request.messages[0].get("content") or ""
    return next((shape for shape in SHAPES if shape.matches(first)), None)


def shape_label(request: ChatRequest) -> str | None:
    """What a call records as its `shape`: the known shape's name, `unknown` for a free JSON request no
    shape recognises, None for any other request (its own schema, or text)."""
    shape = reply_shape(request)
    if shape is not None:
        return shape.name
    return UNKNOWN if is_free_json(request) else None


def shape_role(name: str | None) -> str | None:
    """The role (`extract`, `update`) of the known reply shape `name`, as served_calls.jsonl records it
    beside the shape, so that the analysis reads it from the file; None for no shape or an unknown one."""
    shape = BY_NAME.get(name) if name else None
    return shape.role if shape is not None else None


def update_shapes() -> frozenset[str]:
    return frozenset(shape.name for shape in SHAPES if shape.role == "update")
