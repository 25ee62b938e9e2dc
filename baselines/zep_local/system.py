"""Zep Local: Graphiti (PyPI `graphiti-core`) on the embedded Kuzu database, or on Neo4j when a URI is
configured. One episode per session (or per `episode_turns` turns), with the session's timestamp as
its reference time. Search is Graphiti's combined hybrid recipe with a limit of `limit` per evidence
class (edges, nodes, episodes, communities). Its reranker is `EmbeddingReranker` (cosine similarity on
our embedder), because Graphiti's default reranker reads OpenAI log-probabilities that other servers
do not return. Chat goes through `OpenAIGenericClient` in `json_object` mode (llama.cpp's server
refuses `json_schema`).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from baselines.base import Endpoints, EvidenceItem, Retrieval, Session
from baselines.common import PhaseClock, chunks, day, quiet_environment, render_turn, require, safe_id

quiet_environment()  # telemetry off before the library is ever imported


def utc(when: datetime) -> datetime:
    return when.replace(tzinfo=timezone.utc) if when.tzinfo is None else when


def make_reranker(embedder: Any) -> Any:
    """A Graphiti CrossEncoderClient ranking passages by embedding cosine similarity to the query."""
    from graphiti_core.cross_encoder.client import CrossEncoderClient

    class EmbeddingReranker(CrossEncoderClient):
        async def rank(self, query: str, passages: list[str]) -> list[tuple[str, float]]:
            if not passages:
                return []
            vectors = np.asarray(await embedder.create_batch([query, *passages]), dtype=np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True) + 1e-12
            scores = vectors[1:] @ vectors[0]
            return sorted(zip(passages, scores.tolist()), key=lambda x: -x[1])

    return EmbeddingReranker()


class ZepLocalSystem:
    def __init__(self, endpoints: Endpoints, *, limit: int = 10, episode_turns: int | None = None,
                 max_tokens: int = 8192, temperature: float = 0.0, neo4j_uri: str | None = None,
                 neo4j_user: str = "neo4j", neo4j_password_env: str = "NEO4J_PASSWORD",
                 name: str = "zep_local") -> None:
        require("graphiti_core", name, "zep")
        if neo4j_uri is None:
            require("kuzu", name, "zep")
        self.name = name
        e = endpoints
        self.llm: dict[str, Any] = dict(api_key=e.api_key, model=e.chat_model, small_model=e.chat_model,
                                        base_url=e.base_url, temperature=temperature, max_tokens=max_tokens)
        self.embed: dict[str, Any] = dict(api_key=e.api_key, base_url=e.base_url, embedding_model=e.embed_model,
                                          embedding_dim=e.embed_dim)
        self.limit, self.episode_turns = limit, episode_turns
        self.neo4j = (neo4j_uri, neo4j_user, neo4j_password_env)  # the password is read when connecting
        self.clock = PhaseClock()
        self.graph: Any = None
        self.group = "g"
        self.loop: asyncio.AbstractEventLoop | None = None
        self.episodes: dict[str, tuple[str, list[str]]] = {}  # episode uuid -> (session id, turn ids)

    def reset(self, instance_id: str, workdir: Path) -> None:
        self.close()
        from graphiti_core import Graphiti
        from graphiti_core.embedder.openai import OpenAIEmbedder, OpenAIEmbedderConfig
        from graphiti_core.llm_client.config import LLMConfig
        from graphiti_core.llm_client.openai_generic_client import OpenAIGenericClient

        Path(workdir).mkdir(parents=True, exist_ok=True)
        self.loop = asyncio.new_event_loop()
        embedder = OpenAIEmbedder(OpenAIEmbedderConfig(**self.embed))
        llm = OpenAIGenericClient(LLMConfig(**self.llm), max_tokens=int(self.llm["max_tokens"]),
                                  structured_output_mode="json_object")
        driver, self.group = self._driver(Path(workdir), safe_id(instance_id))
        self.graph = Graphiti(llm_client=llm, embedder=embedder, cross_encoder=make_reranker(embedder),
                              graph_driver=driver)
        self.episodes = {}
        self.loop.run_until_complete(self._prepare(driver))

    def _driver(self, workdir: Path, instance: str) -> tuple[Any, str]:
        """The graph database and the group id to write under.

        Kuzu: a fresh database file per instance, grouped by instance id. Neo4j: one shared database,
        so the group is the database's name (Graphiti would otherwise look for a database named after
        the group) and the graph is cleared on reset."""
        uri, user, password_env = self.neo4j
        if uri:
            from graphiti_core.driver.neo4j_driver import Neo4jDriver

            neo4j = Neo4jDriver(uri, user, os.environ.get(password_env))
            return neo4j, neo4j._database
        from graphiti_core.driver.kuzu_driver import KuzuDriver

        driver = KuzuDriver(db=str(workdir / "graph.kuzu"))
        driver._database = instance  # graphiti-core 0.31.2: KuzuDriver never sets it, add_episode reads it
        return driver, instance

    async def _prepare(self, driver: Any) -> None:
        if self.neo4j[0]:
            from graphiti_core.utils.maintenance.graph_data_operations import clear_data

            await self.graph.build_indices_and_constraints()
            await clear_data(driver)
        else:  # graphiti-core 0.31.2: KuzuDriver.build_indices_and_constraints is a no-op, so the
            # full-text indexes its search queries need are created by its own index builder here
            await driver.graph_ops.build_indices_and_constraints(driver)

    def ingest(self, sessions: Sequence[Session]) -> dict[str, Any]:
        assert self.graph is not None and self.loop is not None, "reset() first"
        from graphiti_core.llm_client.errors import EmptyResponseError, RefusalError
        from graphiti_core.nodes import EpisodeType

        counts, failures = {"episodes": 0, "nodes": 0, "edges": 0}, []
        with self.clock.measure("ingest"):
            for session in sessions:
                turns = [t for t in session.turns if t.content.strip()]
                for part, piece in enumerate(chunks(turns, self.episode_turns)):
                    name = f"{session.session_id}#{part}"
                    try:
                        result = self.loop.run_until_complete(self.graph.add_episode(
                            name=name, episode_body="\n".join(render_turn(t) for t in piece),
                            source_description="conversation session", reference_time=utc(session.timestamp),
                            source=EpisodeType.message, group_id=self.group))
                    except (ValueError, EmptyResponseError, RefusalError) as exc:
                        # Graphiti already retried the malformed output 4 times; a skipped episode is
                        # counted, as a failed add would be in a real deployment, and the build goes on.
                        failures.append(f"{name}: {type(exc).__name__}: {str(exc)[:200]}")
                        continue
                    self.episodes[result.episode.uuid] = (session.session_id, [t.turn_id for t in piece])
                    counts["episodes"] += 1
                    counts["nodes"] += len(result.nodes)
                    counts["edges"] += len(result.edges)
        return {**counts, "failed_episodes": len(failures), "failures": failures[:20], **self.clock.of("ingest")}

    def retrieve(self, question: str, when: datetime | None) -> Retrieval:
        assert self.graph is not None and self.loop is not None, "reset() first"
        from graphiti_core.search.search_config_recipes import COMBINED_HYBRID_SEARCH_CROSS_ENCODER

        config = COMBINED_HYBRID_SEARCH_CROSS_ENCODER.model_copy(update={"limit": self.limit})
        with self.clock.measure("query"):
            found = self.loop.run_until_complete(self.graph.search_(question, config=config, group_ids=[self.group]))
        evidence, sections = [], []
        for kind, items, scores in (("fact", found.edges, found.edge_reranker_scores),
                                    ("entity", found.nodes, found.node_reranker_scores),
                                    ("episode", found.episodes, found.episode_reranker_scores),
                                    ("community", found.communities, found.community_reranker_scores)):
            rows = [self._evidence(kind, item, score) for item, score in zip(items, list(scores) + [None] * len(items))]
            evidence += rows
            if rows:
                sections.append(f"{kind.upper()}S:\n" + "\n".join(f"- [{e.time}] {e.text}" for e in rows))
        return Retrieval("\n\n".join(sections), evidence, trace={**self.clock.of("query"),
                         "counts": {"edges": len(found.edges), "nodes": len(found.nodes),
                                    "episodes": len(found.episodes), "communities": len(found.communities)}})

    def _evidence(self, kind: str, item: Any, score: float | None) -> EvidenceItem:
        if kind == "fact":
            sources = [self.episodes[u] for u in item.episodes or [] if u in self.episodes]
            span = f"{day(item.valid_at) or '?'} - {day(item.invalid_at) or 'present'}"
            return EvidenceItem(item.fact, span, list(dict.fromkeys(s for s, _ in sources)),
                                [t for _, ts in sources for t in ts], score)
        if kind == "episode":
            session, turns = self.episodes.get(item.uuid, (None, []))
            return EvidenceItem(item.content, day(item.valid_at), [session] if session else [], turns, score)
        return EvidenceItem(f"{item.name}: {item.summary}", day(getattr(item, "created_at", None)), score=score)

    def close(self) -> None:
        graph, loop, self.graph, self.loop = self.graph, self.loop, None, None
        if loop is not None:
            if graph is not None:
                loop.run_until_complete(graph.close())
            loop.close()
