"""MemPalace (PyPI `mempalace`) in its "raw" benchmark mode: one Chroma document per session, no model
call on write, embedding top-k sessions on read.

Raw mode is MemPalace's retrieval benchmark (github MemPalace/mempalace, `benchmarks/longmemeval_bench.py`,
granularity "session"): a session's indexed document is its user turns joined; its headline figure is
recall@5 of those documents, with no answer model. Ranking here is exactly that. What the answer model
reads is a different matter: upstream hands it nothing, and a user-only document hides every
assistant-side fact (LongMemEval's single-session-assistant questions), so by default
(`answer_documents="session"`) each ranked session reaches the answer prompt whole, both speakers, each
turn once with its speaker once; `"indexed"` hands over the indexed document itself. LoCoMo has no
assistant: its documents are every turn, written `Name said, "text"` as upstream's
`benchmarks/locomo_bench.py` writes them (granularity "session"). `top_k` defaults to the budget of
upstream's headline metric per dataset shape: 5 for user/assistant chats (LongMemEval R@5), 10 for
two-person conversations (LoCoMo, `benchmarks/locomo_bench.py` top-10).

Vectors come from MemPalace's own OpenAI-compatible embedding function pointed at our embeddings
endpoint, never from Chroma's default function (which downloads a model). The palace lives under the
workdir.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from baselines.base import Endpoints, EvidenceItem, Retrieval, Session
from baselines.common import (
    ANSWER_DOCUMENTS,
    PhaseClock,
    day,
    document_turns,
    quiet_environment,
    raw_document,
    require,
    session_text,
)

COLLECTION = "mempalace_drawers"
TOP_K = {"chat": 5, "conversation": 10}  # upstream's headline budgets: LongMemEval R@5, LoCoMo top-10


def shape(sessions: Sequence[Session]) -> str:
    return "conversation" if any(t.speaker for s in sessions for t in s.turns) else "chat"


class MemPalaceSystem:
    def __init__(self, endpoints: Endpoints, *, top_k: int | None = None, user_turns_only: bool = True,
                 answer_documents: str = "session", query_prefix: str = "", name: str = "mempalace") -> None:
        """`top_k` None: upstream's budget for the data's shape (TOP_K); `answer_documents`: what the
        answer model reads of a ranked session (upstream: nothing, raw mode has no answer model);
        `query_prefix`: the run's embedder query instruction, put before the question (upstream: none)."""
        require("mempalace", name, "mempalace")
        require("chromadb", name, "mempalace")
        if answer_documents not in ANSWER_DOCUMENTS:
            raise ValueError(f"{name}: answer_documents must be one of {ANSWER_DOCUMENTS}, not "
                             f"{answer_documents!r}")
        self.name = name
        self.embed_base_url, self.embed_model = endpoints.base_url, endpoints.embed_model
        self.top_k, self.user_turns_only, self.answer_documents = top_k, user_turns_only, answer_documents
        self.query_prefix = query_prefix
        self.clock = PhaseClock()
        self.client: Any = None
        self.collection: Any = None
        self.docs: dict[str, dict[str, Any]] = {}
        self.k = top_k or TOP_K["chat"]

    def reset(self, instance_id: str, workdir: Path) -> None:
        self.close()
        path = Path(workdir) / "palace"
        path.mkdir(parents=True, exist_ok=True)
        with quiet_environment():  # MemPalace sets Chroma's telemetry variable when imported: undone here
            import chromadb
            from chromadb.config import Settings
            from mempalace.embedding import OpenAICompatEmbeddingFunction

            self.client = chromadb.PersistentClient(path=str(path),
                                                    settings=Settings(anonymized_telemetry=False))
        function = OpenAICompatEmbeddingFunction(self.embed_base_url, self.embed_model, api_key="local")
        self.collection = self.client.get_or_create_collection(
            COLLECTION, embedding_function=function, metadata={"hnsw:space": "cosine"})
        self.docs = {}

    def ingest(self, sessions: Sequence[Session]) -> dict[str, Any]:
        assert self.collection is not None, "reset() first"
        self.k = self.top_k or TOP_K[shape(sessions)]
        ids, documents, metadatas = [], [], []
        for session in sessions:
            turns = document_turns(session, self.user_turns_only)
            if not turns:
                continue
            doc_id = f"doc_{len(self.docs)}"
            text = raw_document(turns)
            answer = session_text(session) if self.answer_documents == "session" else text
            self.docs[doc_id] = {"session_id": session.session_id, "answer_text": answer,
                                 "turn_ids": [t.turn_id for t in session.turns if t.content.strip()]}
            ids.append(doc_id)
            documents.append(text)
            metadatas.append({"session_id": session.session_id, "timestamp": day(session.timestamp) or ""})
        with self.clock.measure("ingest"):
            if ids:
                self.collection.add(ids=ids, documents=documents, metadatas=metadatas)
        return {"documents": len(self.docs), "top_k": self.k, **self.clock.of("ingest")}

    def retrieve(self, question: str, when: datetime | None) -> Retrieval:
        assert self.collection is not None, "reset() first"
        evidence = []
        with self.clock.measure("query"):
            if self.docs:
                found = self.collection.query(query_texts=[self.query_prefix + question],
                                              n_results=min(self.k, len(self.docs)),
                                              include=["metadatas", "distances"])
                for doc_id, meta, dist in zip(found["ids"][0], found["metadatas"][0], found["distances"][0]):
                    doc = self.docs[doc_id]
                    evidence.append(EvidenceItem(text=doc["answer_text"], time=meta.get("timestamp"),
                                                 score=1.0 - float(dist), session_ids=[doc["session_id"]],
                                                 turn_ids=doc["turn_ids"]))
        context = "\n\n".join(f"[{e.time}]\n{e.text}" if e.time else e.text for e in evidence)
        return Retrieval(context, evidence, trace={**self.clock.of("query"), "top_k": self.k,
                                                    "answer_documents": self.answer_documents})

    def close(self) -> None:
        self.collection = None
        client, self.client = self.client, None
        if client is not None:
            closer = getattr(client, "close", None) or getattr(getattr(client, "_system", None), "stop", None)
            if closer is not None:
                closer()
