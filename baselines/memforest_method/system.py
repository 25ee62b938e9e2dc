"""MemForest behind the MemorySystem protocol (Embed, Planner and generator-free variants)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from baselines.base import EvidenceItem, Retrieval, Session, Turn, render_evidence
from memforest.api import MemForest
from memforest.config import MemForestConfig
from memforest.llm.base import ChatModel, Embedder
from memforest.llm.calllog import CallLog

_UNSAFE = re.compile(r"[^A-Za-z0-9_.:@+-]")


def turn_text(turn: Turn) -> str:
    """A turn as MemForest stores it: its role says user or assistant, and a named speaker (LoCoMo),
    which MemForest's session format has no field for, is attached once as a `Name: ` prefix."""
    return f"{turn.speaker}: {turn.content}" if turn.speaker else turn.content


class MemForestSystem:
    def __init__(
        self,
        config: MemForestConfig,
        llm: ChatModel | None,
        embedder: Embedder,
        call_log: CallLog,
        generate: bool = True,
        name: str = "memforest",
    ) -> None:
        self.name = name
        self.config = config
        self.llm = llm
        self.embedder = embedder
        self.log = call_log
        self.generate = generate
        self.forest: MemForest | None = None
        self.user = "user"
        self._turn_ids: dict[tuple[str, int], str] = {}
        self._session_ids: dict[str, str] = {}

    def reset(self, instance_id: str, workdir: Path) -> None:
        self.forest = MemForest(Path(workdir) / "store", self.config, llm=self.llm, embedder=self.embedder,
                                call_log=self.log, generate=self.generate)
        self._turn_ids, self._session_ids = {}, {}

    def attach(self, instance_id: str, workdir: Path, sessions: Sequence[Session]) -> None:
        """Reopen the finished store of an instance instead of rebuilding it (a resumed run), restoring
        the maps from stored ids back to the dataset's session and turn ids."""
        self.reset(instance_id, workdir)
        self._payload(sessions)

    def ingest(self, sessions: Sequence[Session]) -> dict[str, Any]:
        assert self.forest is not None, "reset() first"
        payload = self._payload(sessions)
        stats = self.forest.ingest_sessions(self.user, payload).to_dict()
        stats["empty_turns_skipped"] = sum(len(s.turns) for s in sessions) - sum(len(p["turns"]) for p in payload)
        return stats

    def _payload(self, sessions: Sequence[Session]) -> list[dict[str, Any]]:
        """The sessions as MemForest stores them: turns without text are left out (a session of none is
        left out whole), and each stored turn index maps back to the dataset's turn id."""
        payload = []
        for s in sessions:
            sid = self._safe_id(s.session_id)
            turns = [t for t in s.turns if t.content.strip()]
            for i, t in enumerate(turns):
                self._turn_ids[(sid, i)] = t.turn_id
            if turns:
                payload.append({
                    "session_id": sid,
                    "timestamp": s.timestamp.isoformat(),
                    "turns": [{"role": t.role, "content": turn_text(t),
                               "timestamp": t.timestamp.isoformat() if t.timestamp else None} for t in turns],
                })
        return payload

    def retrieve(self, question: str, when: datetime | None) -> Retrieval:
        assert self.forest is not None, "reset() first"
        result = self.forest.query(self.user, question, date=when.isoformat() if when else None, answer=False)
        state = self.forest.snapshot(self.user).state
        items = []
        for ev in result.evidence:
            if ev.kind == "fact":
                spans = [(o.session_id, o.turn_lo, o.turn_hi) for o in state.facts[ev.id].occurrences]
            elif ev.kind == "cell":
                cell = state.cells[ev.id]
                spans = [(cell.session_id, cell.turn_lo, cell.turn_hi)]
            else:  # a summary (root-only retrieval): its sessions, no turns
                spans = [(s, 0, -1) for s in ev.session_ids]
            items.append(EvidenceItem(
                text=ev.text, time=ev.time, score=ev.score,
                session_ids=list(dict.fromkeys(self._session_ids.get(s, s) for s, _, _ in spans)),
                turn_ids=[self._turn_ids[(s, i)] for s, lo, hi in spans for i in range(lo, hi + 1)
                          if (s, i) in self._turn_ids],
            ))
        return Retrieval(render_evidence(items), items, result.trace.get("latency", {}), result.trace)

    def close(self) -> None:
        if self.forest is not None:
            self.forest.close()
            self.forest = None

    def _safe_id(self, session_id: str) -> str:
        sid = _UNSAFE.sub("_", session_id)[:120] or "session"
        if not sid[0].isalnum():
            sid = "s" + sid
        self._session_ids[sid] = session_id
        return sid

