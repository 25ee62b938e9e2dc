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
A kind without a cap of its own takes the `default` cap; with neither, it is not capped."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from memforest.llm.base import ChatRequest
from memforest.prompts import answer, browse, equivalence, extraction, planner, summary

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
