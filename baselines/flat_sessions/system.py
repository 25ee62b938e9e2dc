"""Reference: one document per session, top-k sessions by embedding similarity (no structure, no model
calls on write). The documents are MemPalace's (baselines/mempalace): ranked by the raw-mode document
(a session's user turns joined; LoCoMo's every turn as `Name said, "text"`), encoded by the run's
embedder in process, so it is the published raw-session anchor without Chroma; the answer model reads
each ranked session whole, both speakers (`answer_documents="session"`, as MemPalace does, so that
assistant-side facts are not hidden), or the indexed document (`"indexed"`). As a reference it ranks at
MemForest's evidence budget (`QueryConfig.final_units`, 10 sessions), not at MemPalace's own per-dataset
budget (5 on LongMemEval): why, in baselines/README.md ("Budgets")."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from baselines.base import EvidenceItem, InputKept, Retrieval, Session, ranked_past, render_evidence
from baselines.common import ANSWER_DOCUMENTS, PhaseClock, day, document_turns, raw_document, session_text
from memforest.config import QueryConfig
from memforest.llm.base import Embedder


class FlatSessionsSystem:
    def __init__(self, embedder: Embedder, top_k: int = QueryConfig.final_units, user_turns_only: bool = True,
                 answer_documents: str = "session", name: str = "flat_sessions") -> None:
        if answer_documents not in ANSWER_DOCUMENTS:
            raise ValueError(f"{name}: answer_documents must be one of {ANSWER_DOCUMENTS}, not "
                             f"{answer_documents!r}")
        self.name = name
        self.embedder = embedder
        self.top_k, self.user_turns_only, self.answer_documents = top_k, user_turns_only, answer_documents
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
            if not turns:
                continue
            whole = self.answer_documents == "session"
            answered = [t for t in session.turns if t.content.strip()] if whole else turns
            docs.append({"indexed": raw_document(turns), "time": day(session.timestamp),
                         "text": session_text(session) if whole else raw_document(turns),
                         "session_id": session.session_id, "turn_ids": [t.turn_id for t in answered]})
        with self.clock.measure("ingest"):
            vectors = self.embedder.embed([str(d["indexed"]) for d in docs], kind="passage")
        self.docs += docs
        self.vectors = np.vstack([self.vectors, vectors])
        np.save(self.workdir / "vectors.npy", self.vectors)
        (self.workdir / "documents.json").write_text(json.dumps(self.docs, ensure_ascii=False))
        return {"documents": len(self.docs), "input": self._input(sessions, docs).to_dict(),
                **self.clock.of("ingest")}

    def _input(self, sessions: Sequence[Session], docs: Sequence[dict[str, Any]]) -> InputKept:
        """Kept: the turns the answer model reads when their session is ranked (`turn_ids`)."""
        given = sum(len(s.turns) for s in sessions)
        readable = sum(1 for s in sessions for t in s.turns if t.content.strip())
        kept = sum(len(d["turn_ids"]) for d in docs)
        lost = {reason: n for reason, n in (("empty turns", given - readable),
                                            ("turns outside the indexed document the answer model reads "
                                             "(answer_documents 'indexed')", readable - kept)) if n}
        return InputKept(given, kept, "documents", len(self.docs), lost)

    def retrieve(self, question: str, when: datetime | None) -> Retrieval:
        with self.clock.measure("query"):
            query = self.embedder.embed([question], kind="query")[0]
            scores = self.vectors @ query
            order = np.argsort(-scores, kind="stable")
            beyond = ranked_past(order.tolist(), [r["session_id"] for r in self.docs], self.top_k)
        evidence = self._items(scores, order[: self.top_k])
        return Retrieval(render_evidence(evidence), evidence, beyond=self._items(scores, beyond),
                         trace={**self.clock.of("query"), "answer_documents": self.answer_documents})

    def _items(self, scores: np.ndarray, indices: Any) -> list[EvidenceItem]:
        return [EvidenceItem(text=self.docs[i]["text"], time=self.docs[i]["time"], score=float(scores[i]),
                             session_ids=[self.docs[i]["session_id"]], turn_ids=self.docs[i]["turn_ids"])
                for i in indices]

    def close(self) -> None:
        self.docs, self.vectors = [], np.zeros((0, self.embedder.dim), dtype=np.float32)
