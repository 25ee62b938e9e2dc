"""Output caps of the simulated backbone: a request's prompt kind, the completion tokens charged for it (the
latency model decodes and the usage reports at most the cap; the text stays whole), what is recorded, and
that a replayed log is charged as recorded."""

import json

import httpx
import pytest

from benchmarks.harness.app import compose_config
from benchmarks.harness.schema import bench_config
from benchmarks.serving.latency_model import LatencyParams
from benchmarks.serving.latency_server import LatencyModelServer, ReplaySource
from benchmarks.serving.output_caps import KINDS, OutputCaps, request_kind
from memforest.llm.base import ChatRequest
from memforest.llm.testing import ScriptedChatModel
from memforest.prompts import equivalence, extraction, summary

FAST = LatencyParams(name="fast", ttft_base_s=0.001, prefill_tokens_per_s=1e6, decode_s_per_token=0.0001,
                     max_concurrency=4, block_chars=8)


def _request(messages, schema=None):
    return ChatRequest(messages=tuple(messages), stage="served", prompt_id="external", json_schema=schema)


def test_memforest_prompts_are_told_apart_and_others_fall_back_to_json_or_text():
    cell = extraction.messages("user: I moved to Davis.", "2023-05-01")
    assert request_kind(_request(cell)) == "extract_facts"
    assert request_kind(_request(summary.messages("user", ["a", "b"], 150))) == "interval_summary"
    assert request_kind(_request([{"role": "system", "content": equivalence.SYSTEM}])) == "fact_equivalence"
    other = [{"role": "system", "content": "You are a Personal Information Organizer."}]
    assert request_kind(_request(other, {"type": "object"})) == "json"
    assert request_kind(_request(other)) == "text"
    assert request_kind(_request([])) == "text"


def test_caps_charge_at_most_the_cap_and_say_when_they_were_hit():
    caps = OutputCaps({"extract_facts": 10, "default": 50})
    assert caps.charged("extract_facts", 30) == (10, 10, True)
    assert caps.charged("extract_facts", 10) == (10, 10, False)
    assert caps.charged("json", 60) == (50, 50, True)
    assert OutputCaps({}).charged("text", 10_000) == (10_000, None, False)
    with pytest.raises(ValueError, match="unknown prompt kind 'extraction'"):
        OutputCaps({"extraction": 10})
    with pytest.raises(ValueError, match="must be positive"):
        OutputCaps({"text": 0})
    assert "answer_from_memory" in KINDS and "json" in KINDS


def test_the_source_is_asked_for_at_most_the_cap_and_an_answer_stopped_there_is_capped():
    caps = OutputCaps({"json": 30})
    assert caps.limit("json", 2000) == 30 and caps.limit("json", 20) == 20
    assert OutputCaps({}).limit("text", 2000) == 2000
    # stopped at the cap where the request allowed more: capped; cut at the request's own max_tokens: not
    assert caps.charged("json", 30, finish_reason="length", max_tokens=2000) == (30, 30, True)
    assert caps.charged("json", 20, finish_reason="length", max_tokens=20) == (20, 30, False)
    assert caps.charged("json", 30, finish_reason="length", max_tokens=30) == (30, 30, False)
    assert caps.charged("json", 30, finish_reason="stop", max_tokens=2000) == (30, 30, False)


def _chat(url, text):
    body = {"model": "m", "messages": [{"role": "user", "content": text}]}
    return httpx.post(url + "/chat/completions", json=body, timeout=30).json()


def test_the_server_charges_capped_answers_records_them_and_replays_them_alike(tmp_path):
    rambling = " ".join(["word"] * 40)
    served = tmp_path / "served_calls.jsonl"
    caps = OutputCaps({"text": 25})
    chat = ScriptedChatModel(lambda r: rambling if "long" in r.messages[0]["content"] else "short")
    with LatencyModelServer(FAST, chat=chat, log_path=served, caps=caps) as server:
        long_answer = _chat(server.base_url, "a long answer please")
        short_answer = _chat(server.base_url, "a short one")
        summary_row = server.summary()
    assert long_answer["choices"][0]["message"]["content"] == rambling  # the text is kept whole
    assert long_answer["usage"]["completion_tokens"] == 25 and short_answer["usage"]["completion_tokens"] == 1
    assert summary_row["output_caps"] == {"text": 25}
    assert summary_row["kinds"] == {"text": 2} and summary_row["capped"] == {"text": 1}
    rows = [json.loads(line) for line in served.read_text().splitlines()]
    assert [(r["kind"], r["cap"], r["capped"], r["source_completion_tokens"], r["completion_tokens"])
            for r in rows] == [("text", 25, True, 40, 25), ("text", 25, False, 1, 1)]
    assert rows[0]["decode_s"] == pytest.approx(25 * FAST.decode_s_per_token, rel=1e-3)
    # replayed under the same caps: charged as recorded; under a higher cap, the source's own length shows
    for cap, charged in ((25, 25), (100, 40)):
        with LatencyModelServer(FAST, replay=ReplaySource(served), caps=OutputCaps({"text": cap})) as server:
            assert _chat(server.base_url, "a long answer please")["usage"]["completion_tokens"] == charged


def test_the_simulated_config_states_its_caps():
    node = bench_config(compose_config(["llm=qwen3_30b_a3b_simulated"])).llm.latency_model
    assert node is not None and node.output_caps["extract_facts"] > 0 and node.output_caps["default"] > 0
    OutputCaps(dict(node.output_caps))  # every kind it names is known
