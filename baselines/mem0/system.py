"""Mem0 (PyPI `mem0ai` 1.x): extract facts, then ADD/UPDATE/DELETE them against retrieved memories.

Driven as Mem0's own LoCoMo evaluation drives it (mem0ai/mem0 `evaluation/src/memzero/add.py` and
`search.py`, see baselines/README.md): a conversation between two named people is written to one store
per speaker, each speaker in turn the `user` and the other the `assistant`, every message `Name: text`,
two messages per add, with an instruction to name people instead of saying "user"; a question searches
both stores, `top_k` memories each, and the answer model sees each speaker's memories under their name.
User/assistant data (LongMemEval) goes to one store with the dataset's roles.

Embedded Qdrant under the workdir; chat and embeddings through OpenAI-compatible endpoints (the logging
proxy); questions are embedded in the served endpoint's query form. Each add carries metadata
{session_id, session_date, turn_ids}. Mem0 1.x writes "Today's date is <import day>" into its
extraction prompts; the adapter substitutes the session's date for each add, so no wall-clock date
reaches the model.
"""

from __future__ import annotations

import contextlib
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from baselines.base import Endpoints, EvidenceItem, Retrieval, Session
from baselines.common import (
    PhaseClock,
    chat_role,
    chunks,
    day,
    named_speakers,
    named_text,
    query_embeddings,
    quiet_environment,
    require,
    safe_id,
)
from baselines.mem0.protocol import NAME_PEOPLE, Store, render_stores, speaker_stores

_TODAY = re.compile(r"Today's date is \d{4}-\d{2}-\d{2}")
_PROMPTS = ("USER_MEMORY_EXTRACTION_PROMPT", "AGENT_MEMORY_EXTRACTION_PROMPT", "FACT_RETRIEVAL_PROMPT")


@contextlib.contextmanager
def extraction_prompts(when: datetime, instruction: str | None) -> Iterator[None]:
    """Mem0's extraction prompts with `when` as today's date and `instruction` appended (Mem0 1.x has
    no `custom_instructions` outside its hosted platform), for the duration of one add."""
    import mem0.memory.utils as prompts

    saved = {name: getattr(prompts, name) for name in _PROMPTS if hasattr(prompts, name)}
    for name, text in saved.items():
        dated = _TODAY.sub(f"Today's date is {when:%Y-%m-%d}", text)
        setattr(prompts, name, f"{dated}\n\n{instruction}" if instruction else dated)
    try:
        yield
    finally:
        for name, text in saved.items():
            setattr(prompts, name, text)


def hit_item(hit: dict[str, Any]) -> dict[str, Any]:
    """A Mem0 search hit as an evidence record (the fields of EvidenceItem)."""
    meta = hit.get("metadata") or {}
    return {"text": hit.get("memory", ""), "time": meta.get("session_date"), "score": hit.get("score"),
            "session_ids": [meta["session_id"]] if meta.get("session_id") else [],
            "turn_ids": [str(t) for t in meta.get("turn_ids") or []]}


class Mem0System:
    """`top_k`: memories searched per store (30: Mem0's evaluation default, `run_experiments.py`). The
    Mem0 paper's s = 10 is not a retrieval budget: it is the update neighbourhood, the similar memories a
    newly extracted fact is compared with (1.x's code takes 5 per fact).
    `speaker_stores`: a two-person conversation gets one store per speaker (Mem0's LoCoMo protocol).
    `instruction`: appended to the extraction prompt for those stores (None: none). `evidence_limit`:
    keep only the best this many memories over all stores (the shared-budget view; None: all)."""

    def __init__(self, endpoints: Endpoints, *, top_k: int = 30, batch_turns: int = 2,
                 temperature: float = 0.0, max_tokens: int = 2000, speaker_stores: bool = True,
                 instruction: str | None = NAME_PEOPLE, evidence_limit: int | None = None,
                 name: str = "mem0") -> None:
        require("mem0", name, "mem0")
        self.name = name
        e = endpoints
        self.llm = {"model": e.chat_model, "openai_base_url": e.base_url, "api_key": e.api_key,
                    "temperature": temperature, "max_tokens": max_tokens}
        self.embed = {"model": e.embed_model, "openai_base_url": e.base_url, "api_key": e.api_key,
                      "embedding_dims": e.embed_dim}
        self.dims, self.top_k, self.batch_turns = e.embed_dim, top_k, batch_turns
        self.per_speaker, self.instruction, self.evidence_limit = speaker_stores, instruction, evidence_limit
        self.clock = PhaseClock()
        self.memory: Any = None
        self.instance = "user"
        self.stores: list[Store] = []

    def reset(self, instance_id: str, workdir: Path) -> None:
        self.close()
        workdir = Path(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        self.instance, self.stores = safe_id(instance_id), []
        with quiet_environment():  # Mem0 reads its telemetry switch when first imported
            from mem0 import Memory

            self.memory = Memory.from_config({
                "llm": {"provider": "openai", "config": self.llm},
                "embedder": {"provider": "openai", "config": self.embed},
                "vector_store": {"provider": "qdrant", "config": {
                    "collection_name": "mem0", "embedding_model_dims": self.dims,
                    "path": str(workdir / "qdrant"), "on_disk": True}},
                "history_db_path": str(workdir / "history.db"),
            })

    def attach(self, instance_id: str, workdir: Path, sessions: Sequence[Session]) -> None:
        """Reopen a finished store (a resumed run): the stores follow from the sessions' speakers."""
        self.reset(instance_id, workdir)
        self.stores = self._stores(sessions)

    def _stores(self, sessions: Sequence[Session]) -> list[Store]:
        speakers = named_speakers(sessions) if self.per_speaker else []
        return speaker_stores(self.instance, speakers, safe_id)

    def ingest(self, sessions: Sequence[Session]) -> dict[str, Any]:
        assert self.memory is not None, "reset() first"
        self.stores = self._stores(sessions)
        events: Counter[str] = Counter()
        adds: Counter[str] = Counter()
        with self.clock.measure("ingest"):
            for session in sessions:
                turns = [t for t in session.turns if t.content.strip()]
                for store in self.stores:
                    for piece in chunks(turns, self.batch_turns):
                        messages = [{"role": store.role(t.speaker) if store.speaker else chat_role(t),
                                     "content": named_text(t)} for t in piece]
                        metadata = {"session_id": session.session_id, "session_date": day(session.timestamp),
                                    "turn_ids": [t.turn_id for t in piece]}
                        instruction = self.instruction if store.speaker else None
                        with extraction_prompts(session.timestamp, instruction):
                            result = self.memory.add(messages, user_id=store.user_id, metadata=metadata)
                        events.update(r.get("event", "?") for r in (result or {}).get("results", []))
                        adds[store.user_id] += 1
        return {"adds": sum(adds.values()), "adds_per_store": dict(adds), "events": dict(events),
                **self.clock.of("ingest")}

    def retrieve(self, question: str, when: datetime | None) -> Retrieval:
        assert self.memory is not None, "reset() first"
        found: list[tuple[Store, list[dict[str, Any]]]] = []
        with self.clock.measure("query"), query_embeddings(self.memory.embedding_model.client):
            for store in self.stores or self._stores([]):
                hits = self.memory.search(question, user_id=store.user_id, limit=self.top_k)
                found.append((store,
                              [hit_item(h)
                               for h in (hits.get("results", []) if isinstance(hits, dict) else hits)]))
        context, kept = render_stores(found, self.evidence_limit)
        return Retrieval(context, [EvidenceItem(**item) for item in kept],
                         trace={**self.clock.of("query"),
                                "per_store": {s.user_id: len(items) for s, items in found}})

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
