"""MemPalace (PyPI `mempalace`) in its "raw" benchmark mode: one Chroma document per session, no model
call on write, embedding top-k sessions on read.

As in MemPalace's LongMemEval script, a session's document is its user turns joined (every turn when a
session has no user turn, e.g. LoCoMo's named speakers, which are rendered `speaker: text`). Vectors
come from MemPalace's own OpenAI-compatible embedding function pointed at our embeddings endpoint,
never from Chroma's default function (which downloads a model). The palace lives under the workdir.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from baselines.base import Endpoints, EvidenceItem, Retrieval, Session, Turn, render_evidence
from baselines.common import PhaseClock, day, quiet_environment, render_turn, require

quiet_environment()  # telemetry off before the library is ever imported

COLLECTION = "mempalace_drawers"


def document_turns(session: Session, user_only: bool) -> list[Turn]:
    turns = [t for t in session.turns if t.content.strip()]
    users = [t for t in turns if t.role == "user"]
    return users if user_only and users else turns


class MemPalaceSystem:
    def __init__(self, endpoints: Endpoints, *, top_k: int = 10, user_turns_only: bool = True,
                 name: str = "mempalace") -> None:
        require("mempalace", name, "mempalace")
        require("chromadb", name, "mempalace")
        self.name = name
        self.embed_base_url, self.embed_model = endpoints.base_url, endpoints.embed_model
        self.top_k, self.user_turns_only = top_k, user_turns_only
        self.clock = PhaseClock()
        self.client: Any = None
        self.collection: Any = None
        self.docs: dict[str, dict[str, Any]] = {}

    def reset(self, instance_id: str, workdir: Path) -> None:
        self.close()
        import chromadb
        from chromadb.config import Settings
        from mempalace.embedding import OpenAICompatEmbeddingFunction

        path = Path(workdir) / "palace"
        path.mkdir(parents=True, exist_ok=True)
        self.client = chromadb.PersistentClient(path=str(path), settings=Settings(anonymized_telemetry=False))
        function = OpenAICompatEmbeddingFunction(self.embed_base_url, self.embed_model, api_key="local")
        self.collection = self.client.get_or_create_collection(
            COLLECTION, embedding_function=function, metadata={"hnsw:space": "cosine"})
        self.docs = {}

    def ingest(self, sessions: Sequence[Session]) -> dict[str, Any]:
        assert self.collection is not None, "reset() first"
        ids, documents, metadatas = [], [], []
        for session in sessions:
            turns = document_turns(session, self.user_turns_only)
            if not turns:
                continue
            doc_id = f"doc_{len(self.docs)}"
            text = "\n".join(t.content if t.role == "user" and not t.speaker else render_turn(t) for t in turns)
            self.docs[doc_id] = {"session_id": session.session_id, "turn_ids": [t.turn_id for t in turns]}
            ids.append(doc_id)
            documents.append(text)
            metadatas.append({"session_id": session.session_id, "timestamp": day(session.timestamp) or ""})
        with self.clock.measure("ingest"):
            if ids:
                self.collection.add(ids=ids, documents=documents, metadatas=metadatas)
        return {"documents": len(self.docs), **self.clock.of("ingest")}

    def retrieve(self, question: str, when: datetime | None) -> Retrieval:
        assert self.collection is not None, "reset() first"
        evidence = []
        with self.clock.measure("query"):
            if self.docs:
                found = self.collection.query(query_texts=[question], n_results=min(self.top_k, len(self.docs)),
                                              include=["documents", "metadatas", "distances"])
                for doc_id, text, meta, dist in zip(found["ids"][0], found["documents"][0],
                                                    found["metadatas"][0], found["distances"][0]):
                    evidence.append(EvidenceItem(text=text, time=meta.get("timestamp"), score=1.0 - float(dist),
                                                 session_ids=[self.docs[doc_id]["session_id"]],
                                                 turn_ids=self.docs[doc_id]["turn_ids"]))
        return Retrieval(render_evidence(evidence), evidence,
                         trace=self.clock.of("query"))

    def close(self) -> None:
        self.collection = None
        client, self.client = self.client, None
        if client is not None:
            closer = getattr(client, "close", None) or getattr(getattr(client, "_system", None), "stop", None)
            if closer is not None:
                closer()
