"""An OpenAI-compatible logging proxy: every baseline's model calls pass through it and are counted the
same way, one CallRecord per request, whatever client library the baseline uses.

    with LoggingProxy("http://127.0.0.1:8000/v1", call_log, system="mem0") as proxy:
        proxy.phase = "build"
        ...  # point the system at proxy.base_url

Chat and completion requests go to `upstream_base_url`, embedding requests to `embeddings_upstream`
(default: the same). Streaming responses are passed through chunk by chunk; their usage is read from
the stream when the server sends it (else the record has zero tokens and `tags["usage"] = "absent"`).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

import httpx

from benchmarks.serving.loopback import LoopbackServer, send_body
from memforest.llm.calllog import CallLog, CallRecord

ROUTES = {"/chat/completions": "chat", "/completions": "chat", "/embeddings": "embed", "/models": "models"}
_HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding", "host"}


class LoggingProxy(LoopbackServer):
    """A loopback HTTP server forwarding the OpenAI routes and logging each call into `call_log`.

    `phase` and `system` may be changed between requests; each record carries the values current when
    its request arrived, with the number of requests in flight at that moment (itself included).
    `max_tokens_cap`, when set, lowers (or sets) `max_tokens` of chat/completion requests: a knob for
    CPU smoke runs, recorded in the call's tags."""

    def __init__(
        self,
        upstream_base_url: str,
        call_log: CallLog,
        system: str = "",
        port: int = 0,
        *,
        embeddings_upstream: str | None = None,
        max_tokens_cap: int | None = None,
        timeout_s: float = 900.0,
        host: str = "127.0.0.1",
    ) -> None:
        self.upstream = upstream_base_url.rstrip("/")
        self.embeddings_upstream = (embeddings_upstream or upstream_base_url).rstrip("/")
        self.call_log = call_log
        self.system = system
        self.phase: str | None = None
        self.max_tokens_cap = max_tokens_cap
        self._client = httpx.Client(timeout=timeout_s)
        self._lock = threading.Lock()
        self._in_flight = 0
        self._listen(host, port, _handler_for(self))

    def close(self) -> None:
        super().close()
        self._client.close()

    # ------------------------------------------------------------------ one request

    def enter(self) -> int:
        with self._lock:
            self._in_flight += 1
            return self._in_flight

    def leave(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def target(self, route: str) -> str:
        base = self.embeddings_upstream if ROUTES[route] == "embed" else self.upstream
        return base + route

    def prepare(self, route: str, body: bytes) -> tuple[bytes, dict[str, Any], dict[str, Any]]:
        """The body to forward, its parsed JSON, and tags describing any change made to it."""
        try:
            data = json.loads(body) if body else {}
        except ValueError:
            return body, {}, {}
        if not isinstance(data, dict):
            return body, {}, {}
        cap, tags = self.max_tokens_cap, {}
        if cap is not None and ROUTES[route] == "chat":
            asked = data.get("max_tokens") or data.get("max_completion_tokens")
            if asked is None or int(asked) > cap:
                data.pop("max_completion_tokens", None)
                data["max_tokens"] = cap
                tags = {"max_tokens_capped": cap, "max_tokens_asked": asked}
                body = json.dumps(data).encode()
        return body, data, tags

    def record(self, route: str, request: dict[str, Any], started: float, in_flight: int, status: int,
               usage: dict[str, Any] | None, finish: str | None, error: str | None,
               tags: dict[str, Any], error_kind: str | None = None) -> None:
        usage = usage or {}
        details = usage.get("prompt_tokens_details") or {}
        self.call_log.add(CallRecord(
            id=self.call_log.next_id(), stage=ROUTES[route], prompt_id=f"external:{route.strip('/')}",
            prompt_version=0, wave=0, level=0, start=started, end=time.time(),
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            cached_prompt_tokens=int(details.get("cached_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            error=error, error_kind=error_kind if error else None, finish_reason=finish,
            model=str(request.get("model") or ""),
            tags={"system": self.system, **({"phase": self.phase} if self.phase is not None else {}),
                  "in_flight": in_flight, "endpoint": route,
                  "status": status, **({"usage": "absent"} if not usage else {}), **tags},
        ))


def _route(path: str) -> str | None:
    path = path.split("?", 1)[0]
    if path.startswith("/v1/"):
        path = path[3:]
    return path if path in ROUTES else None


def _forward_headers(headers: Any) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() not in _HOP_HEADERS}


def _handler_for(proxy: LoggingProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # silence per-request stderr lines
            pass

        def do_GET(self) -> None:
            self._proxy("GET")

        def do_POST(self) -> None:
            self._proxy("POST")

        def _proxy(self, method: str) -> None:
            route = _route(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if route is None:
                self._reply(404, b'{"error": {"message": "not proxied"}}', "application/json")
                return
            if route == "/models":
                self._passthrough(method, route, raw)
                return
            body, request, tags = proxy.prepare(route, raw)
            tags = {**tags, "system": proxy.system}  # as they are when the request arrives
            if proxy.phase is not None:  # else the call log's context names the phase
                tags["phase"] = proxy.phase
            in_flight, started = proxy.enter(), time.time()
            status, usage, finish, error = 502, None, None, None
            kind: str | None = None  # "unreachable": nothing answered at the upstream's address
            logged = False

            def log() -> None:
                """Record the call before the client can read the end of its response, so a caller
                that has its answer finds the call in the log (a phase's accounting read right after
                its last call misses nothing)."""
                nonlocal logged
                if not logged:
                    logged = True
                    proxy.leave()
                    proxy.record(route, request, started, in_flight, status, usage, finish, error, tags,
                                 kind)

            def streamed(found_usage: dict[str, Any] | None, found_finish: str | None) -> None:
                nonlocal usage, finish, error
                usage, finish = found_usage, found_finish
                error = f"HTTP {status}" if status >= 400 else None
                log()
            try:
                req = proxy._client.build_request(method, proxy.target(route), content=body,
                                                  headers=_forward_headers(self.headers))
                resp = proxy._client.send(req, stream=True)
                status = resp.status_code
                try:
                    if request.get("stream"):
                        self._stream(resp, streamed)
                    else:
                        data = resp.read()
                        usage, finish = _usage_of(data)
                        error = f"HTTP {status}" if status >= 400 else None
                        log()
                        self._reply(status, data, resp.headers.get("content-type", "application/json"))
                finally:
                    resp.close()
            except (httpx.HTTPError, OSError) as exc:
                if not logged:  # the upstream failed (a failed reply to the client is not the call's error)
                    error = f"{type(exc).__name__}: {exc}"
                    kind = "unreachable" if isinstance(exc, httpx.ConnectError) else "failed"
                    log()
                    if status == 502:
                        failed = json.dumps({"error": {"message": error}}).encode()
                        self._reply(502, failed, "application/json")
            finally:
                log()

        def _passthrough(self, method: str, route: str, body: bytes) -> None:
            try:
                resp = proxy._client.request(method, proxy.target(route), content=body or None)
                self._reply(resp.status_code, resp.content,
                            resp.headers.get("content-type", "application/json"))
            except httpx.HTTPError as exc:
                self._reply(502, json.dumps({"error": {"message": str(exc)}}).encode(), "application/json")

        def _reply(self, status: int, data: bytes, content_type: str) -> None:
            send_body(self, status, data, content_type)

        def _stream(self, resp: httpx.Response,
                    before_end: Callable[[dict[str, Any] | None, str | None], None]) -> None:
            """Relay an event stream chunk by chunk, reading usage and finish reason on the way;
            `before_end` gets them before the stream's last chunk is sent."""
            self.send_response(resp.status_code)
            self.send_header("Content-Type", resp.headers.get("content-type", "text/event-stream"))
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            reader = _StreamReader()
            for chunk in resp.iter_bytes():
                if chunk:
                    reader.feed(chunk)
                    self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                    self.wfile.flush()
            before_end(reader.usage, reader.finish)
            self.wfile.write(b"0\r\n\r\n")

    return Handler


def _usage_of(data: bytes) -> tuple[dict[str, Any] | None, str | None]:
    try:
        parsed = json.loads(data)
    except ValueError:
        return None, None
    if not isinstance(parsed, dict):
        return None, None
    choices = parsed.get("choices") or [{}]
    return parsed.get("usage"), (choices[0] or {}).get("finish_reason")


class _StreamReader:
    """Parses `data: {...}` lines of a server-sent event stream as they arrive."""

    def __init__(self) -> None:
        self.buffer = b""
        self.usage: dict[str, Any] | None = None
        self.finish: str | None = None

    def feed(self, chunk: bytes) -> None:
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            line = line.strip()
            if not line.startswith(b"data:") or line[5:].strip() == b"[DONE]":
                continue
            try:
                event = json.loads(line[5:])
            except ValueError:
                continue
            if event.get("usage"):
                self.usage = event["usage"]
            for choice in event.get("choices") or []:
                self.finish = choice.get("finish_reason") or self.finish
