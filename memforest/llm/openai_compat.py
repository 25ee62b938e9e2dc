"""Chat backend for an OpenAI-compatible server (vLLM, SGLang, llama.cpp's server). With `llm.api: vllm` (the
default) requests carry vLLM's sampling fields beside OpenAI's (top_k, min_p, repetition_penalty), which
such servers take or ignore; `llm.api: openai` sends OpenAI's fields only, for a hosted API that refuses
fields it does not know."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from memforest.config import LLMConfig
from memforest.errors import ConfigError, configured_key, redact
from memforest.llm.base import (
    ChatRequest,
    ChatResponse,
    TransientModelError,
    UnreachableModelError,
    Usage,
    generate_each,
)

if TYPE_CHECKING:
    import httpx

logger = logging.getLogger(__name__)

BASE_URL_ENV = "MEMFOREST_LLM_BASE_URL"
# Requests a server is taken to run side by side at the pace `timeout_s` allows for one; with more in
# flight, a request waits behind the others (see served_timeout).
TIMEOUT_BATCH = 32


def served_timeout(timeout_s: float, concurrency: int) -> float:
    """The read timeout of one request among `concurrency` in flight: `timeout_s` covers a request among
    up to TIMEOUT_BATCH, and the allowance grows with the queue in front of it,
    timeout_s * max(1, concurrency / TIMEOUT_BATCH) (e.g. 120 s at 32 in flight, 960 s at 256)."""
    return timeout_s * max(1.0, concurrency / TIMEOUT_BATCH)


def http_error(exc: Exception) -> Exception:
    """Map an httpx failure to TransientModelError when retrying may help (UnreachableModelError when
    the server could not be reached at all); otherwise keep it."""
    import httpx

    if isinstance(exc, httpx.ConnectError):  # refused, host unknown: nothing listens there
        return UnreachableModelError(redact(f"{type(exc).__name__}: {exc}"))
    if isinstance(exc, (httpx.TimeoutException, httpx.TransportError)):
        return TransientModelError(redact(f"{type(exc).__name__}: {exc}"))
    if isinstance(exc, httpx.HTTPStatusError):
        status = exc.response.status_code
        if status == 429 or status >= 500:
            # redacted before it is cut, so that no part of a key is left at the cut
            return TransientModelError(f"HTTP {status}: {redact(exc.response.text[:4000])[:300]}")
    return exc


def make_client(base_url: str | None, env_name: str, api_key_env: str, timeout_s: float,
                connections: int | None = None, read_timeout_s: float | None = None) -> httpx.Client:
    """An httpx client for `base_url` (or the URL in env `env_name`), with an optional bearer key (read
    from env `api_key_env`, and redacted from every message and log from then on), `timeout_s` for
    connecting, writing and the pool, `read_timeout_s` (default `timeout_s`) for the answer, and,
    when given, a pool of `connections` connections (httpx's default pool holds 100)."""
    try:
        import httpx
    except ImportError as exc:  # pragma: no cover - httpx is a core dependency
        raise ConfigError("httpx is missing: pip install httpx") from exc
    url = base_url or os.environ.get(env_name)
    if not url:
        raise ConfigError(f"no server URL: set base_url in the config or the {env_name} environment variable")
    headers = {}
    key = configured_key(api_key_env)
    if key:
        headers["Authorization"] = f"Bearer {key}"
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections) if connections \
        else httpx.Limits()
    timeout = httpx.Timeout(timeout_s, read=read_timeout_s if read_timeout_s is not None else timeout_s)
    return httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout, limits=limits)


class OpenAIChatModel:
    """POSTs each request to `/chat/completions`; thread-safe, one HTTP client per model, whose pool
    holds `cfg.concurrency` connections, and whose read timeout grows with them (`served_timeout`).

    With `api: vllm`, every sampling field the in-process vLLM engine sets is sent explicitly
    (`ChatRequest.vllm_sampling`), so the server's defaults from the model's generation config do not
    apply; with `api: openai`, OpenAI's fields only (`ChatRequest.sampling`); a finish other than
    "stop" or "length" is a ModelError with the server's finish_reason (`check_response`).

    JSON schemas are sent as `response_format={"type": "json_schema", ...}`. When a server rejects
    that form for a request (llama.cpp's Python server only knows `json_object` with a `schema`; vLLM
    refuses some schemas), that request is sent once more as `{"type": "json_object", "schema": ...}`.
    The next request tries `json_schema` again.
    """

    batched = False

    def __init__(self, cfg: LLMConfig) -> None:
        self.cfg = cfg
        self.name = cfg.model
        self.max_concurrency = cfg.concurrency
        self.schema_fallbacks = 0  # requests sent again as json_object
        self._client = make_client(cfg.base_url, BASE_URL_ENV, cfg.api_key_env, cfg.timeout_s,
                                   connections=cfg.concurrency,
                                   read_timeout_s=served_timeout(cfg.timeout_s, cfg.concurrency))

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResponse | Exception]:
        return generate_each(requests, self._complete, http_error)

    def close(self) -> None:
        self._client.close()

    def _complete(self, request: ChatRequest) -> ChatResponse:
        resp = self._client.post("/chat/completions", json=self._body(request, "json_schema"))
        if request.json_schema is not None and _rejects_format(resp):
            self.schema_fallbacks += 1  # a count only: each request tries json_schema first
            if self.schema_fallbacks == 1:
                logger.info("%s rejected response_format json_schema (HTTP %s); such requests are sent "
                            "again as json_object with the schema", self._client.base_url, resp.status_code)
            resp = self._client.post("/chat/completions", json=self._body(request, "json_object"))
        resp.raise_for_status()
        return self._parse(resp.json())

    def _body(self, request: ChatRequest, schema_format: str) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.cfg.model, "messages": list(request.messages),
                                **(request.vllm_sampling() if self.cfg.api == "vllm" else request.sampling())}
        schema = request.json_schema
        if schema is not None and schema_format == "json_schema":
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "response", "schema": schema, "strict": True},
            }
        elif schema is not None:
            body["response_format"] = {"type": "json_object", "schema": schema}
        return body

    def _parse(self, data: dict[str, Any]) -> ChatResponse:
        choice = data["choices"][0]
        usage = data.get("usage") or {}
        details = usage.get("prompt_tokens_details") or {}
        return ChatResponse(
            text=choice["message"].get("content") or "",
            usage=Usage(
                prompt_tokens=int(usage.get("prompt_tokens") or 0),
                cached_prompt_tokens=int(details.get("cached_tokens") or 0),
                completion_tokens=int(usage.get("completion_tokens") or 0),
            ),
            finish_reason=choice.get("finish_reason") or "stop",
            model=data.get("model") or self.cfg.model,
        )


def _rejects_format(resp: httpx.Response) -> bool:
    """True if the server refused the request because of its response_format. llama.cpp's Python
    server reports this request validation error as HTTP 500, not 400/422."""
    return resp.status_code in (400, 422, 500) and "response_format" in resp.text
