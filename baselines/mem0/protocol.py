"""Mem0's evaluation protocols, shared by the 1.x adapter and the 2.x worker (which loads this file by
path in its own environment, so it imports the standard library only).

On a conversation between two named people (LoCoMo) Mem0's 1.x evaluation keeps one store per speaker:
in speaker A's store A's messages are the `user` and B's the `assistant`, in B's store the roles are
reversed; a question searches both stores and the answer model reads each speaker's memories under
that speaker's name, speaker A first. Mem0's 2.x evaluation (memory-benchmarks) keeps one store per
conversation, speaker A's messages the `user`. Data with a user and an assistant (LongMemEval) has one
store, roles as given.

Evidence records carry their store's `section` (a per-speaker store's header, None for a lone store)
and their `rank` over all stores; `render_sections` lays out any subset of them as the answer context.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence, Sized
from dataclasses import dataclass, field
from typing import Any

# Our wording of the guideline Mem0's LoCoMo evaluation sets for extraction (name people, not "user").
NAME_PEOPLE = (
    "Guidelines for these memories: the conversation is between two people, named in each message. "
    "Write every memory so that it stands on its own: name the person it is about instead of saying "
    "\"user\" or \"assistant\", and keep the specific details and dates it mentions (the date an "
    "event happened, when it can be worked out). Take memories from the user's messages only."
)
EMPTY, FAILED_ADD = "empty text", "failed add"  # why a turn did not reach a store


@dataclass(frozen=True)
class Store:
    """One Mem0 store: the `user_id` it is written under; `speaker`, whose messages are its `user` (the
    other speaker's its `assistant`; None: the dataset's roles); `section`, the header its memories are
    listed under in the answer context (a per-speaker store; None: listed without one)."""

    user_id: str
    speaker: str | None = None
    section: str | None = None

    def role(self, speaker: str | None) -> str:
        """A message's role in this store: the store's own speaker is the user."""
        return "user" if speaker == self.speaker else "assistant"


def conversation_speakers(declared: Iterable[Sequence[str]], spoken: Iterable[str | None]) -> list[str]:
    """A conversation's named speakers in its own order: the first non-empty list of `declared` (each
    session's speakers, LoCoMo's speaker_a first), else in order of first turn (`spoken`)."""
    for names in declared:
        if names:
            return list(names)
    return list(dict.fromkeys(s for s in spoken if s))


def speaker_stores(instance: str, speakers: Sequence[str], safe: Callable[[str], str],
                   per_speaker: bool = True) -> list[Store]:
    """A two-person conversation (`speakers` in its order): one store per speaker in that order, each
    its own section (`per_speaker`, Mem0's 1.x evaluation), or one store whose user is the first
    speaker (memory-benchmarks); anything else: one store for the instance, roles as given."""
    if len(speakers) == 2 and per_speaker:
        return [Store(f"{instance}__{safe(s)}", s, f"Memories of {s}") for s in speakers]
    if len(speakers) == 2:
        return [Store(instance, speakers[0])]
    return [Store(instance)]


def ranked_hits(found: Sequence[tuple[Store, Sequence[dict[str, Any]]]],
                limit: int | None = None) -> list[dict[str, Any]]:
    """The evidence records of every store, each with its store's `section`, in rank order (by score
    over all stores; ties keep the stores' order) with its `rank`; `limit` keeps only the best that many
    (the shared-budget view)."""
    hits = [{**item, "section": store.section} for store, items in found for item in items]
    hits.sort(key=lambda item: -(item.get("score") or 0.0))
    return [{**item, "rank": i} for i, item in enumerate(hits if limit is None else hits[:limit])]


def render_sections(sections: Sequence[str | None],
                    items: Iterable[tuple[str | None, str | None, str]]) -> str:
    """The answer context of evidence `items` ((section, time, text), in their list order) for stores
    with `sections` (in the conversation's order): each per-speaker store's memories under its header,
    "(none)" when it has none, or the `[time] memory` lines alone for a lone store; as Mem0's evaluation
    shows them."""
    items = list(items)
    parts = []
    for section in sections or [None]:
        lines = "\n".join(_line(time, text) for at, time, text in items if at == section)
        parts.append(lines if section is None else f"{section}:\n{lines or '(none)'}")
    return "\n\n".join(p for p in parts if p)


def _line(time: str | None, text: str) -> str:
    text = " ".join(str(text).split())
    return f"[{time}] {text}" if time else text


def count_all(fetch: Callable[[int], Sized], limit: int = 1024) -> int:
    """How many memories a store holds, read through the library's own listing (`fetch(limit)`: at most
    `limit` of them), asking for more until a listing comes back short."""
    while True:
        listed = len(fetch(limit))
        if listed < limit:
            return listed
        limit *= 4


@dataclass
class CallCount:
    """The chat calls a Mem0 instance makes, counted per add: the first is its extraction; Mem0 1.x
    then makes one ADD/UPDATE/DELETE decision call when it extracted facts (2.x makes none), so every
    further call of an add is counted as an update call; `failed_updates`: those that raised (1.x logs
    and swallows them, so the add's facts are not stored)."""

    calls: int = 0
    update_calls: int = 0
    failed_updates: int = 0
    _in_add: int = field(default=0, repr=False)

    def start_add(self) -> None:
        self._in_add = 0

    def wrap(self, llm: Any) -> None:
        """Count every `llm.generate_response` call of this instance from now on."""
        original = llm.generate_response

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            self._in_add += 1
            update = self._in_add > 1
            self.update_calls += update
            try:
                return original(*args, **kwargs)
            except Exception:
                self.failed_updates += update
                raise

        llm.generate_response = counted

    def to_dict(self) -> dict[str, int]:
        return {"chat_calls": self.calls, "update_calls": self.update_calls,
                "failed_update_calls": self.failed_updates}


def input_kept(given: int, empty: int, failed: int, stored: int) -> dict[str, Any]:
    """baselines.base.InputKept's record (this file cannot import it): `given` turns, `empty` ones never
    sent, `failed` ones carried by an add that raised, the rest kept; `stored` memories at the end."""
    lost = {reason: n for reason, n in ((EMPTY, empty), (FAILED_ADD, failed)) if n}
    return {"given": given, "kept": given - empty - failed, "unit": "memories", "stored": stored,
            "lost": lost, "upstream": False}
