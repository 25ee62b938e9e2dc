"""Mem0's write path on the simulated backbone: its schema-less JSON requests (built by the installed
mem0ai from its own prompts) are decoded under the reply shape each prompt asks for, bounded, so that
Mem0 parses the replies, stores memories and makes its update calls; an unknown schema-less request is
decoded as before; and the write-path table counts stored memories and update calls and gives a system
that stored nothing no ratio. The content source here is a scripted model that writes the largest
answer the schema it is given allows (a schema-less object: a long free object), standing in for a
model that fills whatever it is allowed to."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from baselines.common import quiet_environment
from benchmarks.harness import write_path
from benchmarks.serving.latency_model import LatencyParams
from benchmarks.serving.latency_server import LatencyModelServer
from benchmarks.serving.output_caps import OutputCaps, SourceBounds, worst_tokens
from benchmarks.serving.reply_shapes import SHAPES, UNKNOWN, reply_shape, shape_label
from memforest.llm.base import ChatRequest
from memforest.llm.testing import HashEmbedder, ScriptedChatModel

FAST = LatencyParams(name="fast", ttft_base_s=0.001, prefill_tokens_per_s=1e6, decode_s_per_token=0.0001,
                     max_concurrency=4, block_chars=8)
BOUNDS = SourceBounds(items=8, chars=400)  # the simulated config's
CAPS = OutputCaps({"default": 872})
FREE = {"type": "object"}
needs_mem0 = pytest.mark.skipif(importlib.util.find_spec("mem0") is None, reason="mem0ai not installed")


@pytest.fixture(autouse=True)
def _no_telemetry() -> Iterator[None]:
    """Mem0 reads its telemetry switch when first imported, which may happen here."""
    with quiet_environment():
        yield


def fill(schema: dict[str, Any], index: int = 0) -> Any:
    """The largest answer `schema` allows: every array at its maxItems, every string at its maxLength,
    the first value of an enum, the first branch of an anyOf; unbounded arrays and strings at 40 items /
    3,000 characters, and a free object as one long note (which no Mem0 parser accepts)."""
    if "anyOf" in schema:
        return fill(schema["anyOf"][0], index)
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties")
        return {k: fill(v, index) for k, v in props.items()} if props else {"note": "x" * 3000}
    if kind == "array":
        return [fill(schema.get("items", {}), i) for i in range(int(schema.get("maxItems", 40)))]
    if kind == "string":
        n = int(schema.get("maxLength", 3000))
        return f"{index} {'y' * n}"[:n]
    return 0


def schema_filler(request: ChatRequest) -> Any:
    return fill(request.json_schema) if request.json_schema is not None else "a text answer"


def recording_filler(seen: list[Any]) -> ScriptedChatModel:
    """The filler, keeping the schema of every request it answers in `seen`."""
    def answer(request: ChatRequest) -> Any:
        seen.append(request.json_schema)
        return schema_filler(request)
    return ScriptedChatModel(answer)


def _mem0_extraction(text: str, custom: str | None = None) -> list[dict[str, str]]:
    """Mem0 1.x's extraction messages for a two-message add, built as `Memory._add_to_vector_store`
    builds them."""
    from mem0.memory.utils import ensure_json_instruction, get_fact_retrieval_messages, parse_messages

    parsed = parse_messages([{"role": "user", "content": text}, {"role": "assistant", "content": "Nice."}])
    system, user = (custom, f"Input:\n{parsed}") if custom else get_fact_retrieval_messages(parsed)
    system, user = ensure_json_instruction(system, user)
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def _mem0_update(old: list[dict[str, str]], facts: list[str]) -> list[dict[str, str]]:
    """Mem0 1.x's update request: one user message around its update prompt."""
    from mem0.configs.prompts import get_update_memory_messages

    return [{"role": "user", "content": get_update_memory_messages(old, facts)}]


def _request(messages: list[dict[str, str]], schema: dict[str, Any] | None = FREE) -> ChatRequest:
    return ChatRequest(messages=tuple(messages), stage="served", prompt_id="external", json_schema=schema)


def _post(url: str, messages: list[dict[str, str]], json_object: bool = True) -> str:
    """A chat request as Mem0's OpenAI client sends it (max_tokens 2000, the adapter's)."""
    body: dict[str, Any] = {"model": "m", "messages": messages, "max_tokens": 2000, "temperature": 0.0}
    if json_object:
        body["response_format"] = {"type": "json_object"}
    reply = httpx.post(url + "/chat/completions", json=body, timeout=30)
    assert reply.status_code == 200, reply.text
    return str(reply.json()["choices"][0]["message"]["content"])


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@needs_mem0
def test_mem0_requests_are_recognised_by_their_own_prompts() -> None:
    from mem0.configs.prompts import FACT_RETRIEVAL_PROMPT

    extraction = _mem0_extraction("I adopted a grey cat called Miso.")
    update = _mem0_update([{"id": "0", "text": "Has a cat"}], ["Cat is called Miso"])
    assert shape_label(_request(extraction)) == "mem0.facts"
    assert shape_label(_request(_mem0_extraction("hi", custom=FACT_RETRIEVAL_PROMPT))) == "mem0.facts"
    # a custom extraction prompt that never says json: Mem0 appends its own instruction, recognised too
    assert shape_label(_request(_mem0_extraction("hi", custom="List what matters."))) == "mem0.facts"
    assert shape_label(_request(update)) == "mem0.update"
    assert shape_label(_request(_mem0_update([], ["Cat is called Miso"]))) == "mem0.update"
    # only a request for a JSON object with no schema of its own takes a shape
    assert shape_label(_request(extraction, schema=None)) is None
    own = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert shape_label(_request(extraction, own)) is None
    assert shape_label(_request([{"role": "user", "content": "Reply in JSON."}])) == UNKNOWN
    assert reply_shape(_request([])) is None


@needs_mem0
def test_mem0_update_schema_follows_the_memory_its_prompt_shows() -> None:
    """The prompt: existing ids for updates and deletes, new ids for additions, and an empty memory gets
    its facts added. So an empty memory allows ADD alone, and a listed memory UPDATE/DELETE/NONE."""
    shape = next(s for s in SHAPES if s.name == "mem0.update")

    def events(schema: dict[str, Any]) -> list[tuple[Any, list[str]]]:
        items = schema["properties"]["memory"]["items"]
        branches = items.get("anyOf", [items])
        return [(b["properties"]["id"].get("enum"), b["properties"]["event"]["enum"]) for b in branches]

    empty = _mem0_update([], ["Cat is called Miso"])[0]["content"]
    assert events(shape.schema_for(empty)) == [(None, ["ADD"])]
    shown = _mem0_update([{"id": "0", "text": "Has a cat"}, {"id": "1", "text": "Lives in Oslo"}],
                         ["Cat is called Miso"])[0]["content"]
    assert events(shape.schema_for(shown)) == [(["0", "1"], ["UPDATE", "DELETE", "NONE"]), (None, ["ADD"])]
    # a fact that itself quotes an id is not a shown memory
    quoted = _mem0_update([], ["He said 'id': '7' aloud"])[0]["content"]
    assert events(shape.schema_for(quoted)) == [(None, ["ADD"])]
    for text in (empty, shown):
        fitted, used = BOUNDS.fit(shape.schema_for(text), 872)
        assert used is not None and (worst_tokens(fitted) or 10**9) <= 872


def test_every_shape_fits_the_cap_once_bounded() -> None:
    for shape in SHAPES:
        assert worst_tokens(shape.schema) is None  # unbounded as the prompt describes it
        fitted, used = BOUNDS.fit(shape.schema, 872)
        worst = worst_tokens(fitted)
        assert used is not None and worst is not None and worst <= 872, shape.name
        assert shape.describe()["library"].startswith("mem0ai")


@needs_mem0
def test_mem0_replies_parse_into_its_structures_and_are_bounded(tmp_path: Path) -> None:
    from mem0.memory.utils import normalize_facts, remove_code_blocks

    seen: list[Any] = []
    chat = recording_filler(seen)
    served = tmp_path / "served_calls.jsonl"
    with LatencyModelServer(FAST, chat=chat, log_path=served, caps=CAPS, bounds=BOUNDS) as server:
        facts_text = _post(server.base_url, _mem0_extraction("I adopted a grey cat called Miso."))
        update_text = _post(server.base_url, _mem0_update([{"id": "0", "text": "Has a cat"}], ["Miso"]))
        summary = server.summary()
    facts = normalize_facts(json.loads(remove_code_blocks(facts_text), strict=False)["facts"])
    bounded = seen[0]["properties"]["facts"]
    items, chars = bounded["maxItems"], bounded["items"]["maxLength"]
    assert 0 < len(facts) == items <= 8 and all(isinstance(f, str) and len(f) <= chars <= 400 for f in facts)
    actions = json.loads(remove_code_blocks(update_text), strict=False)["memory"]
    assert 0 < len(actions) <= 8
    assert all({"id", "text", "event"} <= set(a) and a["event"] in ("ADD", "UPDATE", "DELETE", "NONE")
               for a in actions)
    assert all((worst_tokens(schema) or 10**9) <= 872 for schema in seen)
    rows = _rows(served)
    assert [(r["shape"], r["bounded"], r["kind"]) for r in rows] == [("mem0.facts", True, "json"),
                                                                      ("mem0.update", True, "json")]
    assert [r["shape_role"] for r in rows] == ["extract", "update"]  # what the analysis reads
    assert summary["shapes"] == {"mem0.facts": 1, "mem0.update": 1}
    assert set(summary["reply_shapes"]) == {s.name for s in SHAPES}


def test_an_unknown_schemaless_request_is_decoded_as_sent(tmp_path: Path) -> None:
    seen: list[Any] = []
    chat = recording_filler(seen)
    served = tmp_path / "served_calls.jsonl"
    with LatencyModelServer(FAST, chat=chat, log_path=served, caps=CAPS, bounds=BOUNDS) as server:
        free = _post(server.base_url, [{"role": "user", "content": "Describe the cat as JSON."}])
        text = _post(server.base_url, [{"role": "user", "content": "Describe the cat."}], json_object=False)
        summary = server.summary()
    assert seen == [FREE, None]
    assert json.loads(free) == fill(FREE) and text == "a text answer"
    rows = _rows(served)
    assert [(r["shape"], r["bounded"]) for r in rows] == [(UNKNOWN, False), (None, False)]
    assert summary["shapes"] == {UNKNOWN: 1}


@needs_mem0
def test_mem0_stores_memories_and_makes_update_calls_through_the_simulated_source(tmp_path: Path) -> None:
    from baselines.base import Endpoints, Session, Turn
    from baselines.mem0 import Mem0System

    served = tmp_path / "served_calls.jsonl"
    embedder = HashEmbedder(dim=64)
    chat = ScriptedChatModel(schema_filler)
    with LatencyModelServer(FAST, chat=chat, embedder=embedder, log_path=served, caps=CAPS,
                            bounds=BOUNDS) as server:
        system = Mem0System(Endpoints(server.base_url, "m", "e", 64, 8192))
        try:
            system.reset("one", tmp_path / "store")
            turns = (Turn("user", "I adopted a grey cat called Miso.", None, "s1:0"),
                     Turn("assistant", "Miso is a lovely name.", None, "s1:1"))
            stats = system.ingest([Session("s1", datetime(2023, 3, 1, 9), turns)])
        finally:
            system.close()
    shapes = [r["shape"] for r in _rows(served)]
    assert shapes == ["mem0.facts", "mem0.update"]  # one add: its extraction, then its update call
    assert stats["events"].get("ADD", 0) > 0


def _run(root: Path, system: str, stored: int | None, seconds: float) -> Path:
    """A finished, non-simulated run of `system`: one build of 10 turns in `seconds`, which stored
    `stored` memories (None: a build row from before the adapters reported it)."""
    out = root / system
    out.mkdir(parents=True)
    config = {"method": {"name": system}, "llm": {"name": "qwen3_30b_a3b"}, "dataset": {"name": "sample"}}
    (out / "run.json").write_text(json.dumps({"config": config, "simulated": False}))
    given = {"given": 10, "kept": 10, "unit": "memories", "stored": stored, "lost": {}, "upstream": False}
    build = {"instance_id": "i1", "turns": 10, "build_seconds": seconds, "llm": {"calls": 4},
             "call_waves": {"waves": 2, "critical_path_seconds": 1.0, "busy_seconds": 1.0,
                            "max_in_flight": 1},
             "system": {"input": given} if stored is not None else {}, "error": None}
    (out / "builds.jsonl").write_text(json.dumps(build) + "\n")
    return out


def test_a_system_that_stored_nothing_is_not_comparable_and_gets_no_ratio(tmp_path: Path) -> None:
    runs = [_run(tmp_path, "memforest_embed", 40, 2.0), _run(tmp_path, "mem0", 0, 10.0),
            _run(tmp_path, "zep", 12, 20.0)]
    data = write_path.table(runs)
    rows = {r["system"]: r for r in data["rows"]}
    assert data["not_comparable"] == ["mem0"] and not rows["mem0"]["comparable"]
    assert rows["mem0"]["memories_stored"] == 0 and rows["memforest_embed"]["memories_stored"] == 40
    for r in rows.values():
        assert r["ratio_to_mem0"] is None and r["modelled_ratio_to_mem0"] is None
    assert rows["mem0"]["speedup_vs_slowest"] is None and data["slowest"] == "zep"
    assert rows["memforest_embed"]["speedup_vs_slowest"] == 10.0
    text = write_path.markdown(data)
    mem0_line = next(line for line in text.splitlines() if line.startswith("| mem0 |"))
    assert mem0_line.count(write_path.NOT_COMPARABLE) == 6
    assert "Mem0's rate" not in text and "No ratio to Mem0" in text
    # once Mem0 stored something its ratio is back; rows from before the field say nothing ("–")
    again = write_path.table([_run(tmp_path / "b", "memforest_embed", None, 2.0),
                              _run(tmp_path / "b", "mem0", 3, 10.0)])
    by = {r["system"]: r for r in again["rows"]}
    assert by["memforest_embed"]["ratio_to_mem0"] == 5.0 and by["memforest_embed"]["memories_stored"] is None
    assert again["not_comparable"] == [] and by["mem0"]["update_calls"] is None


def test_the_paper_table_marks_a_system_that_stored_nothing_not_comparable() -> None:
    pd = pytest.importorskip("pandas")
    from analysis.artifacts.write_path import NOT_COMPARABLE, summarise, table

    def build(run: str, method: str, seconds: float, stored: int | None) -> dict[str, Any]:
        return {"run_id": run, "experiment": "write_path", "dataset": "sample", "kind": "locomo",
                "method": method, "backbone": "qwen3_30b_a3b_simulated", "seed": 0, "simulated": True,
                "instance_id": "i1", "turns": 10, "build_seconds": seconds, "llm_calls": 4, "waves": 2,
                "critical_path_seconds": 1.0, "cached_prompt_tokens": 0, "uncached_prompt_tokens": 10,
                "completion_tokens": 5, "memories_stored": stored, "update_calls": None, "error": None}

    builds = pd.DataFrame([build("a", "memforest_embed", 2.0, 40), build("b", "mem0", 10.0, 0),
                           build("c", "zep_local", 20.0, None)])
    served = pd.DataFrame([{"run_id": "b", "shape": "mem0.facts", "shape_role": "extract"}] * 2)
    ours = summarise(builds, served).set_index("method")
    assert not ours.loc["mem0", "comparable"] and ours.loc["mem0", "update_calls"] == 0
    assert pd.isna(ours.loc["mem0", "speedup"]) and ours["ratio_to_mem0"].isna().all()
    assert ours.loc["memforest_embed", "speedup"] == 10.0  # over zep_local (stored unknown), not mem0
    assert pd.isna(ours.loc["zep_local", "stored"]) and ours.loc["zep_local", "comparable"]
    frame = table(ours.reset_index()).frame
    rows = {r["system"]: r for r in frame[frame["run"] == "simulated"].to_dict("records")}
    assert len(rows) == 3 and rows["Mem0"]["speedup vs slowest"] == NOT_COMPARABLE
    assert rows["Mem0"]["memories stored"] == "0.0" and rows["Mem0"]["update calls"] == "0.0"
    assert {r["ratio to Mem0"] for r in rows.values()} == {NOT_COMPARABLE}


@pytest.mark.slow
@needs_mem0
def test_mem0_runs_its_write_path_on_the_embedded_source(tmp_path: Path) -> None:
    """End to end on SmolLM2 (one LongMemEval instance of 8 turns): every Mem0 call is recognised and
    decoded under its shape, every reply parses as Mem0 parses it, and Mem0 makes one update call for
    each extraction that found facts; the write-path table counts them."""
    from mem0.memory.utils import normalize_facts, remove_code_blocks

    from benchmarks.harness import runner
    from benchmarks.harness.app import compose_config
    from benchmarks.harness.results import read_jsonl
    from benchmarks.harness.schema import bench_config

    fixture = Path(__file__).parent / "fixtures" / "longmemeval_tiny.json"
    cfg = bench_config(compose_config([
        "experiment=write_path", "llm=qwen3_30b_a3b_simulated", "method=mem0", "dataset=longmemeval_s",
        f"dataset.path={fixture}", "dataset.limit=1", "embedder.backend=hash", "embedder.dim=64",
        f"output_root={tmp_path}", "progress=false"]))
    runner.run_benchmark(cfg)
    out = Path(cfg.run_dir)
    served = read_jsonl(out / "served_calls.jsonl")
    assert served and {r["shape"] for r in served} <= {"mem0.facts", "mem0.update"}
    assert all(r["bounded"] and not r["capped"] and r["error"] is None for r in served)
    found = 0
    for r in served:
        reply = json.loads(remove_code_blocks(r["text"]), strict=False)
        if r["shape"] == "mem0.facts":
            facts = normalize_facts(reply["facts"])
            assert all(isinstance(f, str) for f in facts)
            found += bool(facts)
        else:
            assert all(a["event"] in ("ADD", "UPDATE", "DELETE", "NONE") for a in reply["memory"])
    updates = sum(r["shape"] == "mem0.update" for r in served)
    assert updates == found  # Mem0 asks for memory actions exactly when its extraction found facts
    (build,) = read_jsonl(out / "builds.jsonl")
    (row,) = write_path.table([out])["rows"]
    assert row["update_calls"] == updates and row["reply_shapes"]["mem0.facts"] == build["system"]["adds"]
    stored = (build["system"].get("input") or {}).get("stored")
    assert row["memories_stored"] == stored and row["comparable"] == (stored != 0)
