"""Mem0 (PyPI `mem0ai` 1.x): extract facts, then ADD/UPDATE/DELETE them against retrieved memories.

Driven as Mem0's own LoCoMo evaluation drives it (mem0ai/mem0 `evaluation/src/memzero/add.py` and
`search.py`, see baselines/README.md): a conversation between two named people is written to one store
per speaker, each speaker in turn the `user` and the other the `assistant`, every message `Name: text`,
two messages per add, with an instruction to name people instead of saying "user"; a question searches
both stores, `top_k` memories each, and the answer model sees each speaker's memories under their name,
in the conversation's speaker order (speaker_a first). User/assistant data (LongMemEval) goes to one
store with the dataset's roles. Those scripts call Mem0's hosted platform (`MemoryClient`); the OSS
library (`Memory`) stands in for it here.

Embedded Qdrant under the workdir; chat and embeddings through OpenAI-compatible endpoints (the logging
proxy); questions are embedded in the served endpoint's query form. Each add carries metadata
{session_id, session_date, turn_ids}. Mem0 1.x writes "Today's date is <import day>" into its
extraction prompts; the adapter substitutes the session's date for each add, so no wall-clock date
reaches the model.

Build statistics: `input` (baselines.base.InputKept: every non-empty turn reaches an add of each store;
a turn whose add raised is lost, as are empty turns, which are never sent; `stored`: the memories the
stores hold at the end, listed through the library), `adds`, `failed_adds`, `events` (ADD/UPDATE/DELETE
results), and the chat calls counted per add (`chat_calls`, `update_calls`, `failed_update_calls`,
see protocol.CallCount).
"""

from __future__ import annotations

import contextlib
import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from baselines.base import Endpoints, EvidenceItem, InputKept, Retrieval, Session, Turn
from baselines.common import (
    PhaseClock,
    chat_role,
    chunks,
    day,
    named_text,
    query_embeddings,
    quiet_environment,
    require,
    safe_id,
)
from baselines.mem0.protocol import (
    EMPTY,
    FAILED_ADD,
    NAME_PEOPLE,
    CallCount,
    Store,
    conversation_speakers,
    count_all,
    ranked_hits,
    render_sections,
    speaker_stores,
)

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
    `speaker_stores`: a two-person conversation gets one store per speaker (Mem0's LoCoMo protocol; else
    one store, speaker_a its user). `instruction`: appended to the extraction prompt for per-speaker
    stores (None: none). `evidence_limit`: keep only the best this many memories over all stores (the
    shared-budget view; None: all)."""

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
        self.calls = CallCount()

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
        self.calls = CallCount()
        self.calls.wrap(self.memory.llm)

    def attach(self, instance_id: str, workdir: Path, sessions: Sequence[Session]) -> None:
        """Reopen a finished store (a resumed run): the stores follow from the sessions' speakers."""
        self.reset(instance_id, workdir)
        self.stores = self._stores(sessions)

    def _stores(self, sessions: Sequence[Session]) -> list[Store]:
        spoken = (t.speaker for s in sessions for t in s.turns)
        speakers = conversation_speakers((s.speakers for s in sessions), spoken)
        return speaker_stores(self.instance, speakers, safe_id, self.per_speaker)

    def ingest(self, sessions: Sequence[Session]) -> dict[str, Any]:
        assert self.memory is not None, "reset() first"
        import openai
        from mem0.exceptions import MemoryError as Mem0Error

        self.stores = self._stores(sessions)
        events: Counter[str] = Counter()
        adds: Counter[str] = Counter()
        lost: set[str] = set()  # turns carried by an add that raised
        failed, first_error = 0, None
        with self.clock.measure("ingest"):
            for session in sessions:
                turns = [t for t in session.turns if t.content.strip()]
                for store, piece in ((s, p) for s in self.stores for p in chunks(turns, self.batch_turns)):
                    adds[store.user_id] += 1
                    try:
                        result = self._add(session, store, piece)
                    except (openai.APIError, Mem0Error):
                        raise  # the endpoint's failures and Mem0's own errors end the build
                    except Exception as exc:  # model output that Mem0 does not guard against
                        failed, first_error = failed + 1, first_error or f"{type(exc).__name__}: {exc}"
                        lost.update(t.turn_id for t in piece)
                        continue
                    events.update(r.get("event", "?") for r in (result or {}).get("results", []))
        given = sum(len(s.turns) for s in sessions)
        empty = sum(1 for s in sessions for t in s.turns if not t.content.strip())
        kept = InputKept(given, given - empty - len(lost), "memories", self._stored(),
                         {k: n for k, n in ((EMPTY, empty), (FAILED_ADD, len(lost))) if n})
        stats = {"input": kept.to_dict(), "adds": sum(adds.values()), "adds_per_store": dict(adds),
                 "failed_adds": failed, "events": dict(events), **self.calls.to_dict(),
                 **self.clock.of("ingest")}
        return {**stats, "first_add_error": first_error} if first_error else stats

    def _add(self, session: Session, store: Store, piece: Sequence[Turn]) -> Any:
        """One Mem0 add of `piece` (turns of `session`) to `store`, under the session's date."""
        messages = [{"role": store.role(t.speaker) if store.speaker else chat_role(t),
                     "content": named_text(t)} for t in piece]
        metadata = {"session_id": session.session_id, "session_date": day(session.timestamp),
                    "turn_ids": [t.turn_id for t in piece]}
        self.calls.start_add()
        with extraction_prompts(session.timestamp, self.instruction if store.section else None):
            return self.memory.add(messages, user_id=store.user_id, metadata=metadata)

    def _stored(self) -> int:
        """The memories the stores hold, listed through Mem0 (`get_all`)."""
        def listing(user_id: str) -> Callable[[int], list[Any]]:
            return lambda limit: list(self.memory.get_all(user_id=user_id, limit=limit)["results"])

        return sum(count_all(listing(store.user_id)) for store in self.stores)

    def retrieve(self, question: str, when: datetime | None) -> Retrieval:
        assert self.memory is not None, "reset() first"
        found: list[tuple[Store, list[dict[str, Any]]]] = []
        with self.clock.measure("query"), query_embeddings(self.memory.embedding_model.client):
            for store in self.stores or self._stores([]):
                hits = self.memory.search(question, user_id=store.user_id, limit=self.top_k)
                found.append((store,
                              [hit_item(h)
                               for h in (hits.get("results", []) if isinstance(hits, dict) else hits)]))
        evidence = [EvidenceItem(**item) for item in ranked_hits(found, self.evidence_limit)]
        return Retrieval(self.render(evidence), evidence,
                         trace={**self.clock.of("query"),
                                "per_store": {s.user_id: len(items) for s, items in found}})

    def render(self, items: Sequence[EvidenceItem]) -> str:
        """The answer context of `items`: each speaker's memories under their name, in the conversation's
        speaker order, or one store's memories alone (protocol.render_sections)."""
        return render_sections([s.section for s in self.stores or self._stores([])],
                               ((e.section, e.time, e.text) for e in items))

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
