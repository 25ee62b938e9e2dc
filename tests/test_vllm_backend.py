"""In-process vLLM against a stub `vllm` of three API generations (tests/vllm_stub.py): the call shapes of
`LLM`, `SamplingParams`, structured outputs, `chat` and `embed`; memory shares on one GPU; isolation of
failing requests; release on close."""

from __future__ import annotations

import functools
import json
import math
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
import vllm_stub

from benchmarks.harness.app import compose_config
from benchmarks.harness.models import library_config
from benchmarks.harness.schema import BenchConfig, bench_config
from memforest.config import EmbedderConfig, LLMConfig
from memforest.errors import ConfigError, ModelError
from memforest.llm.base import ChatRequest, ChatResponse
from memforest.llm.embedders import VLLMEmbedder
from memforest.llm.factory import build_chat_model, build_embedder
from memforest.llm.vllm_backend import VLLMChatModel

SCHEMA = {"type": "object", "properties": {"echo": {"type": "string"}}, "required": ["echo"]}


@pytest.fixture(params=vllm_stub.GENERATIONS)
def stub(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> vllm_stub.StubState:
    return vllm_stub.install(monkeypatch, request.param)


@functools.cache
def composed(llm: str, embedder: str) -> BenchConfig:
    return bench_config(compose_config([f"llm={llm}", f"embedder={embedder}"]))


def shipped(llm: str = "qwen3_30b_a3b",
            embedder: str = "qwen3_embedding_0p6b") -> tuple[LLMConfig, EmbedderConfig]:
    """The library configs of the shipped `llm` and `embedder` options (fresh objects each time)."""
    cfg = composed(llm, embedder)
    return library_config(LLMConfig, cfg.llm), library_config(EmbedderConfig, cfg.embedder)


def request(text: str, schema: dict[str, Any] | None = None, **kwargs: Any) -> ChatRequest:
    return ChatRequest(messages=({"role": "user", "content": text},), stage="test", prompt_id="test.echo",
                       json_schema=schema, **kwargs)


def echoed(result: ChatResponse | Exception) -> str:
    assert isinstance(result, ChatResponse), result
    return result.text.removeprefix("echo: ")


def test_the_shipped_chat_model_and_embedder_share_one_gpu(stub: vllm_stub.StubState) -> None:
    """Built in the harness's order (embedder first), both engines pass vLLM's free-memory check."""
    llm_cfg, emb_cfg = shipped()
    embedder = build_embedder(emb_cfg)
    chat = build_chat_model(llm_cfg)
    emb_engine, chat_engine = stub.engines
    pooling = {"task": "embed"} if stub.generation == "0.10.0" else {"runner": "pooling"}
    assert emb_engine.kwargs == {"model": "Qwen/Qwen3-Embedding-0.6B", "gpu_memory_utilization": 0.08,
                                 "max_model_len": 8192, **pooling}
    assert chat_engine.kwargs == {"model": "Qwen/Qwen3-30B-A3B-Instruct-2507", "tensor_parallel_size": 1,
                                  "gpu_memory_utilization": 0.85, "max_model_len": 32768,
                                  "enable_prefix_caching": True, "dtype": "auto", "seed": 0}
    assert stub.device.free > 0
    chat.close()
    embedder.close()


def test_an_embedder_left_at_vllms_default_share_starves_the_chat_engine(stub: vllm_stub.StubState) -> None:
    llm_cfg, emb_cfg = shipped()
    emb_cfg.gpu_memory_utilization = vllm_stub.DEFAULT_UTILIZATION[stub.generation]
    embedder = build_embedder(emb_cfg)
    with pytest.raises(ValueError, match="Free memory on device"):
        build_chat_model(llm_cfg)
    embedder.close()


def test_engine_args_pass_through_and_may_not_repeat_a_field(stub: vllm_stub.StubState) -> None:
    llm_cfg, _ = shipped("gemma4_12b")
    assert llm_cfg.model == "google/gemma-4-12B-it"  # the hub id's casing, as the hub cache keeps it
    llm_cfg.engine_args.update(max_num_seqs=64, enforce_eager=True)
    chat = VLLMChatModel(llm_cfg)
    assert stub.engines[0].kwargs["limit_mm_per_prompt"] == {"image": 0, "audio": 0, "video": 0}
    assert stub.engines[0].kwargs["max_num_seqs"] == 64 and stub.engines[0].kwargs["enforce_eager"] is True
    chat.close()
    with pytest.raises(ConfigError, match=r"llm.engine_args.max_model_len: set llm.context_tokens"):
        VLLMChatModel(LLMConfig(backend="vllm", model="m", engine_args={"max_model_len": 4}))
    with pytest.raises(ConfigError, match=r"embedder.engine_args.gpu_memory_utilization"):
        VLLMEmbedder(EmbedderConfig(backend="vllm", model="e", dim=16,
                                    engine_args={"gpu_memory_utilization": 0.5}))


def test_a_wave_is_one_chat_call_with_the_structured_output_api_of_the_version(
    stub: vllm_stub.StubState,
) -> None:
    chat = VLLMChatModel(LLMConfig(backend="vllm", model="m", concurrency=8))
    wave = [request(f"q{i}", SCHEMA if i % 2 else None, max_tokens=40 + i, seed=i, temperature=0.5)
            for i in range(8)]
    results = chat.generate(wave)
    engine = stub.engines[0]
    assert engine.chat_calls == [8]
    assert [json.loads(echoed(r))["echo"] if i % 2 else echoed(r) for i, r in enumerate(results)] == \
        [f"q{i}" for i in range(8)]
    plain_param, json_param = engine.sampling[0], engine.sampling[1]
    assert ((json_param.temperature, json_param.top_p, json_param.max_tokens, json_param.seed)
            == (0.5, 1.0, 41, 1))
    sp = stub_module(stub).sampling_params
    if stub.generation == "0.10.0":
        assert isinstance(json_param.guided_decoding, sp.GuidedDecodingParams)
        assert json_param.guided_decoding.json == SCHEMA and plain_param.guided_decoding is None
    else:
        assert type(json_param.structured_outputs) is sp.StructuredOutputsParams
        assert json_param.structured_outputs.json == SCHEMA and plain_param.structured_outputs is None
        assert getattr(json_param, "guided_decoding", None) is None
    first = results[0]
    assert isinstance(first, ChatResponse)
    assert first.usage.prompt_tokens == 1 and first.usage.cached_prompt_tokens == 0
    assert first.usage.completion_tokens == 2 and first.model == "m"
    chat.close()


def stub_module(stub: vllm_stub.StubState) -> Any:
    import vllm

    assert vllm.__version__ == stub.generation
    return vllm


def test_an_over_length_prompt_fails_alone_and_later_waves_get_their_own_answers(
    stub: vllm_stub.StubState,
) -> None:
    chat = VLLMChatModel(LLMConfig(backend="vllm", model="m", context_tokens=50, concurrency=16))
    wave = [request(f"q{i}") for i in range(16)]
    wave[9] = request("long " * 60)
    results = chat.generate(wave)
    assert isinstance(results[9], ValueError) and "maximum model length" in str(results[9])
    assert [echoed(r) for i, r in enumerate(results) if i != 9] == [f"q{i}" for i in range(16) if i != 9]
    calls = stub.engines[0].chat_calls
    assert len(calls) <= 2 * math.ceil(math.log2(16)) + 1  # halves, not one call per request
    assert ([echoed(r) for r in chat.generate([request(f"next{i}") for i in range(4)])]
            == [f"next{i}" for i in range(4)])
    chat.close()


def test_concurrent_callers_never_meet_inside_the_engine(stub: vllm_stub.StubState) -> None:
    chat = VLLMChatModel(LLMConfig(backend="vllm", model="m"))
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda i: chat.generate([request(f"t{i}")])[0], range(32)))
    assert [echoed(a) for a in answers] == [f"t{i}" for i in range(32)]
    chat.close()


def test_close_shuts_each_engine_down_and_cleans_up_after_the_last(stub: vllm_stub.StubState) -> None:
    llm_cfg, emb_cfg = shipped()
    embedder = build_embedder(emb_cfg)
    chat = build_chat_model(llm_cfg)
    emb_engine, chat_engine = stub.engines
    chat.close()
    assert chat_engine.llm_engine.engine_core.shutdowns == 1 and stub.cleanups == 0  # the embedder lives on
    [closed] = chat.generate([request("late")])
    assert isinstance(closed, ModelError)
    again = build_chat_model(llm_cfg)  # the next run of a sweep, in the same process, gets the memory back
    again.close()
    embedder.close()
    assert emb_engine.llm_engine.engine_core.shutdowns == 1 and stub.cleanups == 1
    assert stub.device.held == {}
    chat.close()  # closing twice is harmless
    assert stub.cleanups == 1


def test_the_embedder_truncates_to_its_context_and_sends_token_ids(stub: vllm_stub.StubState) -> None:
    cfg = EmbedderConfig(backend="vllm", model="e", dim=vllm_stub.EMBED_DIM, context_tokens=8,
                         query_prefix="Q: ")
    embedder = VLLMEmbedder(cfg)
    engine = stub.engines[0]
    vectors = embedder.embed(["word " * 20, "short text"])
    assert vectors.shape == (2, vllm_stub.EMBED_DIM) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-6)
    sent = engine.embed_calls[-1]
    assert [len(p["prompt_token_ids"]) for p in sent] == [8, 2]
    embedder.embed(["where"], kind="query")
    assert engine.embed_calls[-1] == [{"prompt_token_ids": vllm_stub.Tokenizer().encode("Q: where")}]
    assert embedder.embed([]).shape == (0, vllm_stub.EMBED_DIM)
    embedder.close()


def test_an_embedder_of_another_width_than_configured_is_refused_and_released(
    stub: vllm_stub.StubState,
) -> None:
    with pytest.raises(ConfigError, match=r"embedder.dim=1024, but e gives 16-d vectors"):
        VLLMEmbedder(EmbedderConfig(backend="vllm", model="e", dim=1024))
    assert stub.engines[0].llm_engine.engine_core.shutdowns == 1 and stub.device.held == {}
