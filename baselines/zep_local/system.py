"""Zep Local: Graphiti (PyPI `graphiti-core`) on the embedded Kuzu database, or on Neo4j when a URI is
configured, driven as Zep's own evaluation drives Zep (getzep/zep-papers,
`kg_architecture_agent_memory/locomo_eval/zep_locomo_ingestion.py`, `zep_locomo_search.py` and
`zep_longmem_eval.ipynb`; see baselines/README.md):

- one `message` episode per turn, its body `speaker: text` as written (the role for user/assistant
  data), cut to `message_chars` as Zep's LongMemEval script cuts it, with the session's time as
  reference time, staggered by one second per message so that the graph keeps the turns' order;
- a question searches edges (facts) and nodes (entities), `edge_limit` and `node_limit` of each; on
  user/assistant data (LongMemEval) the query is `(date: <question date>) question`, the date written as
  LongMemEval writes it, cut to `query_chars` characters, as Zep's LongMemEval script searches (LoCoMo:
  the question alone, as its LoCoMo script searches); searches fuse BM25 and cosine by reciprocal rank
  (Zep's hosted edge cross-encoder has no counterpart on our served models: no re-ranker is used rather
  than a cosine stand-in);
- the answer model reads the facts with their validity ranges and the entities with their summaries,
  in our wording of Zep's context layout (`ZEP_CONTEXT`). The dates there are already the times the
  facts held (Graphiti resolved relative dates when it wrote them), and the context says so.

Chat goes through `OpenAIGenericClient` in `structured_output_mode`: Graphiti's own default
`json_schema` (the schema enforced by constrained decoding) where the endpoint takes it (vLLM, the
harness's model and latency-model servers: `Endpoints.json_schema`), else `json_object` (llama.cpp's
server refuses `json_schema`; Graphiti then writes each response schema into the prompt); a configured
mode overrides. Questions are embedded in the served endpoint's query form.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from baselines.base import Endpoints, EvidenceItem, Retrieval, Session
from baselines.common import (
    PhaseClock,
    day,
    query_embeddings,
    quiet_environment,
    require,
    safe_id,
    speaker_of,
)

ZEP_CONTEXT = """Facts and entities from the memory of past conversations.

Facts, each with the range of time it held ("present": it still holds). These dates are when the
fact was true or the event happened, already worked out from the conversation: use them as they are.
<FACTS>
{facts}
</FACTS>

Entities, each with a summary (NAME: summary).
<ENTITIES>
{entities}
</ENTITIES>"""


LME_DATE = "%Y/%m/%d (%a) %H:%M"  # LongMemEval's question_date, e.g. 2023/05/30 (Tue) 23:40
OUTPUT_MODES = ("json_object", "json_schema")


def dated_query(question: str, when: datetime | None, chars: int) -> str:
    """Zep's LongMemEval search query: `(date: <question date>) question`, cut to `chars` characters."""
    text = f"(date: {when.strftime(LME_DATE)}) {question}" if when else question
    return text[:chars]


def utc(when: datetime) -> datetime:
    return when.replace(tzinfo=timezone.utc) if when.tzinfo is None else when


def unused_reranker() -> Any:
    """Graphiti builds an OpenAI re-ranker when given none; the searches here re-rank by reciprocal
    rank fusion, so the client it holds must never be called."""
    from graphiti_core.cross_encoder.client import CrossEncoderClient

    class NoReranker(CrossEncoderClient):
        async def rank(self, query: str, passages: list[str]) -> list[tuple[str, float]]:
            raise RuntimeError("zep_local searches without a cross-encoder; none is configured")

    return NoReranker()


def validity(edge: Any) -> str:
    return f"{day(edge.valid_at) or 'date unknown'} - {day(edge.invalid_at) or 'present'}"


class ZepLocalSystem:
    """`edge_limit`/`node_limit`: facts and entities per question (20 each in Zep's evaluation).
    `evidence_limit`: keep only that many items in all, facts and entities alternating (the shared
    budget; None: all). `message_chars`: a message's text is cut to that many characters (Zep's
    LongMemEval script: 8000). `query_chars`: a dated LongMemEval query is cut to that many characters
    (the same script: 255). `structured_output_mode`: how Graphiti asks for JSON (OUTPUT_MODES; None:
    by the endpoint, see the module doc)."""

    def __init__(self, endpoints: Endpoints, *, edge_limit: int = 20, node_limit: int = 20,
                 evidence_limit: int | None = None, message_chars: int = 8000, query_chars: int = 255,
                 max_tokens: int = 8192, temperature: float = 0.0, neo4j_uri: str | None = None,
                 neo4j_user: str = "neo4j", neo4j_password_env: str = "NEO4J_PASSWORD",
                 structured_output_mode: str | None = None, name: str = "zep_local") -> None:
        if structured_output_mode is None:
            structured_output_mode = "json_schema" if endpoints.json_schema else "json_object"
        if structured_output_mode not in OUTPUT_MODES:
            raise ValueError(f"{name}: structured_output_mode must be one of {', '.join(OUTPUT_MODES)}, "
                             f"not {structured_output_mode!r}")
        require("graphiti_core", name, "zep")
        self.output_mode = structured_output_mode
        if neo4j_uri is None:
            require("kuzu", name, "zep")
        self.name = name
        e = endpoints
        self.llm: dict[str, Any] = dict(api_key=e.api_key, model=e.chat_model, small_model=e.chat_model,
                                        base_url=e.base_url, temperature=temperature, max_tokens=max_tokens)
        self.embed: dict[str, Any] = dict(api_key=e.api_key, base_url=e.base_url,
                                          embedding_model=e.embed_model, embedding_dim=e.embed_dim)
        self.edge_limit, self.node_limit, self.evidence_limit = edge_limit, node_limit, evidence_limit
        self.message_chars, self.query_chars = message_chars, query_chars
        self.dated_queries = False  # set by ingest: user/assistant data (LongMemEval) gets dated queries
        self.neo4j = (neo4j_uri, neo4j_user, neo4j_password_env)  # the password is read when connecting
        self.clock = PhaseClock()
        self.graph: Any = None
        self.group = "g"
        self.loop: asyncio.AbstractEventLoop | None = None
        self.embedder: Any = None
        self.episodes: dict[str, tuple[str, str]] = {}  # episode uuid -> (session id, turn id)

    def reset(self, instance_id: str, workdir: Path) -> None:
        self.close()
        Path(workdir).mkdir(parents=True, exist_ok=True)
        self.loop = asyncio.new_event_loop()
        with quiet_environment():  # Graphiti reads its telemetry switch when a graph is built
            from graphiti_core import Graphiti
            from graphiti_core.embedder.openai import OpenAIEmbedder, OpenAIEmbedderConfig
            from graphiti_core.llm_client.config import LLMConfig
            from graphiti_core.llm_client.openai_generic_client import OpenAIGenericClient

            embedder = self.embedder = OpenAIEmbedder(OpenAIEmbedderConfig(**self.embed))
            llm = OpenAIGenericClient(LLMConfig(**self.llm), max_tokens=int(self.llm["max_tokens"]),
                                      structured_output_mode=self.output_mode)  # type: ignore[arg-type]
            driver, self.group = self._driver(Path(workdir), safe_id(instance_id))
            self.graph = Graphiti(llm_client=llm, embedder=embedder, cross_encoder=unused_reranker(),
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
        self.dated_queries = not any(t.speaker for s in sessions for t in s.turns)
        with self.clock.measure("ingest"):
            for session in sessions:
                turns = [t for t in session.turns if t.content.strip()]
                for index, turn in enumerate(turns):
                    name = f"{session.session_id}#{turn.turn_id}"
                    try:
                        result = self.loop.run_until_complete(self.graph.add_episode(
                            name=name,
                            episode_body=f"{speaker_of(turn)}: {turn.content}"[: self.message_chars],
                            source_description="conversation message",
                            reference_time=utc(session.timestamp) + timedelta(seconds=index),
                            source=EpisodeType.message, group_id=self.group))
                    except (ValueError, EmptyResponseError, RefusalError) as exc:
                        # Graphiti already retried the malformed output 4 times; a skipped episode is
                        # counted, as a failed add would be in a real deployment, and the build goes on.
                        failures.append(f"{name}: {type(exc).__name__}: {str(exc)[:200]}")
                        continue
                    self.episodes[result.episode.uuid] = (session.session_id, turn.turn_id)
                    counts["episodes"] += 1
                    counts["nodes"] += len(result.nodes)
                    counts["edges"] += len(result.edges)
        return {**counts, "failed_episodes": len(failures), "failures": failures[:20],
                **self.clock.of("ingest")}

    def retrieve(self, question: str, when: datetime | None) -> Retrieval:
        assert self.graph is not None and self.loop is not None, "reset() first"
        from graphiti_core.search.search_config_recipes import EDGE_HYBRID_SEARCH_RRF, NODE_HYBRID_SEARCH_RRF

        searches = [EDGE_HYBRID_SEARCH_RRF.model_copy(update={"limit": self.edge_limit}),
                    NODE_HYBRID_SEARCH_RRF.model_copy(update={"limit": self.node_limit})]
        query = dated_query(question, when, self.query_chars) if self.dated_queries else question
        with self.clock.measure("query"), query_embeddings(self.embedder.client):
            edges, nodes = (self.loop.run_until_complete(self.graph.search_(query, config=config,
                                                                             group_ids=[self.group]))
                            for config in searches)
        facts = [self._fact(e, score)
                 for e, score in zip(edges.edges, _scores(edges.edge_reranker_scores, edges.edges))]
        entities = [EvidenceItem(f"{n.name}: {n.summary}", None, score=score)
                    for n, score in zip(nodes.nodes, _scores(nodes.node_reranker_scores, nodes.nodes))]
        facts, entities = _within(facts, entities, self.evidence_limit)
        context = ZEP_CONTEXT.format(facts="\n".join(f"- {f.text} ({f.time})" for f in facts),
                                     entities="\n".join(f"- {e.text}" for e in entities))
        return Retrieval(context, facts + entities, trace={**self.clock.of("query"), "query": query,
                         "counts": {"edges": len(edges.edges), "nodes": len(nodes.nodes)}})

    def _fact(self, edge: Any, score: float | None) -> EvidenceItem:
        sources = [self.episodes[u] for u in edge.episodes or [] if u in self.episodes]
        return EvidenceItem(edge.fact, validity(edge), list(dict.fromkeys(s for s, _ in sources)),
                            list(dict.fromkeys(t for _, t in sources)), score)

    def close(self) -> None:
        graph, loop, self.graph, self.loop, self.embedder = self.graph, self.loop, None, None, None
        if loop is not None:
            if graph is not None:
                loop.run_until_complete(graph.close())
            loop.close()


def _scores(scores: Sequence[float] | None, items: Sequence[Any]) -> list[float | None]:
    return [*list(scores or [])[: len(items)], *[None] * max(0, len(items) - len(scores or []))]


def _within(facts: list[EvidenceItem], entities: list[EvidenceItem],
            limit: int | None) -> tuple[list[EvidenceItem], list[EvidenceItem]]:
    """At most `limit` items in all, facts and entities taken in turn (best first within each)."""
    if limit is None:
        return facts, entities
    kept_facts: list[EvidenceItem] = []
    kept_entities: list[EvidenceItem] = []
    for i in range(max(len(facts), len(entities))):
        for pool, kept in ((facts, kept_facts), (entities, kept_entities)):
            if i < len(pool) and len(kept_facts) + len(kept_entities) < limit:
                kept.append(pool[i])
    return kept_facts, kept_entities
