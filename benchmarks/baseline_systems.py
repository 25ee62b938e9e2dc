"""Builders of the compared systems, registered in `benchmarks.systems` by method `kind`.

Every library baseline talks to the backbone and the embedder over HTTP, through one LoggingProxy per
system (`benchmarks.serving`): with `llm.backend=llamacpp` the packaged (or `llm.model_path`) GGUF is
served by `llama_cpp.server`; with `llm.backend=openai` the proxy forwards to `llm.base_url`; any other
backend (vllm in-process, the scripted test model) is built by the harness and served over HTTP by
`benchmarks.model_server`. The embedder the harness built is served likewise unless
`embedder.backend=openai`. Baseline
calls are tagged with the harness's phase names (`build`, `retrieve`), so the harness counts them like
its own. A method config may set `serving: {max_tokens_cap, n_ctx, threads}` (CPU runs).

A system that cannot run here raises SystemUnavailable from its builder, with the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from baselines.base import MemorySystem, SystemUnavailable
from baselines.common import require
from benchmarks.serving import ProxiedSystem, ServingStack
from benchmarks.systems import Config, Models, SystemSpec, model_fields, register

HTTP_BACKENDS = ("llamacpp", "openai")


def serving_stack(method: Config, llm: Config, embedder: Config, models: Models) -> ServingStack:
    name = str(method.get("name", method.get("kind")))
    chat, emb = model_fields(llm), model_fields(embedder)
    in_process = chat.get("backend") not in HTTP_BACKENDS
    if in_process and models.llm is None:
        raise SystemUnavailable(f"{name}: llm.backend={chat.get('backend')} needs the harness's chat model")
    serving = dict(method.get("serving") or {})
    remote_embed = emb.get("backend") == "openai"
    return ServingStack(
        models.call_log, name, llm_model=str(chat["model"]),
        llm_base_url=chat.get("base_url") if chat.get("backend") == "openai" else None,
        chat=models.llm if in_process else None, gguf_path=chat.get("model_path"), n_ctx=int(serving.get("n_ctx") or chat.get("context_tokens") or 4096),
        threads=int(serving.get("threads") or chat.get("threads_per_instance") or 1), seed=int(chat.get("seed") or 0),
        embedder=None if remote_embed else models.embedder,
        embed_base_url=emb.get("base_url") if remote_embed else None,
        max_tokens_cap=serving.get("max_tokens_cap"),
    )


def proxied(method: Config, llm: Config, embedder: Config, models: Models,
            make: Callable[[str, str, str, int], MemorySystem]) -> MemorySystem:
    """A ProxiedSystem whose baseline is `make(base_url, llm_model, embed_model, embed_dims)`."""
    stack = serving_stack(method, llm, embedder, models)
    chat, emb = model_fields(llm), model_fields(embedder)
    name = str(method.get("name", method.get("kind")))
    return ProxiedSystem(name, lambda url: make(url, str(chat["model"]), str(emb["model"]), int(emb["dim"])),
                         stack, ingest_phase="build", query_phase="retrieve")


def options(method: Config) -> dict[str, Any]:
    return dict(method.get("options") or {})


def _mem0(method: Config, llm: Config, embedder: Config, models: Models) -> MemorySystem:
    from baselines.mem0 import Mem0System

    require("mem0", str(method["name"]), "mem0")
    return proxied(method, llm, embedder, models, lambda url, model, emb, dims: Mem0System(
        url, model, url, emb, dims, name=str(method["name"]), **options(method)))


def _mem0_v2(method: Config, llm: Config, embedder: Config, models: Models) -> MemorySystem:
    """Mem0 2.x in the environment of `method.python`, probed once here like the other workers."""
    from baselines.mem0 import mem0_v2_system

    python, name = method.get("python"), str(method["name"])
    probe = mem0_v2_system(python, "http://127.0.0.1:9/v1", "probe", "http://127.0.0.1:9/v1", "probe", 1, name=name,
                           **options(method))
    probe.close()
    return proxied(method, llm, embedder, models, lambda url, model, emb, dims: mem0_v2_system(
        python, url, model, url, emb, dims, name=name, **options(method)))


def _mempalace(method: Config, llm: Config, embedder: Config, models: Models) -> MemorySystem:
    from baselines.mempalace import MemPalaceSystem

    require("mempalace", str(method["name"]), "mempalace")
    return proxied(method, llm, embedder, models, lambda url, model, emb, dims: MemPalaceSystem(
        url, emb, name=str(method["name"]), **options(method)))


def _zep_local(method: Config, llm: Config, embedder: Config, models: Models) -> MemorySystem:
    from baselines.zep_local import ZepLocalSystem

    require("graphiti_core", str(method["name"]), "zep")
    return proxied(method, llm, embedder, models, lambda url, model, emb, dims: ZepLocalSystem(
        url, model, url, emb, dims, name=str(method["name"]), **options(method)))


def _memoryos(method: Config, llm: Config, embedder: Config, models: Models) -> MemorySystem:
    from baselines.memoryos import MemoryOSSystem
    from memforest.config import EmbedderConfig
    from memforest.llm.embedders import OpenAIEmbedder

    require("memoryos", str(method["name"]), "memoryos")

    def make(url: str, model: str, emb: str, dims: int) -> MemorySystem:
        client = OpenAIEmbedder(EmbedderConfig(backend="openai", base_url=url, model=emb, dim=dims))
        return MemoryOSSystem(url, model, client, name=str(method["name"]), **options(method))

    return proxied(method, llm, embedder, models, make)


def _worker(factory: Callable[..., MemorySystem]) -> Callable[[Config, Config, Config, Models], MemorySystem]:
    """LightMem / EverMemOS: `method.python` (the interpreter of the system's own environment) and
    `method.checkout` must be set; the worker is started once here so a broken environment is reported
    as unavailable before any instance is built."""

    def build(method: Config, llm: Config, embedder: Config, models: Models) -> MemorySystem:
        python, checkout, name = method.get("python"), method.get("checkout"), str(method["name"])
        probe = factory(python, checkout, "http://127.0.0.1:9/v1", "probe", name=name, **options(method))
        probe.close()
        return proxied(method, llm, embedder, models, lambda url, model, emb, dims: factory(
            python, checkout, url, model, name=name, **options(method)))

    return build


def _full_context(method: Config, llm: Config, embedder: Config, models: Models) -> MemorySystem:
    from baselines.full_context import FullContextSystem

    return FullContextSystem(max_tokens=int(method.get("max_tokens", 100_000)), name=str(method["name"]))


def _flat_rag(method: Config, llm: Config, embedder: Config, models: Models) -> MemorySystem:
    from baselines.flat_rag import FlatRAGSystem

    return FlatRAGSystem(models.embedder, top_k=int(method.get("top_k", 10)), name=str(method["name"]))


def _served_chat_model(method: Config) -> bool:
    """True: a served baseline gets the harness's chat model, which is served to it when the backend is
    in-process (vllm, scripted). For llamacpp and openai backbones it is used only for answering."""
    return True


def _no_chat_model(method: Config) -> bool:
    return False


def register_baselines() -> None:
    from baselines.evermemos import evermemos_system
    from baselines.lightmem import lightmem_system

    served = {"mem0": _mem0, "mem0_v2": _mem0_v2, "mempalace": _mempalace, "zep_local": _zep_local,
              "memoryos": _memoryos, "lightmem": _worker(lightmem_system), "evermemos": _worker(evermemos_system)}
    for kind, build in served.items():
        register(kind, SystemSpec(build, _served_chat_model))
    register("full_context", SystemSpec(_full_context, _no_chat_model))
    register("flat_rag", SystemSpec(_flat_rag, _no_chat_model))
