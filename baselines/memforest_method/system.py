"""MemForest behind the MemorySystem protocol (Embed, Planner and generator-free variants)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from baselines.base import RANKING_SESSIONS, EvidenceItem, InputKept, Retrieval, Session, render_evidence
from baselines.common import named_text
from memforest.api import MemForest
from memforest.config import MemForestConfig
from memforest.errors import InputError
from memforest.llm.base import ChatModel, Embedder
from memforest.llm.calllog import CallLog
from memforest.retrieval.results import Evidence
from memforest.sessions import check_id, readable
from memforest.state import UserState

_UNSAFE = re.compile(r"[^A-Za-z0-9_.:@+-]")  # what memforest.sessions.check_id refuses
_LONGEST = 120  # a stored id taken as it is; leaves room for a `+N` suffix within check_id's bound


def _accepted(session_id: str) -> bool:
    """MemForest stores the id as it is (`memforest.sessions.check_id`), and it is not too long."""
    try:
        check_id(session_id, "session id")
    except InputError:
        return False
    return len(session_id) <= _LONGEST


class StoredSessions:
    """Sessions as MemForest's input, and the way back from what it stores to the dataset's ids: the
    one conversion of a dataset session for MemForest (the adapter's and the harness tasks').

    A turn's text is `named_text` (a named speaker as a `Name: ` prefix, since MemForest's session
    format has no field for it); turns with nothing readable are left out (a session of none is left
    out whole), and each stored turn index maps back to the dataset's turn id."""

    def __init__(self) -> None:
        self.turn_ids: dict[tuple[str, int], str] = {}  # (stored session id, stored index) -> turn id
        self.session_ids: dict[str, str] = {}  # stored id -> dataset id
        self.stored_ids: dict[str, str] = {}  # dataset id -> stored id

    def payload(self, sessions: Sequence[Session]) -> list[dict[str, Any]]:
        self.map_ids([s.session_id for s in sessions])
        payload = []
        for s in sessions:
            sid = self.stored_ids[s.session_id]
            turns = [t for t in s.turns if readable(t.content)]
            for i, t in enumerate(turns):
                self.turn_ids[(sid, i)] = t.turn_id
            if turns:
                payload.append({
                    "session_id": sid,
                    "timestamp": s.timestamp.isoformat(),
                    "turns": [{"role": t.role, "content": named_text(t),
                               "timestamp": t.timestamp.isoformat() if t.timestamp else None} for t in turns],
                })
        return payload

    def map_ids(self, session_ids: Sequence[str]) -> None:
        """Give each dataset session id the id MemForest stores it under: itself when MemForest takes it
        as it is; else its unsafe characters as `_` (`a#2` -> `a_2`), with `+2`, `+3`... added when that
        is another session's id, so that every stored id maps back to exactly one dataset id. Ids taken
        as they are claim theirs first, so a real `a_2` keeps its id whatever the order."""
        new = [sid for sid in dict.fromkeys(session_ids) if sid not in self.stored_ids]
        for sid in new:
            if _accepted(sid) and sid not in self.session_ids:
                self.stored_ids[sid], self.session_ids[sid] = sid, sid
        for sid in new:
            if sid in self.stored_ids:
                continue
            base = _UNSAFE.sub("_", sid)[:110].replace("..", "._") or "session"
            base = base if base[0].isalnum() else "s" + base
            stored, n = base, 2
            while stored in self.session_ids:
                stored, n = f"{base}+{n}", n + 1
            self.stored_ids[sid], self.session_ids[stored] = stored, sid


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
        self.ids = StoredSessions()

    def reset(self, instance_id: str, workdir: Path) -> None:
        self.forest = MemForest(Path(workdir) / "store", self.config, llm=self.llm, embedder=self.embedder,
                                call_log=self.log, generate=self.generate)
        self.ids = StoredSessions()

    def attach(self, instance_id: str, workdir: Path, sessions: Sequence[Session]) -> None:
        """Reopen the finished store of an instance instead of rebuilding it (a resumed run), restoring
        the maps from stored ids back to the dataset's session and turn ids."""
        self.reset(instance_id, workdir)
        self.ids.payload(sessions)

    def ingest(self, sessions: Sequence[Session]) -> dict[str, Any]:
        assert self.forest is not None, "reset() first"
        payload = self.ids.payload(sessions)
        stats = self.forest.ingest_sessions(self.user, payload).to_dict()
        given = sum(len(s.turns) for s in sessions)
        stats["empty_turns_skipped"] = given - sum(len(p["turns"]) for p in payload)
        stats["input"] = self._input(given, stats).to_dict()
        return stats

    def _input(self, given: int, stats: dict[str, Any]) -> InputKept:
        """Kept: the turns the built cells hold (the report's `turns`); lost: those with nothing
        readable (left out here, or by MemForest), and any other turn no cell holds; stored: the cells
        in the user's state."""
        assert self.forest is not None
        kept = min(int(stats["turns"]), given)
        unreadable = min(stats["empty_turns_skipped"] + int(stats.get("turns_dropped", 0)), given - kept)
        lost = {reason: n for reason, n in (("turns with nothing readable", unreadable),
                                            ("turns no cell holds", given - kept - unreadable)) if n}
        return InputKept(given, kept, "cells", len(self.forest.snapshot(self.user).state.cells), lost)

    def retrieve(self, question: str, when: datetime | None) -> Retrieval:
        assert self.forest is not None, "reset() first"
        result = self.forest.query(self.user, question, date=when.isoformat() if when else None, answer=False,
                                   rank_sessions=RANKING_SESSIONS)
        state = self.forest.snapshot(self.user).state
        items = [self._item(state, ev) for ev in result.evidence]
        return Retrieval(render_evidence(items), items, result.trace.get("latency", {}), result.trace,
                         beyond=[self._item(state, ev) for ev in result.ranked_beyond])

    def _item(self, state: UserState, ev: Evidence) -> EvidenceItem:
        """One evidence unit with its provenance in dataset ids."""
        if ev.kind == "fact":
            spans = [(o.session_id, o.turn_lo, o.turn_hi) for o in state.facts[ev.id].occurrences]
        elif ev.kind == "cell":
            cell = state.cells[ev.id]
            spans = [(cell.session_id, cell.turn_lo, cell.turn_hi)]
        else:  # a summary (root-only retrieval): its sessions, no turns
            spans = [(s, 0, -1) for s in ev.session_ids]
        return EvidenceItem(
            text=ev.text, time=ev.time, score=ev.score,
            session_ids=list(dict.fromkeys(self.ids.session_ids.get(s, s) for s, _, _ in spans)),
            turn_ids=[self.ids.turn_ids[(s, i)] for s, lo, hi in spans for i in range(lo, hi + 1)
                      if (s, i) in self.ids.turn_ids],
        )

    def close(self) -> None:
        if self.forest is not None:
            self.forest.close()
            self.forest = None
