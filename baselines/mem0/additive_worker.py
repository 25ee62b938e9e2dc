"""Mem0 2.x worker: runs in an environment with PyPI `mem0ai>=2,<3`, which has the same package name as
the Mem0 1.x of this project's environment, and answers the protocol of baselines/worker.py. It imports
the standard library and mem0 only.

hello options: `llm_base_url`, `llm_model`, `embed_base_url`, `embed_model`, `embed_dims`, `api_key`,
`temperature`, `max_tokens`, `top_k`, `speaker_top_k`, `batch_turns`, `speaker_batch_turns`,
`threshold`, `speaker_stores`, `instruction`, `evidence_limit` (all sent by `mem0_additive_system`).

Mem0's evaluation layouts (baselines/mem0/protocol.py): a two-person conversation (its speakers in the
order the sessions declare them, speaker_a first) gets one store per speaker, roles reversed, the
`instruction` as each add's `prompt` (`speaker_stores`, Mem0's 1.x scripts), or one store with
speaker_a as the user (memory-benchmarks); its adds carry `speaker_batch_turns` turns and each store is
searched with `speaker_top_k`. User/assistant data: one store, the dataset's roles, `batch_turns` turns
per add, searched with `top_k`. Embedded Qdrant (and Mem0's SQLite history) under each instance's
workdir; chat and embeddings through the OpenAI-compatible endpoints given (the harness's logging
proxy), questions embedded in the served endpoint's query form; adds carry metadata {session_id,
session_date, turn_ids}. Evidence records carry their store's `section` and their `rank` over all
stores; `retrieve` returns the stores' `sections` in order instead of a context, and the harness side
lays the evidence out (`Mem0AdditiveSystem.render`, protocol.render_sections).
Mem0 2.x's extraction prompt has an "Observation Date" and a "Current Date", both the wall-clock day
unless the caller gives them (its own `timestamp` argument is refused outside the hosted platform);
each add runs with the session's day in both, and the session time is each new memory's `created_at`.

Mem0 2.x ranks by embedding similarity, plus BM25 when fastembed can load its model and entity
boosts when spaCy's `en_core_web_sm` is installed; `hello` reports whether those two packages are, and
the harness warns and records it when either ranking signal is off.
When that spaCy model is absent the worker tells Mem0 so up front, so that Mem0 does not try to
download it.
Build statistics carry the mem0ai version, which this project's own package list cannot see, `input`
(baselines.base.InputKept's fields: turns given, kept, lost by reason, and the memories the stores hold
at the end, listed through Mem0's `get_all`) and the chat calls counted per add (protocol.CallCount).
One add whose model output Mem0 cannot use (an exception other than Mem0's own errors or the
endpoint's) is counted in `failed_adds`, with the first such error, its turns as lost, and the ingest
goes on.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any


def _load(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


protocol = _load("worker_protocol", Path(__file__).resolve().parents[1] / "worker.py")
mem0_protocol = _load("mem0_protocol", Path(__file__).with_name("protocol.py"))

@contextlib.contextmanager
def observation_day(day: str) -> Iterator[None]:
    """Mem0's extraction prompt with `day` as its observation and current date, for one add."""
    import mem0.memory.main as main

    original = main.generate_additive_extraction_prompt
    main.generate_additive_extraction_prompt = functools.partial(original, current_date=day, timestamp=day)
    try:
        yield
    finally:
        main.generate_additive_extraction_prompt = original


def optional_features() -> dict[str, bool]:
    """Whether the packages of Mem0 2.x's optional ranking signals are installed; a missing spaCy
    model is marked as failed to load, so that Mem0 does not try to download it."""
    spacy_model = (
        importlib.util.find_spec("spacy") is not None
        and importlib.util.find_spec("en_core_web_sm") is not None
    )
    if not spacy_model:
        import mem0.utils.spacy_models as spacy_models

        spacy_models._load_failed_full = spacy_models._load_failed_lemma = True
    return {"spacy_model": spacy_model, "fastembed": importlib.util.find_spec("fastembed") is not None}


def batches(items: list[Any], size: int) -> Iterator[list[Any]]:
    step = size if size > 0 else max(len(items), 1)
    for start in range(0, len(items), step):
        yield items[start : start + step]


def message(turn: dict[str, Any], store: Any) -> dict[str, str]:
    """A turn as a Mem0 message: a named speaker attached once as `Name: `; in a speaker store the
    store's speaker is the user, else the dataset's role."""
    text = f"{turn['speaker']}: {turn['content']}" if turn.get("speaker") else turn["content"]
    if store.speaker is not None:
        return {"role": store.role(turn.get("speaker")), "content": text}
    return {"role": "assistant" if turn["role"] == "assistant" else "user", "content": text}


@contextlib.contextmanager
def query_embeddings(client: Any) -> Iterator[None]:
    """The served embeddings endpoint's query form for every request of `client` while active."""
    resource = client.embeddings
    original = resource.create
    resource.create = functools.partial(original, extra_body={"input_type": "query"})
    try:
        yield
    finally:
        resource.create = original


def speakers_of(sessions: list[dict[str, Any]]) -> list[str]:
    return mem0_protocol.conversation_speakers((s.get("speakers") or [] for s in sessions),
                                               (t.get("speaker") for s in sessions for t in s["turns"]))


def hit_item(hit: dict[str, Any]) -> dict[str, Any]:
    meta = hit.get("metadata") or {}
    return {
        "text": hit.get("memory", ""),
        "time": meta.get("session_date"),
        "score": hit.get("score"),
        "session_ids": [meta["session_id"]] if meta.get("session_id") else [],
        "turn_ids": [str(t) for t in meta.get("turn_ids") or []],
    }


class Mem0Worker:
    def __init__(self) -> None:
        self.options: dict[str, Any] = {}
        self.memory: Any = None
        self.user, self.version = "user", ""
        self.stores: list[Any] = []
        self.passed_through: tuple[type[BaseException], ...] = ()
        self.calls: Any = mem0_protocol.CallCount()

    def hello(self, options: dict[str, Any]) -> dict[str, Any]:
        import mem0  # fails here when the environment has no mem0ai
        import openai
        from mem0.exceptions import MemoryError as Mem0Error

        version = str(mem0.__version__)
        if version.split(".")[0] != "2":
            raise RuntimeError(
                f"mem0ai {version} is installed in this environment; this worker needs mem0ai>=2,<3"
            )
        self.options, self.version = options, version
        self.passed_through = (Mem0Error, openai.APIError)
        return {"name": "mem0", "mem0ai": version, **optional_features()}

    def reset(self, instance_id: str, workdir: str) -> dict[str, Any]:
        from mem0 import Memory

        self.close()
        o, root = self.options, Path(workdir)
        self.user, self.stores = protocol.UNSAFE_ID.sub("_", instance_id) or "user", []
        self.memory = Memory.from_config(
            {
                "llm": {
                    "provider": "openai",
                    "config": {
                        "model": o["llm_model"],
                        "openai_base_url": o["llm_base_url"],
                        "api_key": o.get("api_key", "local"),
                        "temperature": o.get("temperature", 0.0),
                        "max_tokens": o.get("max_tokens", 2000),
                    },
                },
                "embedder": {
                    "provider": "openai",
                    "config": {
                        "model": o["embed_model"],
                        "openai_base_url": o["embed_base_url"],
                        "api_key": o.get("api_key", "local"),
                        "embedding_dims": o["embed_dims"],
                    },
                },
                "vector_store": {
                    "provider": "qdrant",
                    "config": {
                        "collection_name": "mem0",
                        "embedding_model_dims": o["embed_dims"],
                        "path": str(root / "qdrant"),
                        "on_disk": True,
                    },
                },
                "history_db_path": str(root / "history.db"),
            }
        )
        self.calls = mem0_protocol.CallCount()
        self.calls.wrap(self.memory.llm)
        return {}

    def _stores(self, sessions: list[dict[str, Any]]) -> list[Any]:
        return mem0_protocol.speaker_stores(self.user, speakers_of(sessions),
                                            lambda s: protocol.UNSAFE_ID.sub("_", s) or "x",
                                            bool(self.options.get("speaker_stores", True)))

    def add_batch(self, session: dict[str, Any], turns: list[dict[str, Any]],
                  store: Any) -> list[dict[str, Any]]:
        when = datetime.fromisoformat(session["timestamp"])
        metadata = {
            "session_id": session["session_id"],
            "session_date": when.strftime("%Y-%m-%d %H:%M"),
            "turn_ids": [t["turn_id"] for t in turns],
            "created_at": when.isoformat(),
        }
        prompt = (self.options.get("instruction") or None) if store.section is not None else None
        self.calls.start_add()
        with observation_day(when.strftime("%Y-%m-%d")):
            result = self.memory.add([message(t, store) for t in turns], user_id=store.user_id,
                                     metadata=metadata, prompt=prompt)
        return list((result or {}).get("results", []))

    def ingest(self, sessions: list[dict[str, Any]]) -> dict[str, Any]:
        assert self.memory is not None, "reset first"
        self.stores = self._stores(sessions)
        conversation = self.stores[0].speaker is not None
        size = int(self.options.get("speaker_batch_turns" if conversation else "batch_turns", 2))
        wall, cpu = time.perf_counter(), time.process_time()
        adds, failed, memories, first_error = 0, 0, 0, None
        lost: set[str] = set()  # turns carried by an add that raised
        for session in sessions:
            turns = [t for t in session["turns"] if t["content"].strip()]
            for store in self.stores:
                for batch in batches(turns, size):
                    adds += 1
                    try:
                        memories += len(self.add_batch(session, batch, store))
                    except self.passed_through:
                        raise
                    except Exception as exc:  # model output that Mem0 does not guard against
                        failed += 1
                        first_error = first_error or f"{type(exc).__name__}: {exc}"
                        lost.update(t["turn_id"] for t in batch)
        given = sum(len(s["turns"]) for s in sessions)
        empty = sum(1 for s in sessions for t in s["turns"] if not t["content"].strip())
        stats = {
            "mem0ai": self.version,
            "input": mem0_protocol.input_kept(given, empty, len(lost), self.stored()),
            "stores": len(self.stores),
            "adds": adds,
            "failed_adds": failed,
            "memories_added": memories,
            **self.calls.to_dict(),
            "ingest_wall_seconds": round(time.perf_counter() - wall, 4),
            "ingest_cpu_seconds": round(time.process_time() - cpu, 4),
        }
        return {**stats, "first_add_error": first_error} if first_error else stats

    def stored(self) -> int:
        """The memories the stores hold, listed through Mem0 (`get_all`)."""

        def listing(user_id: str) -> Any:
            return lambda n: self.memory.get_all(filters={"user_id": user_id}, top_k=n)["results"]

        return sum(mem0_protocol.count_all(listing(store.user_id)) for store in self.stores)

    def retrieve(self, question: str, when: str | None) -> dict[str, Any]:
        assert self.memory is not None, "reset first"
        wall, cpu = time.perf_counter(), time.process_time()
        stores = self.stores or self._stores([])
        key = "speaker_top_k" if stores[0].speaker is not None else "top_k"
        found = []
        with query_embeddings(self.memory.embedding_model.client):
            for store in stores:
                hits = self.memory.search(question, top_k=int(self.options.get(key, 20)),
                                          filters={"user_id": store.user_id},
                                          threshold=float(self.options.get("threshold", 0.1)))
                found.append((store, [hit_item(h) for h in hits.get("results", [])]))
        evidence = mem0_protocol.ranked_hits(found, self.options.get("evidence_limit"))
        trace = {
            "query_wall_seconds": round(time.perf_counter() - wall, 4),
            "query_cpu_seconds": round(time.process_time() - cpu, 4),
            "per_store": {s.user_id: len(items) for s, items in found},
        }
        # no context: the harness side renders the evidence in the stores' sections (`render`)
        return {"evidence": evidence, "sections": [s.section for s in stores], "trace": trace}

    def close(self) -> dict[str, Any]:
        memory, self.memory = self.memory, None
        if memory is not None:
            client = getattr(getattr(memory, "vector_store", None), "client", None)
            if client is not None:
                client.close()  # releases the embedded Qdrant's lock on its folder
            memory.close()
        return {}


if __name__ == "__main__":
    protocol.serve(Mem0Worker())
