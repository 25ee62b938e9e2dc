"""Recording stand-ins of the upstream libraries the adapters drive (mem0ai 1.x, graphiti-core), for
tests only. Each mirrors the calls the adapter makes of the real API (names, arguments, result shapes)
and records what reaches it: messages, episodes, searches and every embeddings request, so that a
test can check each turn's text, its speaker and the query form without the real library or model.

`install(monkeypatch)` puts the stand-ins in `sys.modules` for one test; `Recorder` holds the calls.
"""

from __future__ import annotations

import importlib.machinery
import sys
import types
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest

TODAY = "Today's date is 2000-01-01."


@dataclass
class Recorder:
    adds: list[dict[str, Any]] = field(default_factory=list)  # mem0 Memory.add
    searches: list[dict[str, Any]] = field(default_factory=list)  # mem0 search / graphiti search_
    episodes: list[dict[str, Any]] = field(default_factory=list)  # graphiti add_episode
    embeddings: list[dict[str, Any]] = field(default_factory=list)  # every embeddings.create request
    mem0_fail_on: str | None = None  # mem0 add raises (as on unusable model output) for a message with this


class EmbeddingsResource:
    """`client.embeddings` of an OpenAI client: `create(**kwargs)` records the request."""

    def __init__(self, recorder: Recorder, asynchronous: bool = False) -> None:
        self.recorder, self.asynchronous = recorder, asynchronous

    def create(self, **kwargs: Any) -> Any:
        self.recorder.embeddings.append(kwargs)
        reply = types.SimpleNamespace(data=[types.SimpleNamespace(embedding=[0.1, 0.2])
                                            for _ in kwargs["input"]])
        if not self.asynchronous:
            return reply

        async def done() -> Any:
            return reply

        return done()


def _module(name: str, **attrs: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    module.__dict__.update(attrs)
    return module


# ---------------------------------------------------------------- mem0ai 1.x


def mem0_modules(recorder: Recorder) -> dict[str, types.ModuleType]:
    utils = _module("mem0.memory.utils", USER_MEMORY_EXTRACTION_PROMPT=f"Extract user facts. {TODAY}",
                    AGENT_MEMORY_EXTRACTION_PROMPT=f"Extract agent facts. {TODAY}",
                    FACT_RETRIEVAL_PROMPT=f"Extract facts. {TODAY}")

    class Memory:
        """mem0.Memory: `from_config`, `add(messages, user_id=, metadata=)` (an extraction call, then an
        update call, as 1.x makes them when it extracts facts), `search(query, user_id=, limit=)`,
        `get_all(user_id=, limit=)`."""

        def __init__(self, config: dict[str, Any]) -> None:
            self.config = config
            self.llm = types.SimpleNamespace(generate_response=lambda messages, **kwargs: "{}")
            self.embedding_model = types.SimpleNamespace(client=types.SimpleNamespace(
                embeddings=EmbeddingsResource(recorder)))
            self.vector_store = types.SimpleNamespace(client=types.SimpleNamespace(close=lambda: None))
            self.db = types.SimpleNamespace(close=lambda: None)
            self.stored: list[dict[str, Any]] = []

        @classmethod
        def from_config(cls, config: dict[str, Any]) -> Memory:
            return cls(config)

        def add(self, messages: list[dict[str, str]], *, user_id: str,
                metadata: dict[str, Any]) -> dict[str, Any]:
            recorder.adds.append({"messages": messages, "user_id": user_id, "metadata": metadata,
                                  "prompt": utils.USER_MEMORY_EXTRACTION_PROMPT})
            self.llm.generate_response(messages=[{"role": "system", "content": "extract"}])
            if recorder.mem0_fail_on and any(recorder.mem0_fail_on in m["content"] for m in messages):
                raise ValueError("unusable model output")
            self.llm.generate_response(messages=[{"role": "user", "content": "update"}])
            self.embedding_model.client.embeddings.create(input=[m["content"] for m in messages], model="m")
            memory = {"id": str(uuid.uuid4()), "memory": messages[0]["content"], "metadata": metadata,
                      "user_id": user_id, "score": 1.0 / (1 + len(self.stored))}
            self.stored.append(memory)
            return {"results": [{"event": "ADD", "memory": memory["memory"]}]}

        def search(self, query: str, *, user_id: str, limit: int) -> dict[str, Any]:
            self.embedding_model.client.embeddings.create(input=[query], model="m")
            recorder.searches.append({"query": query, "user_id": user_id, "limit": limit})
            return {"results": [m for m in self.stored if m["user_id"] == user_id][:limit]}

        def get_all(self, *, user_id: str, limit: int = 100) -> dict[str, Any]:
            return {"results": [m for m in self.stored if m["user_id"] == user_id][:limit]}

    memory = _module("mem0.memory", utils=utils)
    exceptions = _module("mem0.exceptions", MemoryError=type("MemoryError", (Exception,), {}))
    return {"mem0": _module("mem0", Memory=Memory, memory=memory, exceptions=exceptions,
                            __version__="1.0.11"),
            "mem0.memory": memory, "mem0.memory.utils": utils, "mem0.exceptions": exceptions}


# ---------------------------------------------------------------- graphiti-core 0.31.2


@dataclass
class SearchConfig:
    kind: str  # edges | nodes
    reranker: str
    limit: int = 10

    def model_copy(self, update: dict[str, Any]) -> SearchConfig:
        return SearchConfig(**{**vars(self), **update})


def graphiti_modules(recorder: Recorder) -> dict[str, types.ModuleType]:
    class CrossEncoderClient:
        pass

    class OpenAIEmbedder:
        def __init__(self, config: dict[str, Any]) -> None:
            self.config = config
            self.client = types.SimpleNamespace(embeddings=EmbeddingsResource(recorder, asynchronous=True))

    class Graphiti:
        def __init__(self, *, llm_client: Any, embedder: Any, cross_encoder: Any, graph_driver: Any) -> None:
            self.embedder, self.cross_encoder, self.driver = embedder, cross_encoder, graph_driver
            self.edges: list[Any] = []

        async def add_episode(self, **kwargs: Any) -> Any:
            recorder.episodes.append(kwargs)
            await self.embedder.client.embeddings.create(input=[kwargs["episode_body"]], model="m")
            episode = types.SimpleNamespace(uuid=str(uuid.uuid4()))
            edge = types.SimpleNamespace(fact=f"fact of {kwargs['name']}", valid_at=kwargs["reference_time"],
                                         invalid_at=None, episodes=[episode.uuid])
            self.edges.append(edge)
            return types.SimpleNamespace(episode=episode, nodes=[], edges=[edge])

        async def search_(self, query: str, *, config: SearchConfig, group_ids: list[str]) -> Any:
            await self.embedder.client.embeddings.create(input=[query], model="m")
            recorder.searches.append({"query": query, "kind": config.kind, "reranker": config.reranker,
                                      "limit": config.limit, "group_ids": group_ids})
            if config.kind == "edges":
                edges = self.edges[: config.limit]
                return types.SimpleNamespace(edges=edges, edge_reranker_scores=[1.0] * len(edges))
            nodes = [types.SimpleNamespace(name="Nadia", summary="sails on a lake")][: config.limit]
            return types.SimpleNamespace(nodes=nodes, node_reranker_scores=[1.0] * len(nodes))

        async def close(self) -> None:
            pass

    class KuzuDriver:
        def __init__(self, db: str) -> None:
            async def build(driver: Any) -> None:
                return None

            self.graph_ops = types.SimpleNamespace(build_indices_and_constraints=build)

    class ModelError(Exception):
        pass

    class EpisodicNode:
        @classmethod
        async def get_by_group_ids(cls, driver: Any, group_ids: list[str]) -> list[dict[str, Any]]:
            return [e for e in recorder.episodes if e["group_id"] in group_ids]

    recipes = _module("graphiti_core.search.search_config_recipes",
                      EDGE_HYBRID_SEARCH_RRF=SearchConfig("edges", "rrf"),
                      NODE_HYBRID_SEARCH_RRF=SearchConfig("nodes", "rrf"))
    names: dict[str, dict[str, Any]] = {
        "graphiti_core": {"Graphiti": Graphiti},
        "graphiti_core.embedder": {},
        "graphiti_core.embedder.openai": {"OpenAIEmbedder": OpenAIEmbedder, "OpenAIEmbedderConfig": dict},
        "graphiti_core.llm_client": {},
        "graphiti_core.llm_client.config": {"LLMConfig": dict},
        "graphiti_core.llm_client.openai_generic_client": {"OpenAIGenericClient": lambda *a, **k: None},
        "graphiti_core.llm_client.errors": {"EmptyResponseError": ModelError, "RefusalError": ModelError},
        "graphiti_core.driver": {},
        "graphiti_core.driver.kuzu_driver": {"KuzuDriver": KuzuDriver},
        "graphiti_core.cross_encoder": {},
        "graphiti_core.cross_encoder.client": {"CrossEncoderClient": CrossEncoderClient},
        "graphiti_core.nodes": {"EpisodeType": types.SimpleNamespace(message="message"),
                                "EpisodicNode": EpisodicNode},
        "graphiti_core.search": {},
        "kuzu": {},
    }
    modules = {name: _module(name, **attrs) for name, attrs in names.items()}
    modules[recipes.__name__] = recipes
    return modules


def install(monkeypatch: pytest.MonkeyPatch, recorder: Recorder) -> None:
    """Put the stand-ins of mem0ai 1.x and graphiti-core in `sys.modules` for this test."""
    for name, module in {**mem0_modules(recorder), **graphiti_modules(recorder)}.items():
        monkeypatch.setitem(sys.modules, name, module)
