"""Concurrent clients of the in-process model server share batched model calls, each gets its own
answer, and a failing request fails alone."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import numpy as np
import pytest
import vllm_stub

from benchmarks.serving.batching import Batcher
from benchmarks.serving.model_server import ModelServer
from memforest.config import LLMConfig
from memforest.llm.base import ChatRequest
from memforest.llm.testing import HashEmbedder, ScriptedChatModel
from memforest.llm.vllm_backend import VLLMChatModel

CLIENTS = 64


def echo(request: ChatRequest) -> str:
    return "echo: " + request.messages[-1]["content"]


def clients(base_url: str) -> httpx.Client:
    """One connection per client thread."""
    return httpx.Client(base_url=base_url, timeout=60, limits=httpx.Limits(max_connections=CLIENTS))


def ask_all(base_url: str, prompts: Sequence[str]) -> list[httpx.Response]:
    """Every prompt from its own client thread, all at once."""
    start = threading.Barrier(len(prompts))

    def ask(prompt: str) -> httpx.Response:
        start.wait()
        return client.post("/chat/completions", json={"model": "m", "max_tokens": 8,
                                                       "messages": [{"role": "user", "content": prompt}]})

    with clients(base_url) as client, ThreadPoolExecutor(len(prompts)) as pool:
        return list(pool.map(ask, prompts))


def content(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    return str(response.json()["choices"][0]["message"]["content"])


def test_batcher_gives_each_submitter_its_own_result_and_isolates_a_failing_item() -> None:
    seen: list[list[int]] = []

    def run(items: list[int]) -> list[int]:
        seen.append(items)
        if 13 in items:
            raise ValueError("thirteen")
        return [i * 10 for i in items]

    batcher: Batcher[int, int] = Batcher(run, window_s=0.05, max_items=16)
    with ThreadPoolExecutor(32) as pool:
        results = list(pool.map(batcher.submit, range(32)))
    batcher.close()
    assert [r for i, r in enumerate(results) if i != 13] == [i * 10 for i in range(32) if i != 13]
    assert isinstance(results[13], ValueError)
    assert max(len(b) for b in seen) > 1 and all(len(b) <= 16 for b in seen)
    assert sorted(i for b in seen if 13 not in b or len(b) == 1 for i in b) == list(range(32))
    with pytest.raises(RuntimeError, match="closed"):
        batcher.submit(1)


def test_64_concurrent_clients_get_their_own_answers_from_fewer_model_calls() -> None:
    model = ScriptedChatModel(echo, latency_s=0.002, max_concurrency=CLIENTS, batched=True)
    prompts = [f"client {i}" for i in range(CLIENTS)]
    with ModelServer(chat=model, model_name="m") as server:
        responses = ask_all(server.base_url, prompts)
    assert [content(r) for r in responses] == [f"echo: {p}" for p in prompts]
    assert model.calls == CLIENTS and model.batches < CLIENTS
    assert all(r.json()["usage"]["prompt_tokens"] == 2 for r in responses)


def test_served_vllm_engine_batches_and_fails_an_over_length_prompt_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stub = vllm_stub.install(monkeypatch, "0.10.0")  # the generation that keeps failed calls' requests
    chat = VLLMChatModel(LLMConfig(backend="vllm", model="m", context_tokens=40, concurrency=CLIENTS))
    prompts = [f"client {i}" for i in range(CLIENTS)]
    prompts[17] = "long " * 50
    with ModelServer(chat=chat, model_name="m") as server:
        responses = ask_all(server.base_url, prompts)
    chat.close()
    assert responses[17].status_code == 500 and "maximum model length" in responses[17].text
    assert [content(r) for i, r in enumerate(responses) if i != 17] == \
        [f"echo: {p}" for i, p in enumerate(prompts) if i != 17]
    assert len(stub.engines[0].chat_calls) < CLIENTS


def test_concurrent_embedding_requests_share_calls_and_get_their_own_rows() -> None:
    embedder = CountingEmbedder(32)
    texts = [[f"text {i}", f"more {i}", f"and {i}"][: 1 + i % 3] for i in range(CLIENTS)]
    start = threading.Barrier(CLIENTS)
    with ModelServer(embedder=embedder) as server:
        def post(batch: list[str]) -> Any:
            start.wait()
            return client.post("/embeddings", json={"model": "e", "input": batch}).json()

        with clients(server.base_url) as client, ThreadPoolExecutor(CLIENTS) as pool:
            replies = list(pool.map(post, texts))
    reference = HashEmbedder(32)
    for batch, reply in zip(texts, replies, strict=True):
        got = np.asarray([item["embedding"] for item in sorted(reply["data"], key=lambda d: d["index"])])
        np.testing.assert_allclose(got, reference.embed(batch), rtol=1e-6)
    assert embedder.calls < CLIENTS


class CountingEmbedder(HashEmbedder):
    def __init__(self, dim: int) -> None:
        super().__init__(dim)
        self.calls = 0

    def embed(self, texts: Sequence[str], kind: Any = "passage") -> np.ndarray:
        self.calls += 1
        return super().embed(texts, kind)

