"""Reference: the whole history in the answer prompt, cut to a token budget from the oldest end."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from baselines.base import EvidenceItem, InputKept, Retrieval, Session
from baselines.common import day, render_turn


def approx_tokens(text: str) -> int:
    """About four characters per token: the usual estimate for English with BPE tokenizers."""
    return max(1, len(text) // 4)


class FullContextSystem:
    """Keeps every turn (its build's `input`: all kept, as turns); `retrieve` returns the newest turns
    that fit in what the backbone's context leaves after the answer budget and the answer prompt (the
    whole history when it fits), grouped by session in time order. No model calls, no index."""

    def __init__(self, context_tokens: int, answer_tokens: int, prompt_tokens: int = 512,
                 count_tokens: Callable[[str], int] = approx_tokens, name: str = "full_context") -> None:
        self.name = name
        self.max_tokens = context_tokens - answer_tokens - prompt_tokens
        if self.max_tokens <= 0:
            raise ValueError(f"{name}: a {context_tokens}-token context leaves no room for history after "
                             f"{answer_tokens} answer and {prompt_tokens} prompt tokens")
        self.count_tokens = count_tokens
        self.sessions: list[Session] = []

    def reset(self, instance_id: str, workdir: Path) -> None:
        self.sessions = []

    def ingest(self, sessions: Sequence[Session]) -> dict[str, Any]:
        self.sessions = sorted([*self.sessions, *sessions], key=lambda s: s.timestamp)
        held = sum(len(s.turns) for s in self.sessions)
        return {"sessions": len(self.sessions), "turns": held,
                "input": InputKept.everything(sessions, "turns", held).to_dict()}

    def retrieve(self, question: str, when: datetime | None) -> Retrieval:
        kept: list[tuple[int, int]] = []  # (session index, turn index), newest first
        budget = self.max_tokens
        for si in range(len(self.sessions) - 1, -1, -1):
            session = self.sessions[si]
            budget -= self.count_tokens(f"[{day(session.timestamp)}]")
            for ti in range(len(session.turns) - 1, -1, -1):
                budget -= self.count_tokens(render_turn(session.turns[ti]))
                if budget < 0:
                    break
                kept.append((si, ti))
            if budget < 0:
                break
        by_session: dict[int, list[int]] = {}
        for si, ti in reversed(kept):
            by_session.setdefault(si, []).append(ti)
        evidence = []
        for si, turn_indexes in by_session.items():
            session = self.sessions[si]
            turns = [session.turns[i] for i in turn_indexes]
            evidence.append(EvidenceItem(text="\n".join(render_turn(t) for t in turns),
                                         time=day(session.timestamp), session_ids=[session.session_id],
                                         turn_ids=[t.turn_id for t in turns]))
        total = sum(len(s.turns) for s in self.sessions)
        trace = {"turns_kept": len(kept), "turns_total": total, "truncated": len(kept) < total}
        return Retrieval(self.render(evidence), evidence, trace=trace, ranked=False)

    def render(self, items: Sequence[EvidenceItem]) -> str:
        """The history of `items` (sessions, oldest first): each session's turns under its date."""
        return "\n\n".join(f"[{e.time}]\n{e.text}" for e in items)

    def close(self) -> None:
        self.sessions = []
