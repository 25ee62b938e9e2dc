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
- the answer model reads the facts, then the entities with their summaries, in our wording of the
  context layout of Zep's scripts (`ZEP_CONTEXT`): on LongMemEval each fact with the range of time it
  held (`zep_longmem_eval.ipynb`), on LoCoMo each with the time of the event it is about,
  `(event_time: ...)` (`zep_locomo_search.py`). Those dates are already the times the facts held
  (Graphiti resolved relative dates when it wrote them), and the context's note says so;
- each fact and entity is an evidence item of its section ("facts", "entities"), listed in the
  context's order, with its `rank` in one ranking of both (`search_ranks`), so that a token budget cuts
  the lowest-ranked of either kind first and `render` lays out what is kept under both headers;
- the build statistics' `input` counts a turn as kept when its episode is in the graph, and the graph's
  episodes of the instance as `stored` (read back through Graphiti); an empty turn, or one whose
  episode Graphiti could not extract (`failed_episodes`), is lost with that reason.

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

from baselines.base import Endpoints, EvidenceItem, InputKept, Retrieval, Session
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

{note}
<FACTS>
{facts}
</FACTS>

Entities, each with a summary (NAME: summary).
<ENTITIES>
{entities}
</ENTITIES>"""
# Per dataset shape ("chat": LongMemEval, "conversation": LoCoMo): what the facts' dates are, and a fact's
# line (its item's `time`: the range it held, or the time of its event).
FACT_NOTES = {
    "chat": ('Facts, each with the range of time it held ("present": it still holds). These dates are '
             "when the\nfact was true or the event happened, already worked out from the conversation: "
             "use them as they are."),
    "conversation": ("Facts, each with the time of the event it is about (event_time). That is when the "
                     'event\nhappened, already worked out from the conversation (for "last week", a week '
                     "before the\nmessage), not when it was mentioned: use it as it is."),
}
FACT_LINES = {"chat": "- {text} ({time})", "conversation": "- {text} (event_time: {time})"}
LOST_EMPTY = "empty turns"
LOST_FAILED = "turns whose episode Graphiti could not extract (skipped after its retries)"


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


def event_time(edge: Any) -> str:
    return day(edge.valid_at) or "date unknown"


class ZepLocalSystem:
    """`edge_limit`/`node_limit`: facts and entities per question (20 each in Zep's evaluation).
    `evidence_limit`: keep only the best-ranked that many items in all, of either kind
    (`search_ranks`; the shared budget; None: all). `message_chars`: a message's text is cut to that
    many characters (Zep's LongMemEval script: 8000). `query_chars`: a dated LongMemEval query is cut
    to that many characters (the same script: 255). `structured_output_mode`: how Graphiti asks for
    JSON (OUTPUT_MODES; None: by the endpoint, see the module doc)."""

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
        self.shape = "chat"  # set by ingest: "conversation" for named speakers (LoCoMo), else "chat"
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
        self.shape = "conversation" if any(t.speaker for s in sessions for t in s.turns) else "chat"
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
        given = sum(len(s.turns) for s in sessions)
        empty = sum(1 for s in sessions for t in s.turns if not t.content.strip())
        lost = {reason: n for reason, n in ((LOST_EMPTY, empty), (LOST_FAILED, len(failures))) if n}
        kept = InputKept(given, counts["episodes"], "episodes", self._stored(), lost)
        return {**counts, "failed_episodes": len(failures), "failures": failures[:20],
                "input": kept.to_dict(), **self.clock.of("ingest")}

    def _stored(self) -> int:
        """The instance's episodes in the graph, read back through Graphiti."""
        from graphiti_core.nodes import EpisodicNode

        assert self.loop is not None
        return len(self.loop.run_until_complete(EpisodicNode.get_by_group_ids(self.graph.driver,
                                                                               [self.group])))

    def retrieve(self, question: str, when: datetime | None) -> Retrieval:
        assert self.graph is not None and self.loop is not None, "reset() first"
        from graphiti_core.search.search_config_recipes import EDGE_HYBRID_SEARCH_RRF, NODE_HYBRID_SEARCH_RRF

        searches = [EDGE_HYBRID_SEARCH_RRF.model_copy(update={"limit": self.edge_limit}),
                    NODE_HYBRID_SEARCH_RRF.model_copy(update={"limit": self.node_limit})]
        query = dated_query(question, when, self.query_chars) if self.shape == "chat" else question
        with self.clock.measure("query"), query_embeddings(self.embedder.client):
            edges, nodes = (self.loop.run_until_complete(self.graph.search_(query, config=config,
                                                                             group_ids=[self.group]))
                            for config in searches)
        facts = [self._fact(e, score)
                 for e, score in zip(edges.edges, _scores(edges.edge_reranker_scores, edges.edges))]
        entities = [EvidenceItem(f"{n.name}: {n.summary}", None, score=score, section="entities")
                    for n, score in zip(nodes.nodes, _scores(nodes.node_reranker_scores, nodes.nodes))]
        evidence = search_ranks(facts, entities)
        if self.evidence_limit is not None:  # the shared budget: the best-ranked items of either kind
            evidence = [e for e in evidence if e.rank is not None and e.rank < self.evidence_limit]
        return Retrieval(self.render(evidence), evidence, trace={**self.clock.of("query"), "query": query,
                         "counts": {"edges": len(edges.edges), "nodes": len(nodes.nodes)}})

    def render(self, items: Sequence[EvidenceItem]) -> str:
        """The answer context of `items` (facts and entities, in list order): the note on the facts'
        dates and both sections, as Zep's script for the data's shape lays them out."""
        line = FACT_LINES[self.shape]
        facts = [line.format(text=e.text, time=e.time) for e in items if e.section == "facts"]
        entities = [f"- {e.text}" for e in items if e.section == "entities"]
        return ZEP_CONTEXT.format(note=FACT_NOTES[self.shape], facts="\n".join(facts),
                                  entities="\n".join(entities))

    def _fact(self, edge: Any, score: float | None) -> EvidenceItem:
        sources = [self.episodes[u] for u in edge.episodes or [] if u in self.episodes]
        when = validity(edge) if self.shape == "chat" else event_time(edge)
        return EvidenceItem(edge.fact, when, list(dict.fromkeys(s for s, _ in sources)),
                            list(dict.fromkeys(t for _, t in sources)), score, section="facts")

    def close(self) -> None:
        graph, loop, self.graph, self.loop, self.embedder = self.graph, self.loop, None, None, None
        if loop is not None:
            if graph is not None:
                loop.run_until_complete(graph.close())
            loop.close()


def _scores(scores: Sequence[float] | None, items: Sequence[Any]) -> list[float | None]:
    return [*list(scores or [])[: len(items)], *[None] * max(0, len(items) - len(scores or []))]


def search_ranks(facts: list[EvidenceItem], entities: list[EvidenceItem]) -> list[EvidenceItem]:
    """The facts then the entities (the context's order), each with its `rank` in one ranking of both.

    Zep's scripts search edges and nodes apart and list all facts before all entities: that is a
    layout, not a ranking of the two kinds against each other. Here both searches fuse the same two
    lists (BM25 and cosine) by Graphiti's reciprocal rank fusion, a sum of 1 / (1 + place) over the
    lists, so a fact's and an entity's fused scores are on one scale and say how high both lists place
    each: items are ranked by that score, a tie going to the better place in its own list, then to
    the fact. Without scores on every item, the two lists are interleaved by their own ranks (fact 1,
    entity 1, fact 2, ...)."""
    pool = [(item, place, kind) for kind, items in enumerate((facts, entities))
            for place, item in enumerate(items)]
    scored = all(item.score is not None for item, _, _ in pool)
    ordered = sorted(pool, key=lambda p: (-(p[0].score or 0.0) if scored else 0.0, p[1], p[2]))
    for rank, (item, _, _) in enumerate(ordered):
        item.rank = rank
    return [*facts, *entities]
