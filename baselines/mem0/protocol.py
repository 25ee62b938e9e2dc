"""Mem0's evaluation protocol, shared by the 1.x adapter and the 2.x worker (which loads this file by
path in its own environment, so it imports the standard library only).

On a conversation between two named people (LoCoMo), Mem0's evaluation keeps one store per speaker:
in speaker A's store A's messages are the `user` and B's the `assistant`, in B's store the roles are
reversed; a question searches both stores and the answer model reads each speaker's memories under
that speaker's name. Data with a user and an assistant (LongMemEval) has one store, roles as given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

# Our wording of the guideline Mem0's LoCoMo evaluation sets for extraction (name people, not "user").
NAME_PEOPLE = (
    "Guidelines for these memories: the conversation is between two people, named in each message. "
    "Write every memory so that it stands on its own: name the person it is about instead of saying "
    "\"user\" or \"assistant\", and keep the specific details and dates it mentions (the date an "
    "event happened, when it can be worked out). Take memories from the user's messages only."
)


@dataclass(frozen=True)
class Store:
    """One Mem0 store: the `user_id` it is written under and, for a speaker store, whose it is."""

    user_id: str
    speaker: str | None = None

    def role(self, speaker: str | None) -> str:
        """A message's role in this store: the store's own speaker is the user."""
        return "user" if speaker == self.speaker else "assistant"


def speaker_stores(instance: str, speakers: Sequence[str], safe: Callable[[str], str]) -> list[Store]:
    """One store per speaker for a two-person conversation, else one store for the instance."""
    if len(speakers) == 2:
        return [Store(f"{instance}__{safe(s)}", s) for s in speakers]
    return [Store(instance)]


def render_stores(found: Sequence[tuple[Store, Sequence[dict[str, Any]]]],
                  limit: int | None = None) -> tuple[str, list[dict[str, Any]]]:
    """The answer context (each speaker's memories under their name, `[time] memory` lines, as Mem0's
    evaluation shows them) and the evidence ranked by score over all stores. `limit` keeps only the
    best that many memories over all stores (the shared-budget view)."""
    ranked = sorted((item for _, items in found for item in items),
                    key=lambda item: -(item.get("score") or 0.0))
    kept = ranked if limit is None else ranked[:limit]
    chosen = {id(item) for item in kept}
    sections = []
    for store, items in found:
        lines = [_line(item) for item in items if id(item) in chosen]
        if store.speaker is None:
            sections.append("\n".join(lines))
        else:
            sections.append(f"Memories of {store.speaker}:\n" + ("\n".join(lines) or "(none)"))
    return "\n\n".join(s for s in sections if s), kept


def _line(item: dict[str, Any]) -> str:
    text = " ".join(str(item.get("text", "")).split())
    return f"[{item['time']}] {text}" if item.get("time") else text
