"""Reference: one document per session, top-k sessions by embedding similarity (no structure, no model
calls on write). The document is built as in MemPalace's raw mode (its user turns joined; every turn,
as `speaker: text`, when a session has no user turn), but encoded by the run's embedder in process, so
it is the published raw-session anchor without Chroma. As a reference it ranks at MemForest's evidence
budget (`QueryConfig.final_units`, 10 sessions), not at MemPalace's own per-dataset budget (5 on
LongMemEval): why, in baselines/README.md ("Budgets")."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from baselines.base import EvidenceItem, Retrieval, Session, render_evidence
from baselines.common import PhaseClock, day, document_turns, render_turn
from memforest.config import QueryConfig
from memforest.llm.base import Embedder


class FlatSessionsSystem:
    def __init__(self, embedder: Embedder, top_k: int = QueryConfig.final_units, user_turns_only: bool = True,
                 name: str = "flat_sessions") -> None:
        self.name = name
        self.embedder = embedder
        self.top_k, self.user_turns_only = top_k, user_turns_only
        self.clock = PhaseClock()
        self.workdir: Path | None = None
        self.docs: list[dict[str, Any]] = []
        self.vectors = np.zeros((0, embedder.dim), dtype=np.float32)

    def reset(self, instance_id: str, workdir: Path) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.docs, self.vectors = [], np.zeros((0, self.embedder.dim), dtype=np.float32)

    def ingest(self, sessions: Sequence[Session]) -> dict[str, Any]:
        assert self.workdir is not None, "reset() first"
        docs: list[dict[str, Any]] = []
        for session in sessions:
            turns = document_turns(session, self.user_turns_only)
            if turns:
                text = "\n".join(t.content if t.role == "user" and not t.speaker else render_turn(t)
                                 for t in turns)
                docs.append({"text": text, "time": day(session.timestamp), "session_id": session.session_id,
                             "turn_ids": [t.turn_id for t in turns]})
        with self.clock.measure("ingest"):
            vectors = self.embedder.embed([str(d["text"]) for d in docs], kind="passage")
        self.docs += docs
        self.vectors = np.vstack([self.vectors, vectors])
        np.save(self.workdir / "vectors.npy", self.vectors)
        (self.workdir / "documents.json").write_text(json.dumps(self.docs, ensure_ascii=False))
        return {"documents": len(self.docs), **self.clock.of("ingest")}

    def retrieve(self, question: str, when: datetime | None) -> Retrieval:
        with self.clock.measure("query"):
            query = self.embedder.embed([question], kind="query")[0]
            scores = self.vectors @ query
            order = np.argsort(-scores, kind="stable")[: self.top_k]
        evidence = [EvidenceItem(text=self.docs[i]["text"], time=self.docs[i]["time"], score=float(scores[i]),
                                 session_ids=[self.docs[i]["session_id"]], turn_ids=self.docs[i]["turn_ids"])
                    for i in order]
        return Retrieval(render_evidence(evidence), evidence, trace=self.clock.of("query"))

    def close(self) -> None:
        self.docs, self.vectors = [], np.zeros((0, self.embedder.dim), dtype=np.float32)
