"""Real model backends: embedded llama.cpp, an OpenAI-compatible server, sentence-transformers, vLLM."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from memforest.config import EmbedderConfig, LLMConfig
from memforest.errors import ConfigError, ModelError
from memforest.llm.base import (
    ChatModel,
    ChatRequest,
    ChatResponse,
    Embedder,
    InvalidOutputError,
    TransientModelError,
    Usage,
    is_transient,
)
from memforest.llm.embedders import OpenAIEmbedder, SentenceTransformerEmbedder, VLLMEmbedder
from memforest.llm.llamacpp import LlamaCppChatModel, packaged_gguf_path
from memforest.llm.openai_compat import OpenAIChatModel
from memforest.llm.vllm_backend import VLLMChatModel

MAX_FACTS = 4
MAX_FACT_CHARS = 80
FACTS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "facts": {
            "type": "array",
            "maxItems": MAX_FACTS,
            "items": {"type": "string", "maxLength": MAX_FACT_CHARS},
        }
    },
    "required": ["facts"],
    "additionalProperties": False,
}
# Worst case: every character its own token, plus the JSON punctuation.
FACTS_MAX_TOKENS = MAX_FACTS * (MAX_FACT_CHARS + 8) + 64
DIALOGUE = (
    {"role": "system", "content": "Extract the facts stated by the user as a JSON object."},
    {"role": "user", "content": "I moved to Lisbon in March and I adopted a grey cat called Miso."},
)


def facts_request(max_tokens: int = FACTS_MAX_TOKENS) -> ChatRequest:
    return ChatRequest(
        messages=DIALOGUE,
        stage="test",
        prompt_id="test.facts",
        json_schema=FACTS_SCHEMA,
        max_tokens=max_tokens,
    )


def chat_request(max_tokens: int = 32) -> ChatRequest:
    messages = ({"role": "user", "content": "Say hello in one short sentence."},)
    return ChatRequest(messages=messages, stage="test", prompt_id="test.chat", max_tokens=max_tokens)


def assert_valid_facts(result: ChatResponse | Exception) -> None:
    assert isinstance(result, ChatResponse), result
    data = json.loads(result.text, strict=False)
    assert isinstance(data["facts"], list) and len(data["facts"]) <= MAX_FACTS
    assert all(isinstance(f, str) and len(f) <= MAX_FACT_CHARS for f in data["facts"])
    assert result.usage.prompt_tokens > 0 and result.usage.completion_tokens > 0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- embedded llama.cpp ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def llama_pool() -> Iterator[LlamaCppChatModel]:
    model = LlamaCppChatModel(LLMConfig(instances=2, threads_per_instance=1, context_tokens=2048))
    yield model
    model.close()


def test_packaged_gguf_is_found() -> None:
    path = packaged_gguf_path()
    assert path.endswith(".gguf") and os.path.isfile(path)


def test_llamacpp_missing_model_file_is_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        LlamaCppChatModel(LLMConfig(model_path=str(tmp_path / "absent.gguf")))


@pytest.mark.slow
def test_llamacpp_bounded_schema_gives_valid_json(llama_pool: LlamaCppChatModel) -> None:
    assert isinstance(llama_pool, ChatModel)
    assert llama_pool.max_concurrency == 2 and not llama_pool.batched
    [result] = llama_pool.generate([facts_request()])
    assert_valid_facts(result)
    assert isinstance(result, ChatResponse) and result.finish_reason == "stop"


@pytest.mark.slow
def test_llamacpp_two_threads_on_two_instances(llama_pool: LlamaCppChatModel,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    spans: list[tuple[int, float, float]] = []  # (instance, start, end) of each completion

    def timed(index: int, complete: Any) -> Any:
        def run(**kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return complete(**kwargs)
            finally:
                spans.append((index, start, time.perf_counter()))
        return run

    for index, llama in enumerate(llama_pool._instances):
        monkeypatch.setattr(llama, "create_chat_completion", timed(index, llama.create_chat_completion))
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = [pool.submit(llama_pool.generate, [facts_request()]) for _ in range(2)]
        results = [f.result(timeout=120) for f in futures]
    for [result] in results:
        assert_valid_facts(result)
    (a, a0, a1), (b, b0, b1) = sorted(spans, key=lambda span: span[1])
    assert a != b  # each request on its own instance ...
    assert b0 < a1  # ... and the two ran at the same time


@pytest.mark.slow
def test_llamacpp_truncation_is_invalid_output_in_place(llama_pool: LlamaCppChatModel) -> None:
    results = llama_pool.generate([facts_request(max_tokens=4), chat_request()])
    assert isinstance(results[0], InvalidOutputError)
    assert isinstance(results[1], ChatResponse) and results[1].text


# --- OpenAI-compatible server ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A llama_cpp.server on a free loopback port, serving the packaged GGUF; yields its /v1 URL."""
    from benchmarks.serving.llama_server import LlamaCppServer

    log_path = tmp_path_factory.mktemp("server") / "server.log"
    with LlamaCppServer(packaged_gguf_path(), LLMConfig().model, n_ctx=2048, log_path=log_path,
                        ready_timeout_s=90) as server:
        yield server.base_url


@pytest.fixture
def server_model(llama_server: str) -> Iterator[OpenAIChatModel]:
    model = OpenAIChatModel(LLMConfig(backend="openai", base_url=llama_server, timeout_s=120))
    yield model
    model.close()


@pytest.mark.integration
def test_openai_plain_chat_records_usage(server_model: OpenAIChatModel) -> None:
    [result] = server_model.generate([chat_request()])
    assert isinstance(result, ChatResponse) and result.text
    assert result.usage.prompt_tokens > 0 and result.usage.completion_tokens > 0


@pytest.mark.integration
def test_openai_schema_request_returns_json(server_model: OpenAIChatModel) -> None:
    [result] = server_model.generate([facts_request()])
    assert_valid_facts(result)
    assert server_model.schema_fallbacks == 1  # llama.cpp's server refuses json_schema


def test_openai_closed_port_is_transient() -> None:
    model = OpenAIChatModel(LLMConfig(backend="openai", base_url=f"http://127.0.0.1:{free_port()}/v1"))
    [result] = model.generate([chat_request()])
    model.close()
    assert isinstance(result, TransientModelError)


def test_openai_needs_a_base_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMFOREST_LLM_BASE_URL", raising=False)
    with pytest.raises(ConfigError, match="MEMFOREST_LLM_BASE_URL"):
        OpenAIChatModel(LLMConfig(backend="openai"))


def mocked(model: Any, handler: Any) -> None:
    """Route a backend's HTTP client through `handler`, keeping its base URL."""
    model._client = httpx.Client(base_url="http://mock/v1", transport=httpx.MockTransport(handler))


def test_openai_status_classification() -> None:
    statuses = iter([429, 503, 401])
    model = OpenAIChatModel(LLMConfig(backend="openai", base_url="http://mock/v1"))
    mocked(model, lambda request: httpx.Response(next(statuses), text="nope"))
    results = model.generate([chat_request(), chat_request(), chat_request()])
    assert [type(r) for r in results] == [TransientModelError, TransientModelError, httpx.HTTPStatusError]


def test_openai_falls_back_to_json_object_per_request_and_reads_cached_tokens() -> None:
    """A server that refuses one request's json_schema gets that request again as json_object; the
    next request tries json_schema first again."""
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        bodies.append(body)
        if body["response_format"]["type"] == "json_schema" and len(bodies) == 1:
            return httpx.Response(422, text="response_format: unsupported type json_schema")
        usage = {"prompt_tokens": 9, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 4}}
        message = {"role": "assistant", "content": '{"facts": []}'}
        return httpx.Response(
            200, json={"choices": [{"message": message, "finish_reason": "stop"}], "usage": usage}
        )

    model = OpenAIChatModel(LLMConfig(backend="openai", base_url="http://mock/v1"))
    mocked(model, handler)
    [first, second] = model.generate([facts_request(), facts_request()])
    assert [b["response_format"]["type"] for b in bodies] == ["json_schema", "json_object", "json_schema"]
    assert bodies[1]["response_format"]["schema"] == FACTS_SCHEMA
    assert isinstance(first, ChatResponse) and isinstance(second, ChatResponse)
    assert first.usage == Usage(prompt_tokens=9, cached_prompt_tokens=4, completion_tokens=3)
    assert model.schema_fallbacks == 1


@pytest.mark.parametrize("reason", ["abort", "error", "content_filter"])
def test_openai_a_finish_other_than_stop_or_length_is_a_model_error(reason: str) -> None:
    """A server's finish_reason other than "stop" or "length" (vLLM's "abort" and "error", a hosted
    API's "content_filter") is a failure with that reason, never an empty answer."""
    message = {"role": "assistant", "content": ""}
    model = OpenAIChatModel(LLMConfig(backend="openai", base_url="http://mock/v1"))
    mocked(model, lambda request: httpx.Response(
        200, json={"choices": [{"message": message, "finish_reason": reason}], "model": "served"}))
    [result] = model.generate([chat_request()])
    assert isinstance(result, ModelError) and is_transient(result) == (reason == "error")
    assert str(result) == f"test: served finished the request with finish_reason={reason!r}, not an answer"


def test_openai_connection_pool_holds_the_configured_concurrency() -> None:
    model = OpenAIChatModel(LLMConfig(backend="openai", base_url="http://mock/v1", concurrency=256))
    pool = model._client._transport._pool  # type: ignore[attr-defined]
    assert pool._max_connections == 256 and pool._max_keepalive_connections == 256
    model.close()


def test_openai_embedder_orders_and_normalises_rows() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        texts = json.loads(request.content)["input"]
        data = [{"index": i, "embedding": [float(len(t)), 0.0, 1.0]} for i, t in enumerate(texts)]
        return httpx.Response(200, json={"data": list(reversed(data))})

    embedder = OpenAIEmbedder(
        EmbedderConfig(backend="openai", base_url="http://mock/v1", dim=3, batch_size=2)
    )
    mocked(embedder, handler)
    vectors = embedder.embed(["a", "bbb", "cc"])
    assert vectors.shape == (3, 3) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-6)
    assert vectors[1, 0] > vectors[2, 0] > vectors[0, 0]
    assert embedder.embed([]).shape == (0, 3)


# --- sentence-transformers ------------------------------------------------------------------------


@pytest.mark.slow
def test_sentence_transformer_embedder() -> None:
    embedder = SentenceTransformerEmbedder(EmbedderConfig())
    assert isinstance(embedder, Embedder) and embedder.dim == 384
    vectors = embedder.embed(
        ["My cat sleeps on the sofa all day.", "The kitten naps on the couch.", "Interest rates rose in May."]
    )
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]
    assert embedder.embed([], kind="query").shape == (0, 384)
    embedder.close()


@pytest.mark.slow
def test_sentence_transformer_embedder_gives_the_host_its_torch_threads_back() -> None:
    import torch

    host = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        own = SentenceTransformerEmbedder(EmbedderConfig(threads=2))
        assert own.settings()["threads"] == 2
        own.embed(["one sentence"])
        assert torch.get_num_threads() == 1  # set for the call, then restored
        untouched = SentenceTransformerEmbedder(EmbedderConfig())
        assert untouched.settings()["threads"] == 1  # 0: the process's own setting
        untouched.embed(["one sentence"])
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(host)


# --- vLLM (not runnable here) ---------------------------------------------------------------------

no_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed")


@no_vllm
def test_vllm_chat_without_vllm_is_config_error() -> None:
    with pytest.raises(ConfigError, match=r"memforest\[gpu\]"):
        VLLMChatModel(LLMConfig(backend="vllm", model="Qwen/Qwen3-8B"))


@no_vllm
def test_vllm_embedder_without_vllm_is_config_error() -> None:
    with pytest.raises(ConfigError, match=r"memforest\[gpu\]"):
        VLLMEmbedder(EmbedderConfig(backend="vllm", model="Qwen/Qwen3-Embedding-0.6B"))
