"""The compared system of a run, built from its method config.

`method.system` is a `_target_` node: the adapter (a `baselines` class or factory) with the settings
that differ from its defaults. The harness binds the runtime objects the adapter's signature asks for
(`llm`, `embedder`, `call_log`, a MemForest `config`, `name`). A library baseline (`method.serving`
set) gets `endpoints` instead: the backbone and the embedder served over HTTP behind one logging proxy
(`benchmarks.serving.stack`), so that its calls and tokens are counted like MemForest's.

A system that cannot run here raises SystemUnavailable with the reason; the run is reported as skipped.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import instantiate

from baselines.base import Endpoints, MemorySystem, Session, SystemUnavailable
from benchmarks.harness.models import library_config
from benchmarks.harness.schema import ChatModelNode, EmbedderNode, MemForestNode, MethodNode, ServingNode
from benchmarks.serving.stack import ProxiedSystem, ServingStack
from memforest.config import EmbedderConfig, LLMConfig, MemForestConfig, from_dict, with_host_policy
from memforest.errors import configured_key
from memforest.llm.base import ChatModel, Embedder
from memforest.llm.calllog import CallLog

log = logging.getLogger(__name__)
PROBE_URL = "http://127.0.0.1:9/v1"  # nothing listens there: adapters must not connect on construction


@dataclass(frozen=True)
class Models:
    """What the harness built: the embedder, the backbone chat model when needed, the run's call log."""

    embedder: Embedder
    llm: ChatModel | None
    call_log: CallLog
    client_log: CallLog | None = None  # in-process schedulers' log (a simulated run's proxy logs the calls)
    llm_base_url: str | None = None  # a simulated run: the latency-model server every baseline reaches


def system_factory(method: MethodNode) -> functools.partial[MemorySystem]:
    """The adapter of `method.system` with the method's settings bound."""
    try:
        factory = instantiate(dict(method.system), _partial_=True, _convert_="all")
    except InstantiationException as exc:
        raise ValueError(f"method {method.name}: {exc}") from exc
    assert isinstance(factory, functools.partial)
    return factory


def system_settings(method: MethodNode) -> dict[str, Any]:
    """Every setting the adapter is built with, its own defaults included (recorded in run.json)."""
    factory = system_factory(method)
    out: dict[str, Any] = {"_target_": method.system["_target_"]}  # the adapter's own settings node
    for name, param in inspect.signature(factory.func).parameters.items():
        if name in factory.keywords:
            out[name] = factory.keywords[name]
        elif param.default is not inspect.Parameter.empty and _plain(param.default):
            out[name] = param.default
    return out


def _plain(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool, list, dict))


def memforest_config(node: MemForestNode) -> MemForestConfig:
    """A MemForest method's `memforest` node as the library's MemForestConfig (its backbone and
    embedder as the library's LLMConfig and EmbedderConfig, without the harness's labels), with the
    heap policy of the harness's own process (`with_host_policy`) where the node leaves it open."""
    values = asdict(node)
    values.update(llm=vars(library_config(LLMConfig, node.llm)),
                  embedder=vars(library_config(EmbedderConfig, node.embedder)))
    return with_host_policy(from_dict(MemForestConfig, values))


def build_system(method: MethodNode, llm: ChatModelNode, embedder: EmbedderNode,
                 models: Models) -> MemorySystem:
    factory = system_factory(method)
    if method.serving is not None:
        return served_system(method, method.serving, llm, embedder, models, factory)
    runtime: dict[str, Any] = {"llm": models.llm, "embedder": models.embedder,
                               "call_log": models.client_log if models.client_log is not None
                                   else models.call_log,
                               "name": method.name}
    if method.memforest is not None:
        runtime["config"] = memforest_config(method.memforest)
    return factory(**_accepted(factory, runtime))


def _accepted(factory: functools.partial[Any], runtime: dict[str, Any]) -> dict[str, Any]:
    params = inspect.signature(factory.func).parameters
    return {k: v for k, v in runtime.items() if k in params and k not in factory.keywords}


def attach(system: MemorySystem, instance_id: str, workdir: Path, sessions: Sequence[Session]) -> bool:
    """Reopen a completed store instead of rebuilding it; False when the system cannot."""
    reopen = getattr(system, "attach", None)
    if reopen is None:
        return False
    reopen(instance_id, workdir, sessions)
    return True


# ---------------------------------------------------------------- library baselines, served over HTTP

HTTP_BACKENDS = ("llamacpp", "openai")


def served_system(method: MethodNode, serving: ServingNode, llm: ChatModelNode, embedder: EmbedderNode,
                  models: Models, factory: functools.partial[MemorySystem]) -> MemorySystem:
    """A ProxiedSystem; the adapter is built once first against an address where nothing listens, so
    a missing package or environment is reported before any instance is built."""
    name = method.name

    # a keyed server (slurm/vllm_server.sbatch): the libraries send its key through the proxy
    key = configured_key(llm.api_key_env) or "local"


    def endpoints(url: str) -> Endpoints:
        return Endpoints(url, llm.model, embedder.model, embedder.dim, serving.context_tokens, key,
                         json_schema=takes_json_schema(llm, models))

    probe = factory(endpoints(PROBE_URL), name=name)
    runtime = dict(getattr(probe, "runtime_settings", None) or {})
    probe.close()
    stack = serving_stack(name, serving, llm, embedder, models)
    return ProxiedSystem(name, lambda url: factory(endpoints(url), name=name), stack,
                         runtime_settings=runtime)


def takes_json_schema(llm: ChatModelNode, models: Models) -> bool:
    """Whether the chat endpoint serving_stack gives a baseline enforces `response_format` json_schema:
    llama.cpp's server (a `llamacpp` backbone) refuses it; vLLM, an `openai` server and the harness's
    own servers (any other backbone, a simulated run's latency server) take it."""
    return bool(models.llm_base_url) or llm.backend != "llamacpp"


def serving_stack(name: str, serving: ServingNode, llm: ChatModelNode, embedder: EmbedderNode,
                  models: Models) -> ServingStack:
    """llama.cpp serves the packaged (or `llm.model_path`) GGUF at `serving.context_tokens`; an `openai`
    backbone is forwarded to; any other (vLLM in process, the scripted model) is served by the harness.
    The embedder is always the harness's own, served by the harness (an `openai` embedder is reached
    through it), so that a request with `input_type: query` gets the same query instruction MemForest's
    questions get."""
    backend = "openai" if models.llm_base_url else llm.backend
    base_url = models.llm_base_url or llm.base_url
    if backend not in HTTP_BACKENDS and models.llm is None:
        raise SystemUnavailable(f"{name}: llm.backend={backend} needs the harness's chat model")
    return ServingStack(
        models.call_log, name, llm_model=llm.model,
        llm_base_url=base_url if backend == "openai" else None,
        chat=models.llm if backend not in HTTP_BACKENDS else None, gguf_path=llm.model_path,
        n_ctx=serving.context_tokens, threads=serving.threads, seed=llm.seed,
        embedder=models.embedder,
        max_tokens_cap=serving.max_tokens_cap,
    )
