"""Credentials never reach a message or a log: the exact value of every configured key, whatever its
shape, and keys of the common providers' shapes as a second line of defence."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
from conftest import RESIDENCE

from memforest.api import MemForest
from memforest.cli import main
from memforest.config import LLMConfig, MemForestConfig
from memforest.errors import ModelError, add_secret, configured_key, redact
from memforest.llm.base import ChatRequest
from memforest.llm.calllog import CallLog
from memforest.llm.openai_compat import OpenAIChatModel
from memforest.llm.scheduler import Scheduler
from memforest.llm.testing import ScriptedChatModel

KEY = "Qv7.tilde~Key-Value/of+no=known_shape"  # no provider's shape: only its exact value can find it
KEY_ENV = "MEMFOREST_TEST_REDACTION_KEY"


class EchoKey(BaseHTTPRequestHandler):
    """Answers every POST with HTTP 500 and a body echoing the request's key, after some padding."""

    padding = 0

    def do_POST(self) -> None:  # noqa: N802 - the http.server name
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        key = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
        body = ("x" * self.padding + f" upstream refused the key {key} (quota)").encode()
        self.send_response(500)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def echo_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv(KEY_ENV, KEY)
    EchoKey.padding = 0
    server = HTTPServer(("127.0.0.1", 0), EchoKey)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def no_part_of(key: str, text: str) -> bool:
    """Whether no 8 consecutive characters of `key` appear in `text`."""
    return not any(key[i : i + 8] in text for i in range(len(key) - 7))


def request() -> ChatRequest:
    return ChatRequest(({"role": "user", "content": "hi"},), stage="extract", prompt_id="test")


@pytest.mark.parametrize("padding", [0, 280])
def test_a_chat_server_echoing_the_key_reaches_neither_the_error_nor_the_call_log(
        tmp_path: Path, echo_server: str, padding: int) -> None:
    EchoKey.padding = padding  # 280: the key straddles the cut of the echoed body
    model = OpenAIChatModel(LLMConfig(backend="openai", base_url=echo_server, api_key_env=KEY_ENV))
    log = CallLog(tmp_path / "calls.jsonl")
    try:
        [result] = Scheduler(model, concurrency=1, log=log, max_retries=1, backoff_s=0).run([request()])
    finally:
        log.close()
        model.close()
    written = (tmp_path / "calls.jsonl").read_text()
    assert isinstance(result, ModelError) and "HTTP 500" in str(result)
    for text in (str(result), written):
        assert no_part_of(KEY, text), text
    assert padding or "[redacted]" in str(result)


def test_an_embedding_server_echoing_the_key_is_redacted_from_the_error_and_stderr(
        tmp_path: Path, echo_server: str, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = MemForestConfig()
    cfg.embedder.backend, cfg.embedder.base_url, cfg.embedder.dim = "openai", echo_server, 8
    cfg.embedder.api_key_env, cfg.embedder.max_retries, cfg.embedder.backoff_s = KEY_ENV, 0, 0.0
    with MemForest(tmp_path / "st", cfg, llm=ScriptedChatModel()) as forest, pytest.raises(ModelError) as e:
        forest.ingest_sessions("u", RESIDENCE[:1])
    assert no_part_of(KEY, str(e.value)) and "[redacted]" in str(e.value), e.value
    data = tmp_path / "s.json"
    data.write_text(json.dumps(RESIDENCE[:1]))
    code = main(["ingest", "--store", str(tmp_path / "st2"), "--user", "u", "-o", "llm.backend=scripted",
                 "-o", "embedder.backend=openai", "-o", f"embedder.base_url={echo_server}", "-o",
                 "embedder.dim=8", "-o", f"embedder.api_key_env={KEY_ENV}", "-o", "embedder.max_retries=0",
                 str(data)])
    err = capsys.readouterr().err
    assert code == 2 and "HTTP 500" in err and no_part_of(KEY, err), err


def test_a_configured_key_is_redacted_wherever_it_appears(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    assert configured_key(KEY_ENV) == KEY
    from urllib.parse import quote

    escaped = "".join(f"\\u{ord(c):04x}" for c in KEY)  # as a client escaping every character writes it
    shouted = "".join(f"\\u{ord(c):04X}" for c in KEY)
    for text in (f"failed: {KEY}", f"url ?key={quote(KEY, safe='')}", json.dumps({"key": KEY}),
                 f"{KEY}{KEY}", f"key={escaped}", f"key={shouted}"):
        assert no_part_of(KEY, redact(text)) and "[redacted]" in redact(text), text


def test_a_key_in_the_configuration_is_redacted_before_any_client_is_built(monkeypatch: pytest.MonkeyPatch,
                                                                           tmp_path: Path) -> None:
    secret = "k3y-only-known-to-the-config-env"
    monkeypatch.setenv("MEMFOREST_TEST_CONFIG_KEY", secret)
    cfg = MemForestConfig()
    cfg.llm.api_key_env = "MEMFOREST_TEST_CONFIG_KEY"
    MemForest(tmp_path, cfg).close()
    assert secret not in redact(f"the server said {secret}")


def test_short_values_and_ordinary_text_are_left_alone() -> None:
    add_secret("abc")  # too short to search for: it would match ordinary words
    add_secret(None)
    for text in ("abc def", "version 12 of 3 sessions, 0.93 cosine", "hf_hub_download failed",
                 "session 2023-01-10T10:00:00 id 123e4567-e89b-12d3-a456-426614174000", "sk-short"):
        assert redact(text) == text


@pytest.mark.parametrize("key", [
    "gsk_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5bC7dE9fG1hJ3kL5m",  # Groq
    "hf_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ01234567",  # Hugging Face
    "AIza" + "SyA1bC2dE3fG4hI5jK6lM7nO8pQ9rS0tU_v",  # Google
    "xai-" + "Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78St90",  # xAI
    "0123456789abcdef0123456789abcdef",  # 32 hex digits
    "sk-proj-" + "Ab12Cd34Ef56Gh78Ij90",  # OpenAI
    "ghp_" + "Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78",  # GitHub
    "AKIA" + "ABCDEFGHIJ234567",  # AWS
])
def test_keys_of_known_shapes_are_redacted_without_being_configured(key: str) -> None:
    for text in (f"HTTP 500: invalid key {key}", f'{{"detail": "key {key} revoked"}}', f"key={key}."):
        out = redact(text)
        assert key not in out and no_part_of(key, out) and "[redacted]" in out, out


def test_a_reader_that_goes_away_is_not_a_store_problem(monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """`memforest ... | head`: the closed pipe ends the command quietly (141, as SIGPIPE does), with no
    diagnosis of a store."""
    def closed_pipe(args: Any) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def no_diagnosis(args: Any, exc: Exception) -> Exception:
        raise AssertionError(f"diagnosed as a store problem: {exc}")

    monkeypatch.setattr("memforest.cli._cmd_calls", closed_pipe)
    monkeypatch.setattr("memforest.commands.diagnose", no_diagnosis)
    monkeypatch.setattr("memforest.cli._quiet_stdout", lambda: None)  # pytest's own stdout stays
    assert main(["calls", "log.jsonl"]) == 141
    assert capsys.readouterr().err == ""
