"""A model that is gone is never an answer: a dead vLLM engine (the stub raises the EngineDeadError vLLM's
client raises once its engine core process has died) or a server that no longer answers stops the run
with nothing recorded for what it was serving, and the same command resumes there; a request that
stayed busy through every retry is recorded as an infrastructure failure and redone on resume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import responders
import vllm_stub

from benchmarks.harness import models, runner
from benchmarks.harness.app import compose_config
from benchmarks.harness.infrastructure import INFRASTRUCTURE, model_lost
from benchmarks.harness.results import RunFiles, read_jsonl
from benchmarks.harness.schema import BenchConfig, bench_config
from memforest.config import EmbedderConfig
from memforest.errors import ModelBusyError, ModelError, ModelUnavailableError
from memforest.llm.base import ChatRequest, ChatResponse, TransientModelError, UnreachableModelError
from memforest.llm.calllog import CallLog, CallRecord
from memforest.llm.factory import build_embedder
from memforest.llm.openai_compat import http_error
from memforest.llm.retrying import RetryingEmbedder
from memforest.llm.scheduler import Scheduler
from memforest.llm.testing import HashEmbedder, ScriptedChatModel
from memforest.llm.vllm_backend import VLLMChatModel

IN_PROCESS = ["llm=qwen3_4b", "embedder.backend=hash", "embedder.dim=64", "method=flat_sessions",
              "progress=false"]


def in_process_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> BenchConfig:
    monkeypatch.setattr(models, "_preflight", lambda llm, embedder: None)  # no GPU node here
    return bench_config(compose_config([*IN_PROCESS, f"output_root={tmp_path}"]))


def request(text: str = "hello") -> ChatRequest:
    return ChatRequest(messages=({"role": "user", "content": text},), stage="test", prompt_id="test.echo")


def test_a_dead_engine_stops_the_run_and_the_same_command_completes_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stub = vllm_stub.install(monkeypatch, "0.33.0")
    cfg = in_process_config(tmp_path, monkeypatch)
    original = RunFiles.add_judgment

    def add_judgment(self: RunFiles, row: dict[str, Any]) -> None:
        original(self, row)
        if len(read_jsonl(self.judgments_path)) == 2:
            stub.kill_engines()  # the engine core dies (preempted, OOM) after the second question

    monkeypatch.setattr(RunFiles, "add_judgment", add_judgment)
    with pytest.raises(ModelUnavailableError, match="engine is gone"):
        runner.run_benchmark(cfg)
    out = Path(cfg.run_dir)
    records = read_jsonl(out / "records.jsonl")
    assert len(records) == 2 and not any(r.get("error") for r in records)  # nothing after it recorded
    assert len(read_jsonl(out / "judgments.jsonl")) == 2
    assert not (out / "summary.md").exists()
    calls = read_jsonl(out / "llm_calls.jsonl")
    assert [c["error_kind"] for c in calls if c["error"]] == ["unavailable"]  # not retried: it is gone
    assert stub.engines[0].llm_engine.engine_core.shutdowns == 1  # closed all the same

    monkeypatch.setattr(RunFiles, "add_judgment", original)
    stub.dead = False  # a new job: a new engine
    summary = runner.run_benchmark(cfg)
    records = read_jsonl(out / "records.jsonl")
    assert sorted(r["question_id"] for r in records) == sorted({r["question_id"] for r in records})
    assert len(records) == 6 and not any(r.get("error") for r in records)
    assert len(read_jsonl(out / "judgments.jsonl")) == 6
    assert not summary.get("failures")


def test_a_build_that_loses_its_model_leaves_no_build_and_is_redone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stub = vllm_stub.install(monkeypatch, "0.33.0")
    monkeypatch.setattr(models, "_preflight", lambda llm, embedder: None)
    cfg = bench_config(compose_config([
        "llm=qwen3_4b", "embedder.backend=hash", "embedder.dim=64", "method=memforest_embed",
        "progress=false", "dataset.limit=2", "answer.enabled=false", f"output_root={tmp_path}"]))
    stub.kill_engines()  # extraction's first wave meets a dead engine: degrading around it would hide it
    with pytest.raises(ModelUnavailableError):
        runner.run_benchmark(cfg)
    out = Path(cfg.run_dir)
    assert read_jsonl(out / "builds.jsonl") == [] and read_jsonl(out / "records.jsonl") == []
    stub.dead = False
    runner.run_benchmark(cfg)
    builds = read_jsonl(out / "builds.jsonl")
    assert len(builds) == 2 and not any(b["error"] for b in builds)
    assert len(read_jsonl(out / "records.jsonl")) == 2


def test_a_request_busy_through_every_retry_is_redone_on_resume(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(responders.BUSY, "answers", True)
    cfg = bench_config(compose_config([
        "llm.backend=scripted", "llm.responder=responders:busy_answer_responder", "llm.max_retries=1",
        "llm.backoff_s=0", "embedder.backend=hash", "embedder.dim=64", "method=flat_sessions",
        "dataset.limit=2", "progress=false", f"output_root={tmp_path}"]))
    runner.run_benchmark(cfg)  # not retry_errors: an overloaded server is no answer of the system
    out = Path(cfg.run_dir)
    failed = read_jsonl(out / "records.jsonl")
    assert len(failed) == 2 and all(r["error_kind"] == INFRASTRUCTURE for r in failed)
    monkeypatch.setitem(responders.BUSY, "answers", False)
    summary = runner.run_benchmark(cfg)
    latest = {r["question_id"]: r for r in read_jsonl(out / "records.jsonl")}
    assert len(latest) == 2 and not any(r.get("error") for r in latest.values())
    verdicts = read_jsonl(out / "judgments.jsonl")
    assert len(verdicts) == 4 and not any(v["error"] for v in verdicts[2:])  # judged anew
    assert summary["questions"] == 2 and not summary.get("failures")


def test_the_scheduler_names_a_model_gone_apart_from_a_busy_one() -> None:
    log = CallLog()
    gone = Scheduler(ScriptedChatModel(lambda r: (_ for _ in ()).throw(UnreachableModelError("refused"))),
                     1, log, max_retries=2, backoff_s=0.0)
    (result,) = gone.run([request()])
    assert isinstance(result, ModelUnavailableError) and log.records[-1].retries == 2
    busy = Scheduler(ScriptedChatModel(lambda r: (_ for _ in ()).throw(TransientModelError("HTTP 503"))),
                     1, log, max_retries=2, backoff_s=0.0)
    (result,) = busy.run([request()])
    assert isinstance(result, ModelBusyError) and not isinstance(result, ModelUnavailableError)
    assert [r.error_kind for r in log.records] == ["unavailable", "busy"]


def test_a_refused_connection_is_unreachable_and_an_embedder_gone_is_unavailable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    refused = http_error(httpx.ConnectError("[Errno 111] Connection refused"))
    assert isinstance(refused, UnreachableModelError)
    assert not isinstance(http_error(httpx.ReadTimeout("slow")), UnreachableModelError)

    class Gone(HashEmbedder):
        def embed(self, texts: Any, kind: Any = "passage") -> Any:
            raise ConnectionRefusedError("nothing listens there")

    with pytest.raises(ModelUnavailableError):
        RetryingEmbedder(Gone(dim=8), max_retries=2, backoff_s=0.0).embed(["x"])
    stub = vllm_stub.install(monkeypatch, "0.33.0")
    embedder = build_embedder(EmbedderConfig(backend="vllm", model="m", dim=vllm_stub.EMBED_DIM))
    stub.kill_engines()  # its engine core died: vLLM's client raises EngineDeadError
    with pytest.raises(ModelUnavailableError, match="engine is gone"):
        embedder.embed(["x"])
    embedder.close()


def test_a_proxied_call_that_found_no_server_last_means_the_model_is_gone() -> None:
    def proxied(kind: str | None, stage: str = "chat") -> CallRecord:
        return CallRecord(0, stage, "external:chat", 0, 0, 0, 0.0, 1.0, error="x" if kind else None,
                          error_kind=kind, tags={"endpoint": "/chat/completions"})

    assert model_lost([proxied(None), proxied("unreachable")]) is not None
    assert model_lost([proxied("unreachable"), proxied(None)]) is None  # its own retry reached it
    assert model_lost([proxied("failed")]) is None


def test_close_returns_the_memory_when_the_engine_cannot_be_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    stub = vllm_stub.install(monkeypatch, "0.33.0")
    cfg = bench_config(compose_config(["llm=qwen3_4b"]))
    from benchmarks.harness.models import library_config
    from memforest.config import LLMConfig

    model = VLLMChatModel(library_config(LLMConfig, cfg.llm))
    core = stub.engines[0].llm_engine.engine_core

    def fail() -> None:
        raise RuntimeError("engine core already gone")

    monkeypatch.setattr(core, "shutdown", fail)
    with pytest.raises(RuntimeError):
        model.close()
    assert stub.cleanups == 1  # release_memory ran all the same
    assert isinstance(model.generate([request()])[0], ModelError)
    assert not isinstance(model.generate([request()])[0], ChatResponse)


def test_the_probe_stops_a_run_whose_server_is_gone_and_passes_one_that_answers() -> None:
    import socket
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from benchmarks.harness.infrastructure import ServerProbe

    class NotFound(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(404)  # a server without /models is still there
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), NotFound)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        gone_port = free.getsockname()[1]  # closed again before the probe asks it
    try:
        live = ServerProbe([f"http://127.0.0.1:{server.server_port}/v1"], ["MEMFOREST_TEST_NO_KEY"])
        live()
        live.close()
        gone = ServerProbe([f"http://127.0.0.1:{gone_port}/v1"], ["MEMFOREST_TEST_NO_KEY"])
        with pytest.raises(ModelUnavailableError, match="does not answer"):
            gone()
        gone.close()
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
