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

A user/assistant session with no user turn has no document in upstream's raw mode (it indexes the
user turns joined, only when there are some): such a session is left out here too, and its turns are
counted in the build statistics' `input` as lost on purpose (`upstream`). A turn counts as kept when the
answer model reads it when its session is ranked (every turn of an indexed session; with `"indexed"`,
the document's turns); `stored` is the palace collection's count of documents, read from Chroma.

Each ranked session is an evidence item in rank order (`rank`); `render` lays any subset of them out as
the context does: each session under its date, sessions apart by a blank line.

Vectors come from MemPalace's own OpenAI-compatible embedding function pointed at our embeddings
endpoint, never from Chroma's default function (which downloads a model). The palace lives under the
workdir.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from baselines.base import Endpoints, EvidenceItem, InputKept, Retrieval, Session
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
LOST_EMPTY = "empty turns"
LOST_NO_USER = "turns of sessions with no user turn (upstream's raw mode indexes no document for them)"
LOST_UNREAD = "turns outside the indexed document the answer model reads (answer_documents 'indexed')"


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
        kind = shape(sessions)
        self.k = self.top_k or TOP_K[kind]
        ids, documents, metadatas = [], [], []
        lost = dict.fromkeys((LOST_EMPTY, LOST_NO_USER, LOST_UNREAD), 0)
        for session in sessions:
            readable = [t for t in session.turns if t.content.strip()]
            lost[LOST_EMPTY] += len(session.turns) - len(readable)
            if kind == "chat" and self.user_turns_only and not any(t.role == "user" for t in readable):
                lost[LOST_NO_USER] += len(readable)
                continue
            turns = document_turns(session, self.user_turns_only)
            if not turns:
                continue
            doc_id = f"doc_{len(self.docs)}"
            text = raw_document(turns)
            whole = self.answer_documents == "session"
            lost[LOST_UNREAD] += 0 if whole else len(readable) - len(turns)
            self.docs[doc_id] = {"session_id": session.session_id,
                                 "answer_text": session_text(session) if whole else text,
                                 "turn_ids": [t.turn_id for t in (readable if whole else turns)]}
            ids.append(doc_id)
            documents.append(text)
            metadatas.append({"session_id": session.session_id, "timestamp": day(session.timestamp) or ""})
        with self.clock.measure("ingest"):
            if ids:
                self.collection.add(ids=ids, documents=documents, metadatas=metadatas)
        given = sum(len(s.turns) for s in sessions)
        lost = {reason: n for reason, n in lost.items() if n}
        kept = InputKept(given, given - sum(lost.values()), "documents", self.collection.count(), lost,
                         upstream=LOST_EMPTY not in lost)
        return {"documents": len(self.docs), "top_k": self.k, "input": kept.to_dict(),
                **self.clock.of("ingest")}

    def retrieve(self, question: str, when: datetime | None) -> Retrieval:
        assert self.collection is not None, "reset() first"
        evidence = []
        with self.clock.measure("query"):
            if self.docs:
                found = self.collection.query(query_texts=[self.query_prefix + question],
                                              n_results=min(self.k, len(self.docs)),
                                              include=["metadatas", "distances"])
                for rank, (doc_id, meta, dist) in enumerate(zip(found["ids"][0], found["metadatas"][0],
                                                                found["distances"][0])):
                    doc = self.docs[doc_id]
                    evidence.append(EvidenceItem(text=doc["answer_text"], time=meta.get("timestamp"),
                                                 score=1.0 - float(dist), session_ids=[doc["session_id"]],
                                                 turn_ids=doc["turn_ids"], rank=rank))
        return Retrieval(self.render(evidence), evidence, trace={**self.clock.of("query"), "top_k": self.k,
                                                                  "answer_documents": self.answer_documents})

    def render(self, items: Sequence[EvidenceItem]) -> str:
        """The answer context of ranked sessions `items`: each under its date, a blank line apart."""
        return "\n\n".join(f"[{e.time}]\n{e.text}" if e.time else e.text for e in items)

    def close(self) -> None:
        self.collection = None
        client, self.client = self.client, None
        if client is not None:
            closer = getattr(client, "close", None) or getattr(getattr(client, "_system", None), "stop", None)
            if closer is not None:
                closer()
