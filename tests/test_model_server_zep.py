"""Graphiti (zep_local) on the harness's model server in `json_schema` mode, its own default and the
adapter's on endpoints that take it: each request carries its response model's schema, which the server
hands to the content source (the grammar of the embedded model); on an endpoint that refuses
`json_schema` (llama.cpp's server) the adapter's default is `json_object`, a schema-less JSON request."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from baselines.base import Endpoints, Session, Turn
from benchmarks.serving.model_server import ModelServer
from memforest.llm.base import ChatRequest
from memforest.llm.testing import HashEmbedder, ScriptedChatModel

pytest.importorskip("graphiti_core")
pytest.importorskip("kuzu")


def _ingest_one_turn(tmp_path: Path, mode: str, json_schema: bool = True) -> list[dict[str, Any] | None]:
    from baselines.zep_local import ZepLocalSystem

    schemas: list[dict[str, Any] | None] = []

    def responder(request: ChatRequest) -> dict[str, Any]:
        schemas.append(request.json_schema)
        return {"extracted_entities": []}

    chat = ScriptedChatModel(responder, name="chat")
    with ModelServer(HashEmbedder(64), chat, model_name="chat") as server:
        endpoints = Endpoints(server.base_url, "chat", "hash", 64, 8192, json_schema=json_schema)
        system = (ZepLocalSystem(endpoints) if mode == "default"
                  else ZepLocalSystem(endpoints, structured_output_mode=mode))
        system.reset("conv", tmp_path)
        try:
            when = datetime(2023, 5, 8, 13, 56)
            system.ingest([Session("s1", when, (Turn("user", "I repaired my sailboat.", when, "s1:1"),))])
        finally:
            system.close()
    return schemas


def test_json_schema_mode_sends_graphitis_response_schema(tmp_path: Path) -> None:
    schemas = _ingest_one_turn(tmp_path, "json_schema")
    assert schemas and "extracted_entities" in (schemas[0] or {}).get("properties", {})


def test_json_schema_is_the_default_where_the_endpoint_takes_it(tmp_path: Path) -> None:
    schemas = _ingest_one_turn(tmp_path, "default")
    assert schemas and "extracted_entities" in (schemas[0] or {}).get("properties", {})


def test_json_object_is_the_default_where_the_endpoint_refuses_json_schema(tmp_path: Path) -> None:
    assert _ingest_one_turn(tmp_path, "default", json_schema=False)[0] == {"type": "object"}
    assert _ingest_one_turn(tmp_path / "forced", "json_schema", json_schema=False)[0] != {"type": "object"}


def test_an_unknown_output_mode_is_refused() -> None:
    from baselines.zep_local import ZepLocalSystem

    with pytest.raises(ValueError, match="structured_output_mode must be one of json_object, json_schema"):
        ZepLocalSystem(Endpoints("http://127.0.0.1:9/v1", "chat", "hash", 64, 8192),
                       structured_output_mode="tools")


def test_the_harness_says_which_backbones_take_json_schema() -> None:
    from benchmarks.harness.app import compose_config
    from benchmarks.harness.schema import bench_config
    from benchmarks.harness.systems import Models, takes_json_schema
    from memforest.llm.calllog import CallLog

    models = Models(HashEmbedder(8), None, CallLog(None))
    simulated = Models(HashEmbedder(8), None, CallLog(None), llm_base_url="http://127.0.0.1:9/v1")
    for llm, plain, sim in (("smollm2_cpu", False, True), ("qwen3_4b_server", True, True),
                            ("qwen3_4b", True, True)):
        node = bench_config(compose_config([f"llm={llm}"])).llm
        assert (takes_json_schema(node, models), takes_json_schema(node, simulated)) == (plain, sim), llm
