"""Hostile inputs: each class of bad input gets a clear one-line error, and nothing is written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memforest.cli import main
from memforest.config import LimitsConfig, MemForestConfig
from memforest.errors import InputError, ModelError, redact
from memforest.llm.base import ChatRequest, ChatResponse, InvalidOutputError, check_response
from memforest.llm.calllog import CallLog
from memforest.llm.scheduler import Scheduler
from memforest.llm.testing import ScriptedChatModel, rule_responder
from memforest.sessions import parse_sessions
from memforest.timeutil import resolve_event_time

FAKE = ["-o", "llm.backend=scripted", "-o", "embedder.backend=hash", "-o", "embedder.dim=64"]


def session(content: Any = "I live in Lisbon.", **extra: Any) -> dict[str, Any]:
    return {"session_id": "s1", "timestamp": "2023-05-01T10:00",
            "turns": [{"role": "user", "content": content}], **extra}


# ---------------------------------------------------------------- sessions


@pytest.mark.parametrize(("raw", "message"), [
    (session("a\x00b"), "NUL"),
    (session("\x01\x02\x03 \t\u200b\ufeff\u00ad"), "nothing readable in any turn"),
    (session("caf\udce9"), "not valid Unicode"),
    (session(12), "content must be a string"),
    (session(speaker="x"), "unknown key(s) 'speaker'"),
    ({**session(), "timestamp": "0001-01-01"}, "outside the years"),
    ({**session(), "timestamp": "9999-12-31"}, "outside the years"),
    ({**session(), "timestamp": 1e300}, "outside the years"),
    ({**session(), "turns": [{"role": "user", "content": "hi", "has_answer": True}]},
     "unknown key(s) 'has_answer'"),
])
def test_bad_sessions_are_refused_naming_the_problem(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError, match="^session s1") as refused:
        parse_sessions([raw], LimitsConfig())
    assert message in str(refused.value)


def test_inputs_over_the_configured_limits_are_refused() -> None:
    limits = MemForestConfig().limits
    limits.turn_chars, limits.turns_per_session, limits.sessions_per_call = 10, 2, 1
    with pytest.raises(InputError, match="limits.turn_chars=10"):
        parse_sessions([session("x" * 11)], limits)
    with pytest.raises(InputError, match="limits.turns_per_session=2"):
        parse_sessions([{**session(), "turns": [{"role": "user", "content": "hi"}] * 3}], limits)
    with pytest.raises(InputError, match="limits.sessions_per_call=1"):
        parse_sessions([session(), {**session(), "session_id": "s2"}], limits)


def test_huge_values_are_echoed_cut_short() -> None:
    with pytest.raises(InputError) as refused:
        parse_sessions([{**session(), "session_id": "x" * 10_000_000 + "/"}], LimitsConfig())
    assert len(str(refused.value)) < 300
    with pytest.raises(InputError) as refused:
        parse_sessions([{**session(), "timestamp": "9" * 10_000_000}], LimitsConfig())
    assert len(str(refused.value)) < 300


def test_relative_event_times_beyond_the_calendar_are_dropped() -> None:
    now = 1_683_000_000.0
    assert resolve_event_time("", "in 99999999999 days", now) is None
    assert resolve_event_time("0001-01-01", "", now) is None
    assert resolve_event_time("", "2 days ago", now) == pytest.approx(now - 2 * 86400)


# ---------------------------------------------------------------- the command line


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    err = capsys.readouterr().err
    return code, err


def assert_one_line_failure(code: int, err: str, *words: str) -> None:
    assert code != 0
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("memforest: error: "), err
    assert "Traceback" not in err
    for word in words:
        assert word in lines[0]


@pytest.mark.parametrize(("option", "word"), [
    ("chunk.max_turns=abc", "chunk.max_turns"),
    ("degraded_ok=maybe", "degraded_ok"),
    ("chunk.nonsense=1", "nonsense"),
    ("llm.backend=teleport", "teleport"),
])
def test_bad_options_fail_in_one_line_before_anything_is_written(option: str, word: str, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "s.json"
    data.write_text(json.dumps([session()]))
    store = tmp_path / "store"
    code, err = run_cli(capsys, "ingest", "--store", str(store), "--user", "u", *FAKE, "-o", option,
                        str(data))
    assert_one_line_failure(code, err, word)
    assert not (store / "users" / "u" / "memory.sqlite").exists()


def test_bad_files_fail_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = str(tmp_path / "store")
    bad_yaml = tmp_path / "c.yaml"
    bad_yaml.write_text("chunk: [unclosed\n")
    nested = tmp_path / "nested.json"
    nested.write_text("[" * 100_000 + "]" * 100_000)
    data = tmp_path / "s.json"
    data.write_text(json.dumps([session()]))
    cases = [
        (["ingest", "--store", store, "--user", "u", "--config", str(bad_yaml), str(data)], "not valid YAML"),
        (["ingest", "--store", store, "--user", "u", *FAKE, str(nested)], "nested too deeply"),
        (["calls", str(tmp_path / "missing.jsonl")], "does not exist"),
        (["merge", "--store", store, "--from", "", "--to", "t", *FAKE], "at least one source"),
    ]
    for argv, word in cases:
        code, err = run_cli(capsys, *argv)
        assert_one_line_failure(code, err, word)
    assert not (tmp_path / "store" / "users").exists() or not any((tmp_path / "store" / "users").iterdir())


def test_debug_shows_the_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run_cli(capsys, "--debug", "calls", str(tmp_path / "missing.jsonl"))
    assert code == 2 and "Traceback" in err


# ---------------------------------------------------------------- model faults


def request(schema: dict[str, Any] | None = None) -> ChatRequest:
    return ChatRequest(({"role": "user", "content": "x"},), stage="extract", prompt_id="test",
                       json_schema=schema, max_tokens=50)


def test_a_backend_that_raises_is_a_model_error_not_a_crash() -> None:
    class Exploding(ScriptedChatModel):
        def generate(self, requests: Any) -> Any:
            raise RuntimeError("CUDA error: device-side assert")

    [result] = Scheduler(Exploding(), concurrency=1, max_retries=1, backoff_s=0).run([request()])
    assert isinstance(result, ModelError) and "CUDA error" in str(result)


def test_valid_json_of_the_wrong_shape_is_invalid_output() -> None:
    schema = {"type": "object", "properties": {"facts": {"type": "array", "items": {
        "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}},
        "required": ["facts"]}
    for text, where in (('{"facts": {"text": "x"}}', "$.facts"),
                        ('{"facts": [{"text": 5}]}', "$.facts[0].text"), ('{"fact": []}', "$.facts"),
                        ("[1]", "$")):
        out = check_response(request(schema), ChatResponse(text))
        assert isinstance(out, InvalidOutputError) and where in str(out), text
    assert isinstance(check_response(request(schema), ChatResponse('{"facts": [{"text": "ok"}]}')),
                      ChatResponse)


def test_secrets_echoed_by_a_server_never_reach_the_log_or_the_message(tmp_path: Path) -> None:
    echo = ("HTTP 401: rejected header Authorization: Bearer sk-live-0123456789abcdef "
            "for key sk-0123456789abcdef")
    log = CallLog(tmp_path / "calls.jsonl")
    model = ScriptedChatModel(lambda r: RuntimeError(echo) if r.stage == "extract" else rule_responder(r))
    [result] = Scheduler(model, concurrency=1, log=log, max_retries=0).run([request()])
    log.close()
    written = (tmp_path / "calls.jsonl").read_text()
    assert isinstance(result, ModelError)
    for text in (written, str(result)):
        assert "sk-live" not in text and "0123456789abcdef" not in text and "[redacted]" in text
    assert redact("nothing secret here") == "nothing secret here"
