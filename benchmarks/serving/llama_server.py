"""`llama_cpp.server` as a subprocess on a free loopback port: the OpenAI-compatible chat endpoint that
baselines call (through the logging proxy) when the backbone is the embedded GGUF model."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from memforest.config import LLMConfig
from memforest.errors import ConfigError


def _die_with_parent() -> None:
    """Linux: the server is killed when the process that started it dies, even by SIGKILL. SIGKILL,
    since a server busy with a long generation outlives a SIGTERM (it waits for the request)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class LlamaCppServer:
    """One `llama_cpp.server` process serving `model_path` under the name `alias`.

    The server runs one request at a time; `--interrupt_requests false` keeps a second request from
    cancelling the first. Its output goes to `log_path` (or is discarded)."""

    def __init__(self, model_path: str, alias: str, *, n_ctx: int = LLMConfig.context_tokens,
                 threads: int = 1, seed: int = 0, log_path: str | Path | None = None,
                 ready_timeout_s: float = 120.0) -> None:
        if not Path(model_path).is_file():
            raise ConfigError(f"GGUF model file not found: {model_path}")
        self.model_path, self.alias = model_path, alias
        self.n_ctx, self.threads, self.seed = n_ctx, threads, seed
        self.log_path = Path(log_path) if log_path else None
        self.ready_timeout_s = ready_timeout_s
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "llama_cpp.server",
            "--model", self.model_path, "--model_alias", self.alias,
            "--host", "127.0.0.1", "--port", str(self.port),
            "--n_threads", str(self.threads), "--n_threads_batch", str(self.threads),
            "--n_ctx", str(self.n_ctx), "--seed", str(self.seed),
            "--interrupt_requests", "false",
        ]  # fmt: skip

    def __enter__(self) -> LlamaCppServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> LlamaCppServer:
        if self._proc is not None:
            return self
        if self.log_path:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
        out = self.log_path.open("ab") if self.log_path else subprocess.DEVNULL
        try:
            self._proc = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT,
                                          preexec_fn=_die_with_parent if sys.platform == "linux" else None)
        finally:
            if self.log_path:
                out.close()  # type: ignore[union-attr]
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.ready_timeout_s
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited with {self._proc.returncode}: {self._tail()}")
            try:
                if httpx.get(f"{self.base_url}/models", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"llama_cpp.server not ready in {self.ready_timeout_s} s: {self._tail()}")
            time.sleep(0.3)

    def _tail(self) -> str:
        return (self.log_path.read_text(errors="replace")[-2000:] if self.log_path and self.log_path.exists()
                else "")

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)
