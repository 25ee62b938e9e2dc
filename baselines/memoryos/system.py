"""MemoryOS (PyPI `memoryos-pro` 0.1.0): short-term queue -> mid-term topic segments (heat-scored) ->
long-term user profile and knowledge, with the paper's settings top_k_sessions=10 and
retrieval_queue_capacity=10.

Installed without its pins (faiss-gpu, numpy==1.24); it runs on faiss-cpu. The adapter patches three
things inside the library, and nothing else:
- embeddings: `get_embedding` (which would load a sentence-transformers model by hub name) calls our
  Embedder instead;
- time: `get_timestamp` returns the session being ingested (the question date at query time), so
  heat, recency and knowledge stamps follow the dataset's clock, not the wall clock;
- model name: every chat call uses the configured model (the library sends some with a hard-coded
  "gpt-4o-mini", which a real server would reject).
Turns are paired into (user_input, agent_response) QA pages as MemoryOS expects; the pending
short-term queue is flushed into mid-term memory at the end of `ingest`, inside the timed build.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from baselines.base import Endpoints, EvidenceItem, Retrieval, Session, Turn
from baselines.common import PhaseClock, quiet_environment, require, safe_id
from memforest.config import EmbedderConfig
from memforest.llm.base import Embedder
from memforest.llm.embedders import OpenAIEmbedder

quiet_environment()  # telemetry off before the library is ever imported

CLOCK_FORMAT = "%Y-%m-%d %H:%M:%S"
_MODULES = ("utils", "memoryos", "mid_term", "long_term", "short_term", "updater", "retriever")


def qa_pairs(session: Session) -> list[tuple[Turn, Turn | None]]:
    turns = [t for t in session.turns if t.content.strip()]
    return [(turns[i], turns[i + 1] if i + 1 < len(turns) else None) for i in range(0, len(turns), 2)]


def said(turn: Turn | None) -> str:
    if turn is None:
        return "(no reply)"
    return f"{turn.speaker}: {turn.content}" if turn.speaker else turn.content


class MemoryOSSystem:
    def __init__(self, endpoints: Endpoints, *, top_k_sessions: int = 10, retrieval_queue_capacity: int = 10,
                 short_term_capacity: int = 10, mid_term_capacity: int = 2000, long_term_knowledge_capacity: int = 100,
                 heat_threshold: float = 5.0, similarity_threshold: float = 0.6, name: str = "memoryos") -> None:
        require("memoryos", name, "memoryos")
        require("faiss", name, "memoryos")
        self.name = name
        e = endpoints
        self.llm_base_url, self.llm_model, self.api_key = e.base_url, e.chat_model, e.api_key
        self.embedder: Embedder = OpenAIEmbedder(EmbedderConfig(backend="openai", base_url=e.base_url,
                                                                model=e.embed_model, dim=e.embed_dim))
        self.top_k_sessions = top_k_sessions
        self.settings = dict(short_term_capacity=short_term_capacity, mid_term_capacity=mid_term_capacity,
                             long_term_knowledge_capacity=long_term_knowledge_capacity,
                             retrieval_queue_capacity=retrieval_queue_capacity,
                             mid_term_heat_threshold=heat_threshold,
                             mid_term_similarity_threshold=similarity_threshold)
        self.clock = PhaseClock()
        self.now = datetime(2000, 1, 1)
        self.mos: Any = None
        self.log_path: Path | None = None
        self.pages: dict[tuple[str, str], tuple[str, list[str]]] = {}
        self._vectors: dict[str, np.ndarray] = {}

    # ------------------------------------------------------------------ the three patches

    def _embedding(self, text: str, model_name: str | None = None, use_cache: bool = True) -> np.ndarray:
        if text not in self._vectors:
            self._vectors[text] = self.embedder.embed([text])[0]
        return self._vectors[text]

    def _timestamp(self) -> str:
        return self.now.strftime(CLOCK_FORMAT)

    @contextlib.contextmanager
    def _inside(self) -> Iterator[None]:
        """Library calls run with the patches in place and their prints sent to the instance log."""
        import importlib

        modules = [importlib.import_module(f"memoryos.{m}") for m in _MODULES]
        saved = [(m, name, getattr(m, name)) for m in modules for name in ("get_embedding", "get_timestamp")
                 if hasattr(m, name)]
        for m, name, _ in saved:
            setattr(m, name, self._embedding if name == "get_embedding" else self._timestamp)
        assert self.log_path is not None
        try:
            with self.log_path.open("a", encoding="utf-8") as log, contextlib.redirect_stdout(log):
                yield
        finally:
            for m, name, value in saved:
                setattr(m, name, value)

    # ------------------------------------------------------------------ the protocol

    def reset(self, instance_id: str, workdir: Path) -> None:
        self.close()
        workdir = Path(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / "memoryos.log"
        self.pages, self._vectors = {}, {}
        with self._inside():
            from memoryos import Memoryos

            self.mos = Memoryos(user_id=safe_id(instance_id), openai_api_key=self.api_key,
                                openai_base_url=self.llm_base_url, data_storage_path=str(workdir / "memoryos"),
                                llm_model=self.llm_model, **self.settings)
        client, chat = self.mos.client, self.mos.client.chat_completion
        client.chat_completion = lambda model, messages, **kw: chat(self.llm_model, messages, **kw)

    def ingest(self, sessions: Sequence[Session]) -> dict[str, Any]:
        assert self.mos is not None, "reset() first"
        pairs = 0
        with self.clock.measure("ingest"), self._inside():
            for session in sorted(sessions, key=lambda s: s.timestamp):
                self.now = session.timestamp
                for first, second in qa_pairs(session):
                    user_input, response = said(first), said(second)
                    self.pages[(user_input, response)] = (session.session_id,
                                                          [t.turn_id for t in (first, second) if t is not None])
                    self.mos.add_memory(user_input, response, timestamp=self._timestamp())
                    pairs += 1
            self._flush()
        return {"qa_pairs": pairs, "mid_term_sessions": len(self.mos.mid_term_memory.sessions),
                "user_knowledge": len(self.mos.user_long_term_memory.get_user_knowledge()),
                **self.clock.of("ingest")}

    def _flush(self) -> None:
        """Move the pending short-term pages into mid-term memory (the library only does this when the
        queue is full), then run the profile/knowledge update that a write may trigger."""
        short = self.mos.short_term_memory
        if not short.memory:
            return
        short.is_full = lambda: len(short.memory) > 0
        try:
            self.mos.updater.process_short_term_to_mid_term()
        finally:
            del short.is_full
        self.mos._trigger_profile_and_knowledge_update_if_needed()

    def retrieve(self, question: str, when: datetime | None) -> Retrieval:
        assert self.mos is not None, "reset() first"
        self.now = when or self.now
        with self.clock.measure("query"), self._inside():
            found = self.mos.retriever.retrieve_context(user_query=question, user_id=self.mos.user_id,
                                                        top_k_sessions=self.top_k_sessions)
            profile = self.mos.user_long_term_memory.get_raw_user_profile(self.mos.user_id)
        evidence = []
        for page in found["retrieved_pages"]:
            session, turns = self.pages.get((page.get("user_input", ""), page.get("agent_response", "")), (None, []))
            text = f"User: {page.get('user_input', '')}\nAssistant: {page.get('agent_response', '')}"
            evidence.append(EvidenceItem(text, page.get("timestamp"), [session] if session else [], turns))
        for kind in ("retrieved_user_knowledge", "retrieved_assistant_knowledge"):
            evidence += [EvidenceItem(k["knowledge"], k.get("timestamp")) for k in found[kind]]
        sections = [f"User profile:\n{profile}"] if profile and profile.lower() != "none" else []
        sections.append("Memory:\n" + "\n".join(f"[{e.time}] {e.text}" for e in evidence))
        return Retrieval("\n\n".join(sections), evidence, trace={
            **self.clock.of("query"), "pages": len(found["retrieved_pages"]),
            "user_knowledge": len(found["retrieved_user_knowledge"]),
            "assistant_knowledge": len(found["retrieved_assistant_knowledge"])})

    def close(self) -> None:
        mos, self.mos = self.mos, None
        if mos is not None:
            mos.client.executor.shutdown(wait=True)
