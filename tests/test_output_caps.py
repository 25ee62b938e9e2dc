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
from benchmarks.serving.output_caps import KINDS, OutputCaps, SourceBounds, request_kind, worst_tokens
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
    SourceBounds(node.source_max_items, node.source_max_chars)  # positive where set
    assert node.source_max_items and node.source_max_chars


def test_the_source_decodes_unbounded_arrays_bounded_and_the_call_says_so(tmp_path):
    entities = {"type": "object", "properties": {"names": {"type": "array", "items": {"type": "string"}}}}
    seen = []
    chat = ScriptedChatModel(lambda r: seen.append(r.json_schema) or {"names": ["Ann"]})
    served = tmp_path / "served_calls.jsonl"

    def ask(url, schema):
        body = {"model": "m", "messages": [{"role": "user", "content": "name them"}],
                "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": schema}}}
        return httpx.post(url + "/chat/completions", json=body, timeout=30).json()

    with LatencyModelServer(FAST, chat=chat, log_path=served, bounds=SourceBounds(items=3),
                            caps=OutputCaps({"json": 100})) as server:
        ask(server.base_url, entities)
        ask(server.base_url, extraction.schema(6, 300))  # bounded already: as sent
        summary_row = server.summary()
    assert seen[0]["properties"]["names"]["maxItems"] == 3 and seen[1] == extraction.schema(6, 300)
    rows = [json.loads(line) for line in served.read_text().splitlines()]
    assert [r["bounded"] for r in rows] == [True, False]
    assert rows[0]["source_bounds"] == {"items": 3, "chars": None} and rows[1]["source_bounds"] is None
    assert summary_row["source_bounds"] == {"items": 3, "chars": None}
    assert summary_row["bounded"] == {"json": 1}
    # the key is the request's as sent: a replay of the log finds it, and a replayed answer is not bounded
    with LatencyModelServer(FAST, replay=ReplaySource(served), log_path=tmp_path / "again.jsonl",
                            bounds=SourceBounds(items=3)) as server:
        assert ask(server.base_url, entities)["choices"][0]["message"]["content"] == '{"names": ["Ann"]}'
    again = [json.loads(line) for line in (tmp_path / "again.jsonl").read_text().splitlines()]
    assert again[0]["source"] == "replay" and again[0]["bounded"] is False


def test_source_bounds_hold_every_unbounded_array_and_string_and_keep_the_schemas_own() -> None:
    schema = {"type": "object", "$defs": {"E": {"type": "object", "properties": {
        "names": {"type": "array", "items": {"type": "string"}},
        "type": {"type": "string", "enum": ["a", "b"]}}}},  # a property named "type"; an enum string
        "properties": {
            "entities": {"type": "array", "items": {"$ref": "#/$defs/E"}},
            "few": {"type": "array", "items": {"type": "integer"}, "maxItems": 2},
            "many": {"type": "array", "items": {"type": "integer"}, "maxItems": 50},
            "at_least": {"type": "array", "items": {"type": "integer"}, "minItems": 12},
            "maybe": {"anyOf": [{"type": ["array", "null"], "items": {"type": "string"}}, {"type": "null"}]},
            "when": {"type": "string", "format": "date-time"},
            "short": {"type": "string", "maxLength": 900},
            "long": {"type": "string", "minLength": 500}}}
    before = json.dumps(schema, sort_keys=True)
    bounded, changed = SourceBounds(items=8, chars=400).apply(schema)
    assert changed and json.dumps(schema, sort_keys=True) == before  # the input is not modified
    props, entity = bounded["properties"], bounded["$defs"]["E"]["properties"]
    assert props["entities"]["maxItems"] == 8 and entity["names"]["maxItems"] == 8
    assert entity["names"]["items"]["maxLength"] == 400 and "maxLength" not in entity["type"]
    assert props["few"]["maxItems"] == 2 and props["many"]["maxItems"] == 50  # own bounds are kept
    assert props["at_least"]["maxItems"] == 12  # never below the schema's own minimum
    assert props["maybe"]["anyOf"][0]["maxItems"] == 8
    assert "maxLength" not in props["when"] and props["short"]["maxLength"] == 900
    assert props["long"]["maxLength"] == 500
    only_items, _ = SourceBounds(items=8).apply(schema)
    assert "maxLength" not in only_items["$defs"]["E"]["properties"]["names"]["items"]


def test_source_bounds_change_nothing_in_a_bounded_or_free_schema() -> None:
    from memforest.prompts import browse, planner

    for own in (extraction.schema(6, 300), summary.schema(200), equivalence.SCHEMA, browse.schema(4),
                planner.schema(3)):  # MemForest bounds every array and string of its own
        assert SourceBounds(items=8, chars=400).apply(own) == (own, False)
    assert SourceBounds(items=8, chars=400).apply({"type": "object"}) == ({"type": "object"}, False)
    assert SourceBounds().apply({"type": "array", "items": {"type": "string"}})[1] is False
    with pytest.raises(ValueError, match="positive"):
        SourceBounds(items=0)


EDGES = {"type": "object", "$defs": {"Edge": {"type": "object", "properties": {
    "source": {"type": "string"}, "target": {"type": "string"}, "relation": {"type": "string"},
    "fact": {"type": "string"}, "valid_at": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    "episodes": {"type": "array", "items": {"type": "integer"}}}}},
    "properties": {"edges": {"type": "array", "items": {"$ref": "#/$defs/Edge"}}}}


def test_bounds_are_lowered_until_the_worst_case_answer_fits_the_limit() -> None:
    assert worst_tokens(EDGES) is None  # unbounded as sent
    bounds = SourceBounds(items=8, chars=400)
    roomy, used = bounds.fit(EDGES, 100_000)
    assert used == bounds and roomy == bounds.apply(EDGES)[0]
    for limit in (2000, 872, 300):
        fitted, used = bounds.fit(EDGES, limit)
        worst = worst_tokens(fitted)
        assert used is not None and worst is not None and worst <= limit
        assert fitted == used.apply(EDGES)[0]
        assert used.chars is not None and used.chars >= 100 or used.items == 1  # items go before text
    assert bounds.fit(EDGES, 872)[1] == SourceBounds(items=2, chars=100)
    # MemForest's own schema: as sent, and its estimate agrees with MemForest's own within an enum quote
    own = extraction.schema(6, 300)
    from memforest.prompts import token_bound

    estimate = worst_tokens(own)
    assert bounds.fit(own, 10) == (own, None) and estimate is not None
    assert abs(estimate - token_bound(own)) < 20
    assert worst_tokens({"type": "object"}) is None
    assert worst_tokens({"type": "string", "pattern": "a+"}) is None
