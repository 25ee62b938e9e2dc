"""MemoryOS (PyPI `memoryos-pro` 0.1.0) driven as MemoryOS's own evaluation drives it (github
BAI-LAB/MemoryOS `eval/main_loco_parse.py`): QA pages paired as its script pairs them, no page one-sided
(`protocol.pair_pages`), the paper's settings (short-term queue 7, top-m segments 5, top-k pages 10,
knowledge top-k 10; see `protocol.PAPER_SETTINGS`; the authors' script sets a short-term queue of 1,
`protocol.EVAL_SCRIPT_SETTINGS`), the evaluation's retrieval thresholds (0.1), and its answer context with
each page's `meta_info` (`protocol.render_items`).

Installed without its pins (faiss-gpu, numpy==1.24); it runs on faiss-cpu. The adapter patches three
things inside the library, and nothing else:
- embeddings: `get_embedding` (which would load a sentence-transformers model by hub name) calls our
  Embedder over the served endpoint; the question is embedded as a query (with `query_prefix`, the
  run's embedder instruction, as every system's questions are), everything else as passages;
- time: `get_timestamp` returns the time of the page being written (the question date at query time),
  so heat, recency and knowledge stamps follow the dataset's clock, not the wall clock;
- model name: every chat call uses the configured model (the library sends some with a hard-coded
  "gpt-4o-mini", which a real server would reject).
The pending short-term queue is flushed into mid-term memory at the end of `ingest`, inside the timed
build (upstream answers with the queue's last pages as "recent conversation"; here they are retrievable).
The build's `input` counts the turns in the pages mid-term memory holds after that flush, and the turns
lost by reason (`protocol.NO_OPENER`, `NO_REPLY`, `EMPTY`: as upstream loses them; `MISSING`: not).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from baselines.base import Endpoints, EvidenceItem, InputKept, Retrieval, Session
from baselines.common import PhaseClock, quiet_environment, require, safe_id
from baselines.memoryos.protocol import (
    MISSING,
    PAPER_SETTINGS,
    PROFILE,
    SHORT_TERM,
    TOP_K_KNOWLEDGE,
    TOP_K_PAGES,
    TOP_M_SEGMENTS,
    UPSTREAM_REASONS,
    Page,
    Pairing,
    Parties,
    evidence_items,
    page_text,
    pair_pages,
    parties,
    render_items,
)
from memforest.config import EmbedderConfig
from memforest.llm.base import Embedder, EmbedKind
from memforest.llm.embedders import OpenAIEmbedder

CLOCK_FORMAT = "%Y-%m-%d %H:%M:%S"
_MODULES = ("utils", "memoryos", "mid_term", "long_term", "short_term", "updater", "retriever")
P = PAPER_SETTINGS


class MemoryOSSystem:
    """Defaults are the paper's settings (`configs/method/memoryos_eval.yaml` sets the authors' script's);
    `query_prefix` is the run's embedder query instruction (the
    harness passes `${embedder.query_prefix}`), applied to the question only."""

    def __init__(self, endpoints: Endpoints, *, short_term_capacity: int = SHORT_TERM,
                 top_k_sessions: int = TOP_M_SEGMENTS, retrieval_queue_capacity: int = TOP_K_PAGES,
                 segment_threshold: float = P["segment_threshold"],
                 page_threshold: float = P["page_threshold"],
                 knowledge_threshold: float = P["knowledge_threshold"],
                 top_k_knowledge: int = TOP_K_KNOWLEDGE,
                 mid_term_capacity: int = 2000, long_term_knowledge_capacity: int = 100,
                 heat_threshold: float = P["heat_threshold"],
                 similarity_threshold: float = P["similarity_threshold"], query_prefix: str = "",
                 name: str = "memoryos") -> None:
        require("memoryos", name, "memoryos")
        require("faiss", name, "memoryos")
        self.name = name
        e = endpoints
        self.llm_base_url, self.llm_model, self.api_key = e.base_url, e.chat_model, e.api_key
        self.embedder: Embedder = OpenAIEmbedder(EmbedderConfig(backend="openai", base_url=e.base_url,
                                                                model=e.embed_model, dim=e.embed_dim,
                                                                query_prefix=query_prefix))
        self.search = dict(top_k_sessions=top_k_sessions, segment_similarity_threshold=segment_threshold,
                           page_similarity_threshold=page_threshold, knowledge_threshold=knowledge_threshold,
                           top_k_knowledge=top_k_knowledge)
        self.settings = dict(short_term_capacity=short_term_capacity, mid_term_capacity=mid_term_capacity,
                             long_term_knowledge_capacity=long_term_knowledge_capacity,
                             retrieval_queue_capacity=retrieval_queue_capacity,
                             mid_term_heat_threshold=heat_threshold,
                             mid_term_similarity_threshold=similarity_threshold)
        self.clock = PhaseClock()
        self.now = datetime(2000, 1, 1)
        self.mos: Any = None
        self.log_path: Path | None = None
        self.who = Parties("user", "Assistant", "User", False)
        # each page sent, by what the library keeps of it (input, response, time); a list, since two
        # pages of one session may read the same
        self.pages: dict[tuple[str, str, str], list[Page]] = {}
        self._vectors: dict[str, np.ndarray] = {}
        self._kind: EmbedKind = "passage"

    # ------------------------------------------------------------------ the three patches

    def _embedding(self, text: str, model_name: str | None = None, use_cache: bool = True) -> np.ndarray:
        if self._kind == "query":
            return self.embedder.embed([text], kind="query")[0]
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
        with quiet_environment(), self._inside():
            from memoryos import Memoryos

            self.mos = Memoryos(user_id=safe_id(instance_id), openai_api_key=self.api_key,
                                openai_base_url=self.llm_base_url,
                                data_storage_path=str(workdir / "memoryos"), llm_model=self.llm_model,
                                **self.settings)
        client, chat = self.mos.client, self.mos.client.chat_completion
        client.chat_completion = lambda model, messages, **kw: chat(self.llm_model, messages, **kw)

    def ingest(self, sessions: Sequence[Session]) -> dict[str, Any]:
        assert self.mos is not None, "reset() first"
        self.who = parties(sessions)
        pairing = pair_pages(sessions, self.who)
        with self.clock.measure("ingest"), self._inside():
            for page in pairing.pages:
                self.now = page.time
                key = (page.user_input, page.agent_response, self._timestamp())
                self.pages.setdefault(key, []).append(page)
                self.mos.add_memory(page.user_input, page.agent_response, timestamp=key[2])
            self._flush()
        return {"qa_pairs": len(pairing.pages), "paired_by": "speaker" if self.who.by_speaker else "role",
                "mid_term_sessions": len(self.mos.mid_term_memory.sessions),
                "user_knowledge": len(self.mos.user_long_term_memory.get_user_knowledge()),
                "input": self._input_kept(pairing).to_dict(), **self.clock.of("ingest")}

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

    def _input_kept(self, pairing: Pairing) -> InputKept:
        """The turns in the pages mid-term memory holds (one page may sit in several of its segments),
        counted against what was given; a page sent and not held loses its turns as `MISSING`."""
        held: Counter[tuple[str, str, str]] = Counter()
        seen: set[str] = set()
        for segment in self.mos.mid_term_memory.sessions.values():
            for page in segment.get("details", []):
                if page.get("page_id") not in seen:
                    seen.add(page.get("page_id"))
                    held[(page.get("user_input", ""), page.get("agent_response", ""),
                          page.get("timestamp", ""))] += 1
        lost = {reason: len(turns) for reason, turns in pairing.lost.items()}
        kept = 0
        for key, pages in self.pages.items():
            kept += sum(len(p.turn_ids) for p in pages[:held[key]])
            missing = sum(len(p.turn_ids) for p in pages[held[key]:])
            if missing:
                lost[MISSING] = lost.get(MISSING, 0) + missing
        return InputKept(pairing.given, kept, "pages", len(seen), lost,
                         upstream=set(lost) <= UPSTREAM_REASONS)

    def retrieve(self, question: str, when: datetime | None) -> Retrieval:
        assert self.mos is not None, "reset() first"
        self.now = when or self.now
        with self.clock.measure("query"), self._inside():
            self._kind = "query"
            try:
                found = self.mos.retriever.retrieve_context(user_query=question, user_id=self.mos.user_id,
                                                            **self.search)
            finally:
                self._kind = "passage"
            profile = self.mos.user_long_term_memory.get_raw_user_profile(self.mos.user_id)
            assistant = list(self.mos.assistant_long_term_memory.get_assistant_knowledge())
        pages = [self._page_item(page) for page in found["retrieved_pages"]]
        evidence = evidence_items(self.who, pages, profile if profile and profile.lower() != "none" else None,
                                  found["retrieved_user_knowledge"], assistant)
        return Retrieval(self.render(evidence), evidence, trace={
            **self.clock.of("query"), "pages": len(pages),
            "pages_with_meta_info": sum(1 for p in found["retrieved_pages"] if p.get("meta_info")),
            "profile": any(e.section == PROFILE for e in evidence),
            "user_knowledge": len(found["retrieved_user_knowledge"]), "assistant_knowledge": len(assistant)})

    def _page_item(self, page: dict[str, Any]) -> EvidenceItem:
        """A retrieved page with the sessions and turns of the pages sent that read as it does."""
        key = (page.get("user_input", ""), page.get("agent_response", ""), page.get("timestamp", ""))
        sent = self.pages.get(key, [])
        sessions = list(dict.fromkeys(s for p in sent for s in p.session_ids))
        turns = list(dict.fromkeys(t for p in sent for t in p.turn_ids))
        return EvidenceItem(page_text(self.who, page), page.get("timestamp"), sessions, turns)

    def render(self, items: Sequence[EvidenceItem]) -> str:
        """MemoryOS's context for a subset of its evidence items (`protocol.render_items`)."""
        return render_items(self.who, items)

    def close(self) -> None:
        mos, self.mos = self.mos, None
        if mos is not None:
            mos.client.executor.shutdown(wait=True)
