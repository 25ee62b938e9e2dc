"""Mem0 (PyPI `mem0ai` 1.x): extract facts, then ADD/UPDATE/DELETE them against retrieved memories.

Embedded Qdrant under the workdir; chat and embeddings through OpenAI-compatible endpoints (the
logging proxy). Sessions are added `batch_turns` turns at a time (2 = one exchange, as Mem0's own
benchmark scripts do), each with metadata {session_id, session_date, turn_ids}. Mem0 1.x writes
"Today's date is <import day>" into its extraction prompts; the adapter substitutes the session's
date for each add, so no wall-clock date reaches the model.
"""

from __future__ import annotations

import contextlib
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from baselines.base import Endpoints, EvidenceItem, Retrieval, Session, render_evidence
from baselines.common import PhaseClock, chat_role, chunks, day, quiet_environment, require, safe_id

quiet_environment()  # telemetry off before the library is ever imported

_TODAY = re.compile(r"Today's date is \d{4}-\d{2}-\d{2}")
_PROMPTS = ("USER_MEMORY_EXTRACTION_PROMPT", "AGENT_MEMORY_EXTRACTION_PROMPT", "FACT_RETRIEVAL_PROMPT")


@contextlib.contextmanager
def extraction_date(when: datetime) -> Iterator[None]:
    """Mem0's extraction prompts with `when` as today's date, for the duration of one add."""
    import mem0.memory.utils as prompts

    saved = {name: getattr(prompts, name) for name in _PROMPTS if hasattr(prompts, name)}
    for name, text in saved.items():
        setattr(prompts, name, _TODAY.sub(f"Today's date is {when:%Y-%m-%d}", text))
    try:
        yield
    finally:
        for name, text in saved.items():
            setattr(prompts, name, text)


class Mem0System:
    def __init__(self, endpoints: Endpoints, *, top_k: int = 10, batch_turns: int = 2, temperature: float = 0.0,
                 max_tokens: int = 2000, name: str = "mem0") -> None:
        require("mem0", name, "mem0")
        self.name = name
        e = endpoints
        self.llm = {"model": e.chat_model, "openai_base_url": e.base_url, "api_key": e.api_key,
                    "temperature": temperature, "max_tokens": max_tokens}
        self.embed = {"model": e.embed_model, "openai_base_url": e.base_url, "api_key": e.api_key,
                      "embedding_dims": e.embed_dim}
        self.dims, self.top_k, self.batch_turns = e.embed_dim, top_k, batch_turns
        self.clock = PhaseClock()
        self.memory: Any = None
        self.user = "user"

    def reset(self, instance_id: str, workdir: Path) -> None:
        self.close()
        workdir = Path(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        from mem0 import Memory

        self.user = safe_id(instance_id)
        self.memory = Memory.from_config({
            "llm": {"provider": "openai", "config": self.llm},
            "embedder": {"provider": "openai", "config": self.embed},
            "vector_store": {"provider": "qdrant", "config": {
                "collection_name": "mem0", "embedding_model_dims": self.dims,
                "path": str(workdir / "qdrant"), "on_disk": True}},
            "history_db_path": str(workdir / "history.db"),
        })

    def ingest(self, sessions: Sequence[Session]) -> dict[str, Any]:
        assert self.memory is not None, "reset() first"
        events: Counter[str] = Counter()
        adds = 0
        with self.clock.measure("ingest"):
            for session in sessions:
                for turns in chunks([t for t in session.turns if t.content.strip()], self.batch_turns):
                    messages = [{"role": chat_role(t), "content": f"{t.speaker}: {t.content}" if t.speaker else t.content}
                                for t in turns]
                    metadata = {"session_id": session.session_id, "session_date": day(session.timestamp),
                                "turn_ids": [t.turn_id for t in turns]}
                    with extraction_date(session.timestamp):
                        result = self.memory.add(messages, user_id=self.user, metadata=metadata)
                    events.update(r.get("event", "?") for r in (result or {}).get("results", []))
                    adds += 1
        return {"adds": adds, "events": dict(events), **self.clock.of("ingest")}

    def retrieve(self, question: str, when: datetime | None) -> Retrieval:
        assert self.memory is not None, "reset() first"
        with self.clock.measure("query"):
            found = self.memory.search(question, user_id=self.user, limit=self.top_k)
        evidence = []
        for item in found.get("results", []) if isinstance(found, dict) else found:
            meta = item.get("metadata") or {}
            evidence.append(EvidenceItem(
                text=item.get("memory", ""), time=meta.get("session_date"), score=item.get("score"),
                session_ids=[meta["session_id"]] if meta.get("session_id") else [],
                turn_ids=[str(t) for t in meta.get("turn_ids") or []]))
        return Retrieval(render_evidence(evidence), evidence,
                         trace=self.clock.of("query"))

    def close(self) -> None:
        memory, self.memory = self.memory, None
        if memory is None:
            return
        client = getattr(getattr(memory, "vector_store", None), "client", None)
        if client is not None:
            client.close()  # releases the embedded Qdrant's lock on its folder
        db = getattr(memory, "db", None)
        if db is not None and hasattr(db, "close"):
            db.close()
