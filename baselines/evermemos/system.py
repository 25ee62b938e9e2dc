"""EverMemOS through a subprocess worker in the user's own EverMemOS checkout and environment.

Upstream (github EverMind-AI/EverMemOS, pinned at `PIN`, after v1.1.0): the evaluation lives under
`methods/EverCore/evaluation`; its in-process adapter `EverCoreAdapter` extracts MemCells, builds BM25 and
embedding indexes, and retrieves agentically (multi-query, reranked) per `config/systems/evermemos.yaml`.
Messages carry `sender_id` / `sender_name`; within a session they are 30 s apart (less when the next
session is nearer), as upstream's loader stamps them; LongMemEval messages are cut at 8,000 characters
as that loader cuts them (`src/core/loaders.py`, for `data.max_content_length` in
`config/datasets/longmemeval.yaml`; the converter that writes LongMemEval in LoCoMo's format cuts
nothing); the conversation names speaker_a and speaker_b in LoCoMo's order. An older layout
(`evaluation/` at the top) is refused with one line. The answer context is upstream's formatted
context, rendered from the evidence items (`subject: episode`, in rank order) by the layout the worker
sends, so that a token budget's subset keeps its header and separators.

Models: the backbone (`llm` of the system config) and the embedder (EverMemOS's "vllm" vectorize
provider, which speaks the OpenAI embeddings API) go to the run's served endpoints through the logging
proxy. The reranker (upstream Qwen3-Reranker-4B behind a /v1/rerank server) has no shared endpoint
here: `reranker_base_url` and `reranker_model` name the user's own, and every build and retrieval
reports it under `private_models` with its call count apart; `use_reranker=False` turns it off
(upstream: on).
"""

from __future__ import annotations

from pathlib import Path

from baselines.base import Endpoints, SystemUnavailable
from baselines.upstream import Pin
from baselines.worker import WorkerSystem

WORKER = Path(__file__).with_name("worker.py")
EVERCORE = Path("methods") / "EverCore"
PIN = Pin("github EverMind-AI/EverMemOS", "e37205f5077acd13217963e91a7e651a1e0c1f43", "2026-05-21",
          tuple(str(EVERCORE / p) for p in ("evaluation/src/adapters/evermemos_adapter.py",
                                            "evaluation/src/core/data_models.py",
                                            "evaluation/config/systems/evermemos.yaml",
                                            "src/agentic_layer/vectorize_service.py",
                                            "src/agentic_layer/rerank_service.py")),
          hint="the worker drives the layout after v1.1.0 (evaluation under methods/EverCore/evaluation, "
               "messages with sender_id/sender_name); check out that commit or a later one with that layout")
UPSTREAM_MAX_TOKENS = 32768


def evermemos_system(endpoints: Endpoints, *, python: str | None = None, checkout: str | None = None,
                     system_config: str | None = None, use_reranker: bool = True,
                     reranker_base_url: str | None = None, reranker_model: str = "Qwen/Qwen3-Reranker-4B",
                     response_top_k: int | None = None, max_tokens: int | None = None, query_prefix: str = "",
                     log_path: str | Path | None = None,
                     name: str = "evermemos") -> WorkerSystem:
    """`python`: the interpreter of the EverMemOS environment (Python 3.12, its requirements installed);
    `checkout`: a checkout of github EverMind-AI/EverMemOS at `PIN`; `system_config`: its evaluation
    system YAML (default `methods/EverCore/evaluation/config/systems/evermemos.yaml`); `max_tokens` of
    the backbone's answers (upstream 32768; default a quarter of the served context); `response_top_k`:
    memories in the answer context (None: upstream's 10)."""
    if not checkout:
        raise SystemUnavailable(f"{name}: no EverMemOS checkout configured (method.system.checkout); "
                                "it installs only from github EverMind-AI/EverMemOS, in its own Python "
                                "3.12 environment")
    root = Path(checkout)
    PIN.check(name, root)
    core = root / EVERCORE
    config = (Path(system_config) if system_config
              else core / "evaluation" / "config" / "systems" / "evermemos.yaml")
    if not config.is_file():
        raise SystemUnavailable(f"{name}: EverMemOS system config {config} not found")
    if use_reranker and not reranker_base_url:
        raise SystemUnavailable(f"{name}: EverMemOS reranks retrieved memories (upstream Qwen3-Reranker-4B "
                                "on a /v1/rerank server); no shared reranker is served here: set "
                                "method.system.reranker_base_url to your own (reported as a private model), "
                                "or method.system.use_reranker=false")
    e = endpoints
    options = {"system_config": str(config), "llm_base_url": e.base_url, "llm_model": e.chat_model,
               "api_key": e.api_key,
               "max_tokens": max_tokens or min(UPSTREAM_MAX_TOKENS, e.context_tokens // 4),
               "use_reranker": use_reranker, "response_top_k": response_top_k, "query_prefix": query_prefix,
               "upstream": PIN.record(root)}
    env = {"VECTORIZE_PROVIDER": "vllm", "VECTORIZE_BASE_URL": e.base_url, "VECTORIZE_API_KEY": e.api_key,
           "VECTORIZE_MODEL": e.embed_model, "VECTORIZE_DIMENSIONS": str(e.embed_dim),
           "VECTORIZE_FALLBACK_PROVIDER": "none", "LLM_BASE_URL": e.base_url, "LLM_API_KEY": e.api_key}
    if use_reranker and reranker_base_url:
        env.update(RERANK_PROVIDER="vllm", RERANK_BASE_URL=reranker_base_url, RERANK_MODEL=reranker_model,
                   RERANK_FALLBACK_PROVIDER="none")
        options["private_models"] = {"rerank": f"{reranker_model} at {reranker_base_url}"}
    return WorkerSystem(name, python, WORKER, options, cwd=core, pythonpath=[core, core / "src"], env=env,
                        log_path=log_path)
