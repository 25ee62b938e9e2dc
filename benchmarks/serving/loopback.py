"""A threaded HTTP server on a loopback port, started and stopped by its owner."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def send_body(handler: BaseHTTPRequestHandler, status: int, data: bytes,
              content_type: str = "application/json") -> None:
    """One whole response with a Content-Length."""
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def send_json(handler: BaseHTTPRequestHandler, status: int, body: Any) -> None:
    send_body(handler, status, json.dumps(body).encode())


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # the listen backlog (5 by default): hundreds of clients connect at once


class LoopbackServer:
    """Base of the harness's local servers: `start`/`close`, a context manager, and `base_url`."""

    thread_name = "loopback-server"

    def _listen(self, host: str, port: int, handler: type[BaseHTTPRequestHandler]) -> None:
        self._server = _Server((host, port), handler)
        self._thread: threading.Thread | None = None
        self.base_url = f"http://{host}:{self._server.server_address[1]}/v1"

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> Any:
        if self._thread is None:
            self._thread = threading.Thread(target=self._server.serve_forever, name=self.thread_name,
                                            daemon=True)
            self._thread.start()
        return self

    def close(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=10)
            self._thread = None
        self._server.server_close()
