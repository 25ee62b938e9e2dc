import json
import math

import pytest

from memforest.errors import ModelError
from memforest.llm.base import ChatRequest, InvalidOutputError, TransientModelError
from memforest.llm.calllog import CallLog, format_summary, read_log, summarize
from memforest.llm.scheduler import Scheduler
from memforest.llm.testing import ScriptedChatModel

SCHEMA = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}


def req(i: int, stage: str = "extract", schema: dict | None = SCHEMA) -> ChatRequest:
    return ChatRequest(({"role": "user", "content": f"item {i}"},), stage, "p", 2, schema)


@pytest.mark.parametrize("n,p", [(1, 1), (7, 3), (12, 4), (5, 8)])
def test_waves_and_concurrency_bound(n, p):
    model = ScriptedChatModel(lambda r: {"x": 1}, latency_s=0.02, max_concurrency=p)
    sched = Scheduler(model, concurrency=p)
    out = sched.run([req(i) for i in range(n)], level=3)
    assert len(out) == n and all(json.loads(o.text) == {"x": 1} for o in out)
    waves = {r.wave for r in sched.log.records}
    assert len(waves) == math.ceil(n / p)
    assert model.max_in_flight <= p
    if n >= p > 1:
        assert model.max_in_flight > 1
    assert {r.level for r in sched.log.records} == {3}
    sched.close()


def test_results_keep_request_order():
    model = ScriptedChatModel(lambda r: {"x": int(r.messages[0]["content"].split()[1])}, max_concurrency=3)
    sched = Scheduler(model, concurrency=3)
    out = sched.run([req(i) for i in range(10)])
    assert [json.loads(o.text)["x"] for o in out] == list(range(10))


def test_transient_errors_are_retried_then_recorded():
    attempts: dict[str, int] = {}

    def flaky(r):
        key = r.messages[0]["content"]
        attempts[key] = attempts.get(key, 0) + 1
        if key == "item 0" and attempts[key] < 3:
            return TransientModelError("503")
        if key == "item 1":
            return TransientModelError("always down")
        return {"x": 0}

    sched = Scheduler(ScriptedChatModel(flaky), concurrency=2, max_retries=2, backoff_s=0.0)
    ok, failed = sched.run([req(0), req(1)])
    assert not isinstance(ok, ModelError)
    assert isinstance(failed, ModelError) and "always down" in str(failed)
    recs = {r.tags.get("k", r.id): r for r in sched.log.records}
    by_error = sorted(recs.values(), key=lambda r: r.error is not None)
    assert by_error[0].retries == 2 and by_error[0].error is None
    assert by_error[1].retries == 2 and "TransientModelError" in by_error[1].error


def test_invalid_json_gets_bounded_retries():
    calls = []

    def bad(r):
        calls.append(1)
        return "not json {"

    sched = Scheduler(ScriptedChatModel(bad), concurrency=1, json_retries=2)
    (out,) = sched.run([req(0)])
    assert isinstance(out, ModelError)
    assert len(calls) == 3
    (rec,) = sched.log.records
    assert rec.retries == 2 and "not valid JSON" in rec.error
    with pytest.raises(ModelError):
        sched.run_strict([req(1)])


def test_truncation_is_a_failure_and_fatal_errors_are_not_retried():
    from memforest.llm.base import ChatResponse

    class Model(ScriptedChatModel):
        def _one(self, request):
            if request.stage == "fatal":
                return ValueError("bad request")
            return ChatResponse('{"x": 1', finish_reason="length")

    sched = Scheduler(Model(), concurrency=2, json_retries=1)
    trunc, fatal = sched.run([req(0), req(1, stage="fatal")])
    assert isinstance(trunc, ModelError) and "truncated" in str(trunc)
    assert isinstance(fatal, ModelError)
    fatal_rec = next(r for r in sched.log.records if r.stage == "fatal")
    assert fatal_rec.retries == 0


def test_free_text_may_be_truncated_when_the_request_allows_it():
    from dataclasses import replace

    from memforest.llm.base import ChatResponse

    class Model(ScriptedChatModel):
        def _one(self, request):
            return ChatResponse("The answer is Lis", finish_reason="length")

    sched = Scheduler(Model(), concurrency=1, json_retries=2)
    free = replace(req(0, stage="answer", schema=None), allow_truncation=True)
    kept, strict = sched.run([free, req(1, stage="answer", schema=None)])
    assert not isinstance(kept, ModelError) and kept.text == "The answer is Lis"
    assert isinstance(strict, ModelError) and "truncated" in str(strict)
    by_stage = [r for r in sched.log.records if r.error is None]
    assert len(by_stage) == 1 and by_stage[0].retries == 0


def test_batched_backend_gets_whole_waves():
    class Batched(ScriptedChatModel):
        sizes: list[int] = []

        def generate(self, requests):
            self.sizes.append(len(requests))
            return super().generate(requests)

    model = Batched(lambda r: {"x": 2} if r.messages[0]["content"] != "item 4" else "oops", batched=True)
    sched = Scheduler(model, concurrency=5, json_retries=1)
    out = sched.run([req(i) for i in range(8)])
    assert model.sizes == [5, 1, 3]  # wave 1, retry of the invalid item, wave 2
    assert isinstance(out[4], ModelError) and sum(isinstance(o, ModelError) for o in out) == 1


def test_call_log_file_format_and_summary(tmp_path):
    log = CallLog(tmp_path / "calls.jsonl")
    sched = Scheduler(ScriptedChatModel(lambda r: {"x": 1}), concurrency=2, log=log)
    sched.run([req(i) for i in range(3)], level=0, tags={"op": "ingest"})
    sched.run([req(i, stage="summarize", schema=None) for i in range(2)], level=1)
    log.close()
    lines = (tmp_path / "calls.jsonl").read_text().splitlines()
    assert len(lines) == 5
    row = json.loads(lines[0])
    for key in ("id", "stage", "prompt_id", "prompt_version", "wave", "level", "start", "end",
                "prompt_tokens", "cached_prompt_tokens", "completion_tokens", "retries", "error"):
        assert key in row
    assert row["tags"] == {"op": "ingest"} and row["prompt_version"] == 2
    s = summarize(read_log(tmp_path / "calls.jsonl"))
    assert s["calls"] == 5 and s["waves"] == 3
    assert s["by_stage"]["extract"]["waves"] == 2 and s["by_stage"]["summarize"]["calls"] == 2
    assert s["prompt_tokens"] == sum(json.loads(x)["prompt_tokens"] for x in lines)
    assert "total" in format_summary(s)


def test_cli_calls_command(tmp_path, capsys):
    from memforest.cli import main

    log = CallLog(tmp_path / "c.jsonl")
    Scheduler(ScriptedChatModel(lambda r: {"x": 1}), log=log).run([req(0)])
    log.close()
    assert main(["calls", str(tmp_path / "c.jsonl"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["calls"] == 1


def test_scripted_returns_exceptions_in_place():
    model = ScriptedChatModel(lambda r: InvalidOutputError("x"))
    assert isinstance(model.generate([req(0)])[0], InvalidOutputError)


def test_retries_after_invalid_output_resample():
    seen = []

    def greedy_then_sampled(r):
        seen.append((r.temperature, r.seed))
        return {"x": 1} if r.temperature > 0 else "looping {"

    sched = Scheduler(ScriptedChatModel(greedy_then_sampled), concurrency=1, json_retries=2)
    (out,) = sched.run([req(0)])
    assert not isinstance(out, ModelError)
    assert seen[0] == (0.0, None) and seen[1][0] >= 0.7 and seen[1][1] is not None
    assert sched.log.records[0].retries == 1


def test_schedulers_sharing_a_log_number_calls_and_waves_uniquely(tmp_path):
    path = tmp_path / "calls.jsonl"
    log = CallLog(path)
    first = Scheduler(ScriptedChatModel(lambda r: {"x": 1}), concurrency=2, log=log)
    second = Scheduler(ScriptedChatModel(lambda r: {"x": 2}), concurrency=2, log=log)
    first.run([req(i) for i in range(3)])
    second.run([req(i) for i in range(3)])
    ids = [r.id for r in log.records]
    assert sorted(ids) == list(range(1, 7))
    assert len({r.wave for r in log.records}) == 4  # two waves each, none shared
    log.close()
    with path.open("a") as f:
        f.write('{"id": 99, "wa')  # a line torn by a crash
    reopened = CallLog(path)
    Scheduler(ScriptedChatModel(lambda r: {"x": 3}), log=reopened).run([req(0)])
    assert reopened.records[0].id == 7 and reopened.records[0].wave == 5
    reopened.close()
    lines = path.read_text().splitlines()
    assert lines[-2] == '{"id": 99, "wa' and json.loads(lines[-1])["id"] == 7
    assert [r.id for r in read_log(path)] == [*range(1, 7), 7]


def test_summary_counts_chat_calls_and_keeps_proxied_embeddings_apart():
    from memforest.llm.calllog import CallRecord

    def rec(i, stage, wave, seconds, tokens):
        return CallRecord(i, stage, "p", 1, wave, 0, 0.0, seconds, prompt_tokens=tokens, completion_tokens=1)

    records = [rec(1, "extract", 1, 2.0, 10), rec(2, "extract", 1, 3.0, 10), rec(3, "summarize", 2, 1.0, 5),
               rec(4, "chat", 0, 4.0, 7), rec(5, "embed", 0, 0.5, 100), rec(6, "embed", 0, 0.5, 50)]
    s = summarize(records)
    assert (s["calls"], s["prompt_tokens"], s["completion_tokens"]) == (4, 32, 4)
    assert (s["embedding_calls"], s["embedding_tokens"]) == (2, 150)
    assert s["waves"] == 2 and s["critical_path_seconds"] == 4.0  # the unwaved proxied call is not a wave
    assert s["by_stage"]["embed"]["calls"] == 2 and s["by_stage"]["chat"]["waves"] == 0
