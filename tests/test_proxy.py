"""The logging proxy and the embeddings endpoint, against a fake upstream and the real llama.cpp server."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import numpy as np
import pytest

from benchmarks.serving.llama_server import LlamaCppServer
from benchmarks.serving.loopback import send_json
from benchmarks.serving.model_server import ModelServer
from benchmarks.serving.proxy import LoggingProxy
from memforest.llm.calllog import CallLog
from memforest.llm.llamacpp import packaged_gguf_path
from memforest.llm.testing import HashEmbedder, ScriptedChatModel

USAGE = {"prompt_tokens": 11, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 3}}


class FakeUpstream(BaseHTTPRequestHandler):
    """Canned OpenAI answers; `model: "slow"` waits, `model: "broken"` fails, `stream` sends SSE."""

    protocol_version = "HTTP/1.1"
    seen: list[dict[str, Any]] = []

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._json(200, {"object": "list", "data": [{"id": "fake"}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        FakeUpstream.seen.append(body)
        if body.get("model") == "slow":
            time.sleep(0.4)
        if body.get("model") == "broken":
            self._json(500, {"error": {"message": "boom"}})
        elif self.path.endswith("/embeddings"):
            data = [{"index": i, "embedding": [1.0, 0.0]} for i, _ in enumerate(body["input"])]
            self._json(200, {"data": data, "usage": {"prompt_tokens": 4, "total_tokens": 4}})
        elif body.get("stream"):
            self._stream()
        else:
            choice = {"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
            self._json(200, {"choices": [choice], "usage": USAGE, "model": body.get("model")})

    def _json(self, status: int, payload: dict[str, Any]) -> None:
        send_json(self, status, payload)

    def _stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        events = [
            {"choices": [{"delta": {"content": "h"}, "finish_reason": None}]},
            {"choices": [{"delta": {"content": "i"}, "finish_reason": "stop"}]},
            {"choices": [], "usage": USAGE},
        ]
        for event in events:
            self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")
        self.close_connection = True


@pytest.fixture(scope="module")
def fake_upstream() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeUpstream)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def chat(base_url: str, model: str = "fake", **extra: Any) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "hello"}], **extra}
    return httpx.post(f"{base_url}/chat/completions", json=body, timeout=30)


def test_proxy_forwards_and_records_usage(fake_upstream: str) -> None:
    log = CallLog()
    with LoggingProxy(fake_upstream, log, system="fake-system") as proxy:
        proxy.phase = "build"
        resp = chat(proxy.base_url)
        proxy.phase = "retrieve"
        emb = httpx.post(f"{proxy.base_url}/embeddings", json={"model": "e", "input": ["a", "b"]}, timeout=30)
        models = httpx.get(f"{proxy.base_url}/models", timeout=30)
    assert resp.status_code == 200 and resp.json()["choices"][0]["message"]["content"] == "hi"
    assert emb.status_code == 200 and len(emb.json()["data"]) == 2
    assert models.status_code == 200
    assert len(log.records) == 2  # /models is forwarded but not a model call
    chat_rec, embed_rec = sorted(log.records, key=lambda r: r.stage)
    assert ((chat_rec.stage, chat_rec.tags["phase"], chat_rec.tags["system"])
            == ("chat", "build", "fake-system"))
    assert (chat_rec.prompt_tokens, chat_rec.cached_prompt_tokens, chat_rec.completion_tokens) == (11, 3, 5)
    assert chat_rec.finish_reason == "stop" and chat_rec.error is None and chat_rec.end >= chat_rec.start
    assert (embed_rec.stage, embed_rec.tags["phase"], embed_rec.prompt_tokens) == ("embed", "retrieve", 4)


def test_proxy_records_errors_and_concurrency(fake_upstream: str) -> None:
    log = CallLog()
    with LoggingProxy(fake_upstream, log) as proxy, ThreadPoolExecutor(3) as pool:
        slow = list(pool.map(lambda _: chat(proxy.base_url, "slow"), range(3)))
        broken = chat(proxy.base_url, "broken")
    assert [r.status_code for r in slow] == [200, 200, 200] and broken.status_code == 500
    assert max(r.tags["in_flight"] for r in log.records[:3]) >= 2
    assert log.records[-1].error == "HTTP 500" and log.records[-1].tags["status"] == 500


def test_proxy_unreachable_upstream_is_502_and_logged() -> None:
    from benchmarks.serving.llama_server import free_port

    log = CallLog()
    with LoggingProxy(f"http://127.0.0.1:{free_port()}/v1", log) as proxy:
        resp = chat(proxy.base_url)
    assert resp.status_code == 502
    assert log.records[0].error and "ConnectError" in log.records[0].error


def test_proxy_streams_and_reads_streamed_usage(fake_upstream: str) -> None:
    log = CallLog()
    with LoggingProxy(fake_upstream, log) as proxy:
        body = {"model": "fake", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        with httpx.stream("POST", f"{proxy.base_url}/chat/completions", json=body, timeout=30) as resp:
            text = "".join(resp.iter_text())
    assert text.count("data:") == 4 and "[DONE]" in text
    [rec] = log.records
    assert (rec.prompt_tokens, rec.completion_tokens, rec.finish_reason) == (11, 5, "stop")


def test_a_call_is_in_the_log_once_its_caller_has_the_answer(fake_upstream: str, monkeypatch) -> None:
    """The record is written before the response ends (plain and streamed), so accounting read right
    after a phase's last call has it, however slowly the log is written."""
    log = CallLog()
    real_add = log.add

    def slow_add(record: Any) -> None:
        time.sleep(0.3)
        real_add(record)
    monkeypatch.setattr(log, "add", slow_add)
    with LoggingProxy(fake_upstream, log) as proxy:
        assert chat(proxy.base_url).status_code == 200
        assert len(log.records) == 1
        emb = httpx.post(f"{proxy.base_url}/embeddings", json={"model": "e", "input": ["a"]}, timeout=30)
        assert emb.status_code == 200 and len(log.records) == 2
        body = {"model": "fake", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        with httpx.stream("POST", f"{proxy.base_url}/chat/completions", json=body, timeout=30) as resp:
            "".join(resp.iter_text())
        assert len(log.records) == 3 and log.records[-1].completion_tokens == 5
        assert chat(proxy.base_url, "broken").status_code == 500
        assert len(log.records) == 4 and log.records[-1].error == "HTTP 500"


def test_proxy_caps_max_tokens(fake_upstream: str) -> None:
    log = CallLog()
    FakeUpstream.seen.clear()
    with LoggingProxy(fake_upstream, log, max_tokens_cap=64) as proxy:
        chat(proxy.base_url, max_tokens=4000)
        chat(proxy.base_url, max_tokens=16)
        chat(proxy.base_url)
    assert [b.get("max_tokens") for b in FakeUpstream.seen] == [64, 16, 64]
    assert log.records[0].tags["max_tokens_capped"] == 64 and "max_tokens_capped" not in log.records[1].tags


def test_model_server_embeddings_float_and_base64() -> None:
    with ModelServer(HashEmbedder(dim=16), model_name="hash") as server:
        plain = httpx.post(f"{server.base_url}/embeddings", json={"input": "one text"}, timeout=30).json()
        packed = httpx.post(f"{server.base_url}/embeddings",
                            json={"input": ["one text", "two"], "encoding_format": "base64"},
                            timeout=30).json()
        short = httpx.post(f"{server.base_url}/embeddings", json={"input": ["x"], "dimensions": 8},
                           timeout=30)
        bad = httpx.post(f"{server.base_url}/embeddings", json={"input": [1, 2]}, timeout=30)
    first = np.asarray(plain["data"][0]["embedding"], dtype=np.float32)
    decoded = np.frombuffer(base64.b64decode(packed["data"][0]["embedding"]), dtype="<f4")
    np.testing.assert_allclose(first, decoded, rtol=1e-6)
    assert plain["usage"]["prompt_tokens"] == 2 and len(packed["data"]) == 2
    assert len(short.json()["data"][0]["embedding"]) == 8 and bad.status_code == 400


def test_model_server_embeds_as_query_or_passage() -> None:
    """`input_type: query` gets the embedder's query form (its instruction), as MemForest's questions do."""
    seen: list[str] = []

    class Prefixing(HashEmbedder):
        def embed(self, texts: Any, kind: Any = "passage") -> np.ndarray:
            seen.append(kind)
            return super().embed([("query: " if kind == "query" else "") + t for t in texts], kind)

    embedder = Prefixing(dim=16)
    with ModelServer(embedder, model_name="hash") as server:
        def vector(body: dict[str, Any]) -> np.ndarray:
            reply = httpx.post(f"{server.base_url}/embeddings", json={"input": ["my cat"], **body},
                               timeout=30)
            return np.asarray(reply.json()["data"][0]["embedding"], dtype=np.float32)

        query, passage, default = (vector({"input_type": "query"}), vector({"input_type": "passage"}),
                                   vector({}))
        bad = httpx.post(f"{server.base_url}/embeddings", json={"input": ["x"], "input_type": "doc"},
                         timeout=30)
    np.testing.assert_allclose(query, embedder.embed(["my cat"], "query")[0], rtol=1e-6)
    np.testing.assert_allclose(passage, default)
    assert not np.allclose(query, passage) and bad.status_code == 400
    assert seen[:3] == ["query", "passage", "passage"]


@pytest.mark.integration
@pytest.mark.slow
def test_proxy_in_front_of_llama_cpp_server(tmp_path: Any) -> None:
    log = CallLog()
    with LlamaCppServer(packaged_gguf_path(), "smollm2", n_ctx=2048,
                        log_path=tmp_path / "server.log") as server, \
            LoggingProxy(server.base_url, log, system="smoke") as proxy:
        proxy.phase = "retrieve"
        resp = chat(proxy.base_url, "smollm2", max_tokens=16)
        body = {"model": "smollm2", "messages": [{"role": "user", "content": "Count to three."}],
                "max_tokens": 16, "stream": True}
        with httpx.stream("POST", f"{proxy.base_url}/chat/completions", json=body, timeout=120) as streamed:
            chunks = "".join(streamed.iter_text())
    assert resp.status_code == 200 and "data:" in chunks
    plain, stream = log.records
    assert plain.prompt_tokens > 0 and plain.completion_tokens > 0 and plain.tags["phase"] == "retrieve"
    assert stream.error is None and stream.tags["endpoint"] == "/chat/completions"


def test_model_server_serves_a_chat_model_behind_the_proxy() -> None:
    log = CallLog()
    with ModelServer(chat=ScriptedChatModel(), model_name="scripted") as server, \
            LoggingProxy(server.base_url, log, system="s") as proxy:
        plain = chat(proxy.base_url, "scripted")
        as_json = chat(proxy.base_url, "scripted", response_format={"type": "json_object"})
        streamed = chat(proxy.base_url, "scripted", stream=True)
        no_embedder = httpx.post(f"{proxy.base_url}/embeddings", json={"input": "x"}, timeout=30)
    assert plain.status_code == 200 and plain.json()["choices"][0]["message"]["content"]
    assert json.loads(as_json.json()["choices"][0]["message"]["content"]) == {"answer": ""}
    assert streamed.status_code == 400 and no_embedder.status_code == 404
    assert [r.stage for r in log.records] == ["chat", "chat", "chat", "embed"]
