"""A chat model or an embedder failing during a write or a query: the caller gets one ModelError naming
the backend and the original error, transient failures are retried first, and the store is left as it
was (absent for a new user, not even an empty folder; unchanged for an existing one)."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import RESIDENCE

from memforest.api import MemForest
from memforest.cli import main
from memforest.config import MemForestConfig
from memforest.errors import ModelError, StoreError
from memforest.llm.base import ChatRequest, EmbedKind, TransientModelError
from memforest.llm.retrying import RetryingEmbedder
from memforest.llm.testing import HashEmbedder, ScriptedChatModel, rule_responder

DIM = 64


class FailingEmbedder(HashEmbedder):
    """The hash embedder, raising `error` from call number `fail_from` on (every call by default)."""

    def __init__(self, error: Exception, fail_from: int = 0, times: int | None = None) -> None:
        super().__init__(DIM)
        self.error, self.fail_from, self.times = error, fail_from, times
        self.calls = 0
        self.on = True

    def embed(self, texts: Sequence[str], kind: EmbedKind = "passage") -> np.ndarray:
        self.calls += 1
        failed = self.calls - 1 - self.fail_from
        if self.on and failed >= 0 and (self.times is None or failed < self.times):
            raise self.error
        return super().embed(texts, kind)


def config() -> MemForestConfig:
    cfg = MemForestConfig()
    cfg.llm.backoff_s = cfg.embedder.backoff_s = 0.0
    return cfg


def forest(root: Path, embedder: Any = None, llm: Any = None) -> MemForest:
    return MemForest(root, config(), llm=llm or ScriptedChatModel(), embedder=embedder or HashEmbedder(DIM))


def contents(root: Path, user: str = "u") -> tuple[int, list[Any]]:
    """The user's committed version and every row of the store, read through SQLite."""
    con = sqlite3.connect(root / "users" / user / "memory.sqlite")
    try:
        version = int(con.execute("SELECT value FROM meta WHERE key='version'").fetchone()[0])
        return version, list(con.iterdump())
    finally:
        con.close()


def nothing_stored(root: Path) -> bool:
    return not (root / "users").exists()


@pytest.fixture
def existing(tmp_path: Path) -> Iterator[Path]:
    """A store holding user `u` with three sessions."""
    root = tmp_path / "st"
    with forest(root) as f:
        f.ingest_sessions("u", RESIDENCE[:3])
    yield root


def one_line(error: BaseException, *words: str) -> str:
    text = str(error)
    assert "\n" not in text and "damaged" not in text, text
    for word in words:
        assert word in text, text
    return text


# ---------------------------------------------------------------- the embedder


def test_an_embedder_failing_on_a_first_write_leaves_no_store(tmp_path: Path) -> None:
    root = tmp_path / "st"
    with forest(root,
                FailingEmbedder(RuntimeError("CUDA out of memory"))) as f, pytest.raises(ModelError) as e:
        f.ingest_sessions("u", RESIDENCE[:2])
    one_line(e.value, "FailingEmbedder", "RuntimeError: CUDA out of memory")
    assert nothing_stored(root), list(root.rglob("*"))


def test_an_embedder_failing_on_an_existing_store_changes_nothing(existing: Path) -> None:
    before = contents(existing)
    with forest(existing, FailingEmbedder(RuntimeError("CUDA out of memory"))) as f:
        with pytest.raises(ModelError) as e:
            f.ingest_sessions("u", RESIDENCE[3:])
        one_line(e.value, "RuntimeError: CUDA out of memory")
        with pytest.raises(ModelError):
            f.correct_session("u", {**RESIDENCE[0], "turns": RESIDENCE[4]["turns"]})
        with pytest.raises(ModelError):
            f.query("u", "where do I live?", answer=False)
    assert contents(existing) == before
    with forest(existing) as f:  # the store still works
        assert f.query("u", "where do I live?", answer=False).evidence


def test_an_embedder_failing_after_some_calls_of_a_write_changes_nothing(existing: Path) -> None:
    before = contents(existing)
    embedder = FailingEmbedder(RuntimeError("device lost"), fail_from=1)
    with forest(existing, embedder) as f, pytest.raises(ModelError, match="device lost"):
        f.ingest_sessions("u", RESIDENCE[3:])
    assert embedder.calls >= 2 and contents(existing) == before


@pytest.mark.parametrize("error", [TransientModelError("HTTP 503: overloaded"), ConnectionError("refused"),
                                   TimeoutError("timed out")])
def test_transient_embedder_failures_are_retried(tmp_path: Path, error: Exception) -> None:
    embedder = FailingEmbedder(error, times=2)
    with forest(tmp_path / "st", embedder) as f:
        f.ingest_sessions("u", RESIDENCE[:2])
        assert f.query("u", "where do I live?", answer=False).evidence
    assert embedder.calls > 2


def test_retries_are_bounded_and_a_fatal_failure_is_not_retried(tmp_path: Path) -> None:
    down = FailingEmbedder(TransientModelError("HTTP 502: bad gateway"))
    with pytest.raises(ModelError, match="after 3 retries: TransientModelError: HTTP 502"):
        RetryingEmbedder(down, max_retries=3, backoff_s=0).embed(["x"])
    assert down.calls == 4
    broken = FailingEmbedder(ValueError("bad input"))
    with pytest.raises(ModelError, match="failed: ValueError: bad input"):
        RetryingEmbedder(broken, max_retries=3, backoff_s=0).embed(["x"])
    assert broken.calls == 1


def test_the_embedder_retry_policy_comes_from_the_config(tmp_path: Path) -> None:
    cfg = config()
    cfg.embedder.max_retries = 1
    embedder = FailingEmbedder(TransientModelError("HTTP 500"))
    with MemForest(tmp_path / "st", cfg, llm=ScriptedChatModel(), embedder=embedder) as f, \
            pytest.raises(ModelError, match="after 1 retries"):
        f.ingest_sessions("u", RESIDENCE[:1])
    assert embedder.calls == 2 and nothing_stored(tmp_path / "st")


class WrongVectors(HashEmbedder):
    def __init__(self, make: Any) -> None:
        super().__init__(DIM)
        self.make = make

    def embed(self, texts: Sequence[str], kind: EmbedKind = "passage") -> np.ndarray:
        return self.make(super().embed(texts, kind))


@pytest.mark.parametrize("make", [lambda v: v[:, :32], lambda v: v[:-1] if len(v) else None,
                                  lambda v: np.full_like(v, np.nan), lambda v: "vectors"],
                         ids=["narrow", "rows", "nan", "text"])
def test_vectors_of_the_wrong_shape_or_not_finite_are_a_model_error(existing: Path, make: Any) -> None:
    before = contents(existing)
    with forest(existing, WrongVectors(make)) as f, pytest.raises(ModelError, match="WrongVectors"):
        f.ingest_sessions("u", RESIDENCE[3:])
    assert contents(existing) == before


def test_an_embedder_that_cannot_be_built_is_a_model_error(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import memforest.api

    def no_gpu(cfg: Any) -> Any:
        raise RuntimeError("no CUDA device")

    monkeypatch.setattr(memforest.api, "build_embedder", no_gpu)
    with MemForest(tmp_path / "st", config(), llm=ScriptedChatModel()) as f, pytest.raises(ModelError) as e:
        f.ingest_sessions("u", RESIDENCE[:1])
    one_line(e.value, "embedder", "cannot be started", "no CUDA device")
    assert nothing_stored(tmp_path / "st")


# ---------------------------------------------------------------- the chat model


def failing_chat(stage: str, error: Exception) -> ScriptedChatModel:
    return ScriptedChatModel(lambda r: error if r.stage == stage else rule_responder(r), name="flaky-chat")


def test_a_chat_model_failing_on_a_first_write_leaves_no_store(tmp_path: Path) -> None:
    root = tmp_path / "st"
    with forest(root, llm=failing_chat("extract", RuntimeError("engine died"))) as f, \
            pytest.raises(ModelError) as e:
        f.ingest_sessions("u", RESIDENCE[:2])
    one_line(e.value, "'flaky-chat' (ScriptedChatModel)", "RuntimeError: engine died")
    assert nothing_stored(root)


def test_a_chat_model_raising_from_generate_changes_nothing(existing: Path) -> None:
    class Exploding(ScriptedChatModel):
        def generate(self, requests: Sequence[ChatRequest]) -> Any:
            raise RuntimeError("CUDA error: device-side assert")

    before = contents(existing)
    with forest(existing, llm=Exploding()) as f:
        with pytest.raises(ModelError, match="CUDA error"):
            f.ingest_sessions("u", RESIDENCE[3:])
        with pytest.raises(ModelError, match="CUDA error"):
            f.query("u", "where do I live?")
    assert contents(existing) == before


def test_a_chat_model_failing_during_a_merge_changes_nothing(existing: Path) -> None:
    with forest(existing) as f:
        f.ingest_sessions("v", RESIDENCE[3:])
    before = contents(existing, "v")
    with forest(existing, llm=failing_chat("summarize", RuntimeError("OOM"))) as f, \
            pytest.raises(ModelError) as e:
        f.merge(["u"], "v")
    one_line(e.value, "'flaky-chat' (ScriptedChatModel)", "RuntimeError: OOM")
    assert contents(existing, "v") == before


def test_a_failing_summary_fails_delete_and_correct_without_a_change(existing: Path) -> None:
    before = contents(existing)
    with forest(existing, llm=failing_chat("summarize", RuntimeError("OOM"))) as f:
        with pytest.raises(ModelError, match="OOM"):
            f.delete_session("u", "pizza")
        with pytest.raises(ModelError, match="OOM"):
            f.correct_session("u", {**RESIDENCE[1], "turns": RESIDENCE[3]["turns"]})
    assert contents(existing) == before


# ---------------------------------------------------------------- servers that are down


class Answer500(BaseHTTPRequestHandler):
    hits = 0

    def do_POST(self) -> None:  # noqa: N802 - the http.server name
        type(self).hits += 1
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = b'{"error": "internal server error"}'
        self.send_response(500)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server_500() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), Answer500)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Answer500.hits = 0
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def openai_embedder_config(base_url: str) -> MemForestConfig:
    cfg = config()
    (cfg.embedder.backend, cfg.embedder.base_url, cfg.embedder.dim,
     cfg.embedder.max_retries) = "openai", base_url, 8, 2
    return cfg


def test_an_embedding_server_answering_500_is_retried_then_a_model_error(tmp_path: Path,
                                                                         server_500: str) -> None:
    root = tmp_path / "st"
    with MemForest(root, openai_embedder_config(server_500), llm=ScriptedChatModel()) as f, \
            pytest.raises(ModelError) as e:
        f.ingest_sessions("u", RESIDENCE[:1])
    one_line(e.value, "OpenAIEmbedder", "after 2 retries", "HTTP 500")
    assert Answer500.hits == 3 and nothing_stored(root)


def test_an_embedding_server_that_is_down_is_a_model_error(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root = tmp_path / "st"
    with MemForest(root, openai_embedder_config(f"http://127.0.0.1:{port}/v1"),
                   llm=ScriptedChatModel()) as f, \
            pytest.raises(ModelError) as e:
        f.ingest_sessions("u", RESIDENCE[:1])
    one_line(e.value, "OpenAIEmbedder", "after 2 retries", "ConnectError")
    assert nothing_stored(root)


def test_the_command_line_names_the_model_failure_in_one_line(tmp_path: Path, server_500: str,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "s.json"
    data.write_text(json.dumps(RESIDENCE[:1]))
    code = main(["ingest", "--store", str(tmp_path / "st"), "--user", "u", "-o", "llm.backend=scripted",
                 "-o", "embedder.backend=openai", "-o", f"embedder.base_url={server_500}", "-o",
                 "embedder.dim=8", "-o", "embedder.backoff_s=0", str(data)])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "HTTP 500" in err and "damaged" not in err, err
    assert nothing_stored(tmp_path / "st")


# ---------------------------------------------------------------- the write lock


def test_a_write_lock_that_cannot_be_taken_is_a_store_error_and_leaves_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import fcntl

    import memforest.store.lock as lock

    def refused(handle: Any, how: int) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(lock.fcntl, "flock", lambda h, how: refused(h, how) if how & fcntl.LOCK_EX else None)
    root = tmp_path / "st"
    with forest(root) as f, pytest.raises(StoreError) as e:
        f.ingest_sessions("u", RESIDENCE[:1])
    one_line(e.value, "write.lock", "Permission denied")
    assert nothing_stored(root), list(root.rglob("*"))


def test_a_store_folder_that_cannot_be_made_is_a_store_error(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(self: Path, *args: Any, **kwargs: Any) -> None:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "mkdir", refused)
    with forest(tmp_path / "st") as f, pytest.raises(StoreError) as e:
        f.ingest_sessions("u", RESIDENCE[:1])
    one_line(e.value, "cannot make the store folder", "Permission denied")
    monkeypatch.undo()
    assert not (tmp_path / "st").exists()


def test_a_write_lock_that_cannot_be_opened_changes_nothing(existing: Path) -> None:
    lock = existing / "users" / "u" / "write.lock"
    lock.unlink()
    lock.mkdir()  # cannot be opened as a file
    before = contents(existing)
    with forest(existing) as f, pytest.raises(StoreError) as e:
        f.ingest_sessions("u", RESIDENCE[3:])
    one_line(e.value, str(lock))
    assert contents(existing) == before


def test_a_first_write_waiting_for_a_failing_one_creates_the_store(tmp_path: Path) -> None:
    """One writer's first write fails and removes the new store, lock file and folder, while another
    writer of the same user waits for the lock: the second gets a lock of its own and succeeds."""
    root = tmp_path / "st"
    entered, release = threading.Event(), threading.Event()

    def slow_failure(request: ChatRequest) -> Any:
        if request.stage == "extract":
            entered.set()
            release.wait(10)
            return RuntimeError("gone")
        return rule_responder(request)

    errors: list[BaseException] = []

    def first() -> None:
        try:
            failing.ingest_sessions("u", RESIDENCE[:1])
        except ModelError as e:
            errors.append(e)

    with forest(root, llm=ScriptedChatModel(slow_failure)) as failing, forest(root) as working:
        thread = threading.Thread(target=first)
        thread.start()
        assert entered.wait(10)
        second = threading.Thread(target=lambda: working.ingest_sessions("u", RESIDENCE[1:3]))
        second.start()
        time.sleep(0.3)  # the second writer waits for the lock
        release.set()
        thread.join(10)
        second.join(20)
    assert len(errors) == 1 and contents(root)[0] == 1
    assert (root / "users" / "u" / "write.lock").exists()
