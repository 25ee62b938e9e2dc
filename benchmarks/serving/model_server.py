"""A tiny OpenAI-compatible server on loopback around our in-process models, so that systems that only
speak the OpenAI API (Mem0, Graphiti, MemPalace, MemoryOS) run offline on the local models:

- `POST /v1/embeddings` for an Embedder (float or base64 vectors, optional `dimensions`, optional
  `input_type`: "query" embeds the texts as questions, with the embedder's query instruction, and
  "passage", the default, as stored text; every system's questions get the same treatment this way);
- `POST /v1/chat/completions` for a ChatModel (e.g. the scripted test model, or vLLM in-process);
  `response_format` json_object / json_schema become the request's JSON schema (`{"type": "object"}`
  when none is given); streaming is not offered;
- `GET /v1/models`.

Chat answers are sent back as the model generated them, as vLLM's server does: a JSON answer cut at
max_tokens comes back cut, with finish_reason "length", and the client decides what to do with it. A
model that can answer unchecked (`UncheckedChatModel`: the embedded llama.cpp model) is asked that way;
any other answers through its `generate`, which checks answers against their request.

Requests arriving together are batched (`benchmarks.serving.batching`): embeddings always, chat when
the model batches natively (in-process vLLM), so that concurrent clients share one model call and one
lock-protected engine; each client gets its own answer, and a request that fails fails alone.

Embedding token counts in `usage` come from `token_counter` (default: whitespace words), an
approximation marked `usage.estimated = true`."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler
from typing import Any, Protocol, runtime_checkable

import numpy as np

from benchmarks.serving.batching import Batcher
from benchmarks.serving.loopback import LoopbackServer, send_json
from memforest.llm.base import (
    ChatModel,
    ChatRequest,
    ChatResponse,
    Embedder,
    EmbedKind,
    TransientModelError,
    normalize_rows,
)

BATCH_WINDOW_S = 0.005  # how long a batch waits for more requests once one has arrived
EMBED_BATCH_REQUESTS = 64
EMBED_KINDS: tuple[EmbedKind, ...] = ("query", "passage")
EmbedItem = tuple[tuple[str, ...], EmbedKind]


def _words(text: str) -> int:
    return len(text.split())


@runtime_checkable
class UncheckedChatModel(Protocol):
    """A chat model that can answer as a server does: text and finish reason as generated, not checked
    against the request's JSON schema or its max_tokens."""

    def generate_unchecked(self, requests: Sequence[ChatRequest]) -> list[ChatResponse | Exception]: ...


def served_answers(chat: ChatModel, requests: Sequence[ChatRequest]) -> list[ChatResponse | Exception]:
    """What a server sends back for `requests`: the unchecked answers where the model gives them, else
    its (checked) answers."""
    if isinstance(chat, UncheckedChatModel):
        return chat.generate_unchecked(requests)
    return chat.generate(requests)


class ModelServer(LoopbackServer):
    """Serves `embedder` and/or `chat` on `host:port` (0 = a free port)."""

    def __init__(self, embedder: Embedder | None = None, chat: ChatModel | None = None, *,
                 model_name: str | None = None, port: int = 0, token_counter: Callable[[str], int] = _words,
                 host: str = "127.0.0.1") -> None:
        if embedder is None and chat is None:
            raise ValueError("ModelServer needs an embedder, a chat model, or both")
        self.embedder, self.chat = embedder, chat
        self.model_name = model_name or (chat.name if chat is not None else embedder.name)  # type: ignore[union-attr]
        self.token_counter = token_counter
        self._chat_batcher: Batcher[ChatRequest, ChatResponse] | None = None
        if chat is not None and chat.batched:
            self._chat_batcher = Batcher(chat.generate, window_s=BATCH_WINDOW_S,
                                         max_items=chat.max_concurrency, name="model-server-chat")
        self._embed_batcher: Batcher[EmbedItem, np.ndarray] | None = None
        if embedder is not None:
            self._embed_batcher = Batcher(self._embed_batch, window_s=BATCH_WINDOW_S,
                                          max_items=EMBED_BATCH_REQUESTS, name="model-server-embed")
        self._listen(host, port, _handler_for(self))

    def close(self) -> None:
        super().close()
        for batcher in (self._chat_batcher, self._embed_batcher):
            if batcher is not None:
                batcher.close()

    def generate(self, request: ChatRequest) -> ChatResponse | Exception:
        """One chat request, batched with concurrent ones when the model batches."""
        assert self.chat is not None
        if self._chat_batcher is None:
            return served_answers(self.chat, [request])[0]
        return self._chat_batcher.submit(request)

    def embed(self, texts: list[str], kind: EmbedKind = "passage") -> np.ndarray:
        """One request's vectors, from an embed call shared with concurrent requests."""
        assert self._embed_batcher is not None
        result = self._embed_batcher.submit((tuple(texts), kind))
        if isinstance(result, Exception):
            raise result
        return result

    def _embed_batch(self, items: list[EmbedItem]) -> list[np.ndarray]:
        """One embed call per kind over the texts of all `items`; each item gets its own rows."""
        assert self.embedder is not None
        out: list[np.ndarray] = [np.zeros((0, self.embedder.dim), np.float32)] * len(items)
        for kind in dict.fromkeys(k for _, k in items):
            picked = [i for i, (_, k) in enumerate(items) if k == kind]
            vectors = self.embedder.embed([t for i in picked for t in items[i][0]], kind)
            start = 0
            for i in picked:
                out[i] = vectors[start : start + len(items[i][0])]
                start += len(items[i][0])
        return out

    def embeddings(self, request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if self.embedder is None:
            return 404, {"error": {"message": "no embedding model served here"}}
        texts = request.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            return 400, {"error": {"message": "input must be a string or a list of strings"}}
        kind = request.get("input_type") or "passage"
        if kind not in EMBED_KINDS:
            return 400, {"error": {"message": f"input_type must be one of {', '.join(EMBED_KINDS)}"}}
        vectors = self.embed(texts, kind) if texts else np.zeros((0, self.embedder.dim), np.float32)
        dims = request.get("dimensions")
        if dims is not None and int(dims) != vectors.shape[1]:
            if int(dims) > vectors.shape[1]:
                return 400, {"error": {"message": f"dimensions {dims} > model width {vectors.shape[1]}"}}
            vectors = normalize_rows(vectors[:, : int(dims)])
        as_base64 = request.get("encoding_format") == "base64"
        data = [
            {"object": "embedding", "index": i,
             "embedding": base64.b64encode(v.astype("<f4").tobytes()).decode() if as_base64 else v.tolist()}
            for i, v in enumerate(vectors)
        ]
        tokens = sum(self.token_counter(t) for t in texts)
        usage = {"prompt_tokens": tokens, "total_tokens": tokens, "estimated": True}
        return 200, {"object": "list", "data": data, "model": self.model_name, "usage": usage}

    def chat_completions(self, request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if self.chat is None:
            return 404, {"error": {"message": "no chat model served here"}}
        if request.get("stream"):
            return 400, {"error": {"message": "streaming is not supported by this server"}}
        fmt = request.get("response_format") or {}
        schema = None
        if fmt.get("type") == "json_schema":
            schema = (fmt.get("json_schema") or {}).get("schema") or {"type": "object"}
        elif fmt.get("type") == "json_object":
            schema = fmt.get("schema") or {"type": "object"}
        chat_request = ChatRequest(
            messages=tuple({"role": m["role"], "content": _text(m.get("content"))}
                           for m in request["messages"]),
            stage="served", prompt_id="external", json_schema=schema,
            max_tokens=int(request.get("max_tokens") or request.get("max_completion_tokens") or 512),
            temperature=float(request.get("temperature") or 0.0), top_p=float(request.get("top_p") or 1.0),
            seed=request.get("seed"), allow_truncation=True)  # as any server: the client sees finish_reason
        result = self.generate(chat_request)
        if isinstance(result, Exception):
            status = 503 if isinstance(result, TransientModelError) else 500
            return status, {"error": {"message": f"{type(result).__name__}: {result}"}}
        return 200, _completion(result, self.model_name)


def _text(content: Any) -> str:
    if isinstance(content, list):  # content parts
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content or "")


def _completion(response: ChatResponse, model: str) -> dict[str, Any]:
    usage = response.usage
    return {
        "id": f"chatcmpl-{time.time_ns()}", "object": "chat.completion", "created": int(time.time()),
        "model": response.model or model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": response.text},
                     "finish_reason": response.finish_reason}],
        "usage": {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
                  "total_tokens": usage.prompt_tokens + usage.completion_tokens,
                  "prompt_tokens_details": {"cached_tokens": usage.cached_prompt_tokens}},
    }


def _handler_for(server: ModelServer) -> type[BaseHTTPRequestHandler]:
    routes = {"/embeddings": server.embeddings, "/chat/completions": server.chat_completions}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            if self.path.rstrip("/") in ("/v1/models", "/models"):
                self._reply(200, {"object": "list", "data": [{"id": server.model_name, "object": "model"}]})
            else:
                self._reply(404, {"error": {"message": "not found"}})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            path = self.path.split("?", 1)[0].rstrip("/")
            route = routes.get(path[3:] if path.startswith("/v1/") else path)
            if route is None:
                self._reply(404, {"error": {"message": "not found"}})
                return
            try:
                request = json.loads(raw)
                status, body = route(request if isinstance(request, dict) else {})
            except (ValueError, KeyError, TypeError) as exc:
                status, body = 400, {"error": {"message": f"bad request: {exc}"}}
            except Exception as exc:  # the model failed: report it as a server error, keep serving
                status, body = 500, {"error": {"message": f"{type(exc).__name__}: {exc}"}}
            self._reply(status, body)

        def _reply(self, status: int, body: dict[str, Any]) -> None:
            send_json(self, status, body)

    return Handler
