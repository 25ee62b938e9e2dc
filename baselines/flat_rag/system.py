"""Reference: top-k turns by embedding similarity, no structure and no model calls on write."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from baselines.base import EvidenceItem, InputKept, Retrieval, Session, ranked_past, render_evidence
from baselines.common import PhaseClock, day, render_turn
from memforest.config import QueryConfig
from memforest.llm.base import Embedder


class FlatRAGSystem:
    """One vector per non-empty turn (`speaker: text`), exact inner-product search, top `top_k` turns
    returned in rank order with their session and turn ids. Vectors and turn records are saved under
    the workdir. `top_k` defaults to MemForest's evidence budget (`QueryConfig.final_units`)."""

    def __init__(self, embedder: Embedder, top_k: int = QueryConfig.final_units,
                 name: str = "flat_rag") -> None:
        self.name = name
        self.embedder = embedder
        self.top_k = top_k
        self.clock = PhaseClock()
        self.workdir: Path | None = None
        self.rows: list[dict[str, Any]] = []
        self.vectors = np.zeros((0, embedder.dim), dtype=np.float32)

    def reset(self, instance_id: str, workdir: Path) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.rows, self.vectors = [], np.zeros((0, self.embedder.dim), dtype=np.float32)

    def ingest(self, sessions: Sequence[Session]) -> dict[str, Any]:
        assert self.workdir is not None, "reset() first"
        rows: list[dict[str, Any]] = [{"text": render_turn(t), "time": day(s.timestamp),
                                       "session_id": s.session_id, "turn_id": t.turn_id}
                for s in sessions for t in s.turns if t.content.strip()]
        with self.clock.measure("ingest"):
            vectors = self.embedder.embed([r["text"] for r in rows], kind="passage")
        self.rows += rows
        self.vectors = np.vstack([self.vectors, vectors])
        np.save(self.workdir / "vectors.npy", self.vectors)
        (self.workdir / "turns.json").write_text(json.dumps(self.rows, ensure_ascii=False))
        given = sum(len(s.turns) for s in sessions)
        kept = InputKept(given, len(rows), "turns", len(self.rows),
                         {"empty turns": given - len(rows)} if given > len(rows) else {})
        return {"turns_indexed": len(self.rows), "input": kept.to_dict(), **self.clock.of("ingest")}

    def retrieve(self, question: str, when: datetime | None) -> Retrieval:
        with self.clock.measure("query"):
            query = self.embedder.embed([question], kind="query")[0]
            scores = self.vectors @ query
            order = np.argsort(-scores, kind="stable")
            beyond = ranked_past(order.tolist(), [r["session_id"] for r in self.rows], self.top_k)
        evidence = self._items(scores, order[: self.top_k])
        return Retrieval(render_evidence(evidence), evidence, beyond=self._items(scores, beyond),
                         trace=self.clock.of("query"))

    def _items(self, scores: np.ndarray, indices: Any) -> list[EvidenceItem]:
        return [EvidenceItem(text=self.rows[i]["text"], time=self.rows[i]["time"], score=float(scores[i]),
                             session_ids=[self.rows[i]["session_id"]], turn_ids=[self.rows[i]["turn_id"]])
                for i in indices]

    def close(self) -> None:
        self.rows, self.vectors = [], np.zeros((0, self.embedder.dim), dtype=np.float32)
