"""Runs against the latency-model server: every system reaches the backbone through one server that
answers after a vLLM-shaped latency (`benchmarks.serving.latency_server`), and through a logging proxy.

An `llm` config with a `latency_model` node (e.g. `llm=qwen3_30b_a3b_simulated`) turns this on. The
harness then builds the configured chat model as the content source (unless `source: replay` has no
fallback), serves it through a LatencyModelServer, and gives
- in-process systems (MemForest) and the answerer and judge an OpenAI client on a LoggingProxy in front
  of that server, whose records go into the run's llm_calls.jsonl; their own schedulers' records go to
  llm_calls_client.jsonl, so that no call is counted twice;
- library baselines their usual ServingStack, forwarding chat to the same server (its proxy logs into
  the run's llm_calls.jsonl too).
Each answer is charged at most its prompt kind's output cap (`llm.latency_model.output_caps`); with
`llm.latency_model.source_max_items` / `source_max_chars`, the content source decodes JSON schemas with
their unbounded arrays / strings bounded to that many items / characters; a schema-less JSON request whose
prompt is one the server knows (`benchmarks.serving.reply_shapes`: Mem0's) is decoded under the reply
shape that prompt asks for, bounded alike (the content source only: a served backbone gets it as sent).
Results are labelled `simulated: true` (run.json, builds, records, summary)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from benchmarks.harness.schema import BenchConfig, ChatModelNode, LatencyModelNode
from benchmarks.serving.latency_model import LatencyParams
from benchmarks.serving.latency_server import SOURCES, LatencyModelServer, ReplaySource
from benchmarks.serving.output_caps import OutputCaps, SourceBounds
from benchmarks.serving.proxy import LoggingProxy
from memforest.config import LLMConfig
from memforest.llm.base import ChatModel, Embedder
from memforest.llm.calllog import CallLog
from memforest.llm.factory import build_chat_model

CLIENT_LOG = "llm_calls_client.jsonl"
SERVED_LOG = "served_calls.jsonl"


def latency_node(llm: ChatModelNode) -> LatencyModelNode | None:
    return llm.latency_model


def is_simulated(cfg: BenchConfig) -> bool:
    return cfg.llm.latency_model is not None


def latency_params(node: LatencyModelNode) -> LatencyParams:
    return LatencyParams(**{f.name: getattr(node, f.name) for f in fields(LatencyParams)})


def needs_source_model(node: LatencyModelNode) -> bool:
    if node.source not in SOURCES:
        raise ValueError(f"llm.latency_model.source: {node.source!r} is not one of {', '.join(SOURCES)}")
    return node.source == "model" or node.fallback


@dataclass
class Simulation:
    server: LatencyModelServer
    proxy: LoggingProxy
    client: ChatModel  # an OpenAI client on the proxy, for in-process callers
    client_log: CallLog

    @property
    def server_url(self) -> str:
        return self.server.base_url

    def close(self) -> None:
        self.client.close()
        self.proxy.close()
        self.server.close()
        self.client_log.close()

    def summary(self) -> dict[str, Any]:
        return self.server.summary()


def open_simulation(llm_cfg: ChatModelNode, source: ChatModel | None, call_log: CallLog, run_dir: Path,
                    system: str, embedder: Embedder | None = None) -> Simulation:
    """The latency server over `source` (and/or a replayed log), the proxy, and the in-process client."""
    node = latency_node(llm_cfg)
    assert node is not None
    replay = ReplaySource(str(node.replay_path)) if node.source == "replay" else None
    server = LatencyModelServer(latency_params(node), chat=source, replay=replay, embedder=embedder,
                                model_name=llm_cfg.model, log_path=run_dir / SERVED_LOG,
                                caps=OutputCaps(dict(node.output_caps)),
                                bounds=SourceBounds(node.source_max_items, node.source_max_chars)).start()
    proxy = LoggingProxy(server.base_url, call_log, system=system).start()
    concurrency = node.client_concurrency or llm_cfg.concurrency or 1
    client = build_chat_model(LLMConfig(backend="openai", model=llm_cfg.model, base_url=proxy.base_url,
                                        concurrency=concurrency, timeout_s=llm_cfg.timeout_s or 120.0))
    return Simulation(server, proxy, client, CallLog(run_dir / CLIENT_LOG))
