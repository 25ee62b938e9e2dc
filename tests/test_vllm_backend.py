"""In-process vLLM against a stub `vllm` of three API generations (tests/vllm_stub.py): the call shapes of
`LLM`, `SamplingParams`, structured outputs, `chat` and `embed`; memory shares on one GPU; isolation of
failing requests; release on close."""

from __future__ import annotations

import functools
import json
import math
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import numpy as np
import pytest
import vllm_stub

from benchmarks.harness.app import compose_config
from benchmarks.harness.models import library_config
from benchmarks.harness.schema import BenchConfig, bench_config
from memforest.config import EmbedderConfig, LLMConfig
from memforest.errors import ConfigError, ModelError
from memforest.llm.base import ChatRequest, ChatResponse, is_transient
from memforest.llm.embedders import OpenAIEmbedder, VLLMEmbedder
from memforest.llm.factory import build_chat_model, build_embedder
from memforest.llm.openai_compat import OpenAIChatModel
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
    refused = "VLLMValidationError" if stub.generation == "0.33.0" else "ValueError"
    assert isinstance(results[9], ModelError)
    assert f"vLLM refused the request: {refused}: The decoder prompt (length 60)" in str(results[9])
    assert [echoed(r) for i, r in enumerate(results) if i != 9] == [f"q{i}" for i in range(16) if i != 9]
    calls = stub.engines[0].chat_calls
    assert len(calls) <= 2 * math.ceil(math.log2(16)) + 1  # halves, not one call per request
    assert ([echoed(r) for r in chat.generate([request(f"next{i}") for i in range(4)])]
            == [f"next{i}" for i in range(4)])
    chat.close()


def test_a_prompt_filling_the_whole_context_leaves_no_room_for_output(stub: vllm_stub.StubState) -> None:
    """From 0.33 on; earlier versions take it and refuse only a longer one."""
    chat = VLLMChatModel(LLMConfig(backend="vllm", model="m", context_tokens=8))
    [full, fits, longer] = chat.generate([request("w " * 8), request("w " * 7), request("w " * 9)])
    if stub.generation == "0.33.0":
        assert isinstance(full, ModelError) and "plus the number of requested output tokens" in str(full)
    else:
        assert echoed(full) == "w " * 8
    assert isinstance(longer, ModelError) and "longer than the maximum model length" in str(longer)
    assert echoed(fits) == "w " * 7
    chat.close()


def test_the_refusal_is_caught_by_the_type_vllm_raises(stub: vllm_stub.StubState) -> None:
    """vLLM 0.33's VLLMValidationError is a VLLMClientError, not a ValueError."""
    vllm = stub_module(stub)
    chat = VLLMChatModel(LLMConfig(backend="vllm", model="m", context_tokens=4))
    if stub.generation == "0.33.0":
        assert not issubclass(vllm.exceptions.VLLMValidationError, ValueError)
        assert issubclass(vllm.exceptions.VLLMValidationError, vllm.exceptions.VLLMClientError)
    with pytest.raises(Exception, match="maximum model length") as raised:
        stub.engines[0].chat([[{"role": "user", "content": "w " * 9}]])
    expected = vllm.exceptions.VLLMValidationError if stub.generation == "0.33.0" else ValueError
    assert type(raised.value) is expected
    [result] = chat.generate([request("w " * 9)])
    assert isinstance(result, ModelError) and expected.__name__ in str(result)
    chat.close()


@pytest.mark.parametrize("reason", ["error", "abort", "repetition"])
def test_a_request_the_engine_finished_without_an_answer_is_a_model_error(
    stub: vllm_stub.StubState, reason: str,
) -> None:
    """vLLM returns some failed requests as finished outputs (finish_reason "error", "abort"); they are
    failures with the engine's reason, never empty answers, and the rest of the wave is unaffected."""
    chat = VLLMChatModel(LLMConfig(backend="vllm", model="m", concurrency=6))
    stub.finish_reasons["q2"] = reason
    wave = [request(f"q{i}", SCHEMA if i == 4 else None, allow_truncation=True) for i in range(6)]
    results = chat.generate(wave)
    assert isinstance(results[2], ModelError)
    assert f"finish_reason={reason!r}" in str(results[2]) and "test request" in str(results[2])
    assert is_transient(results[2]) == (reason == "error")  # vLLM: a retryable request-level failure
    assert [json.loads(echoed(r))["echo"] if i == 4 else echoed(r) for i, r in enumerate(results) if i != 2] \
        == ["q0", "q1", "q3", "q4", "q5"]
    assert stub.engines[0].chat_calls == [6]  # one call: a finished failure needs no halving
    chat.close()


def test_in_process_and_served_chat_send_the_same_sampling_fields(stub: vllm_stub.StubState) -> None:
    """Every field the in-process SamplingParams gets from a request is sent to a server too, with the
    same value, so that the server's generation-config defaults (Qwen3: top_k=20) never apply."""
    bodies: list[dict[str, Any]] = []

    def handler(http_request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(http_request.content))
        message = {"role": "assistant", "content": "fine"}
        return httpx.Response(200, json={"choices": [{"message": message, "finish_reason": "stop"}]})

    served = OpenAIChatModel(LLMConfig(backend="openai", base_url="http://mock/v1"))
    served._client = httpx.Client(base_url="http://mock/v1", transport=httpx.MockTransport(handler))
    chat = VLLMChatModel(LLMConfig(backend="vllm", model="m"))
    for sent in (request("a", max_tokens=40, seed=3, temperature=0.7, top_p=0.9), request("b")):
        served.generate([sent])
        chat.generate([sent])
        body = {k: v for k, v in bodies[-1].items() if k not in ("model", "messages")}
        param = stub.engines[0].sampling[-1]
        defaults = dict(vllm_stub.SAMPLING_FIELDS)
        assert {"top_k", "min_p", "repetition_penalty", "temperature", "top_p", "max_tokens"} <= set(body)
        assert {k: getattr(param, k) for k in body} == body
        assert all(getattr(param, k) == d for k, d in defaults.items() if k not in body)  # nothing else set
    served.close()
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


def test_an_embedding_the_engine_failed_is_a_model_error_with_its_reason(stub: vllm_stub.StubState) -> None:
    """vLLM 0.33 returns a failed pooling request with `error` set and an empty vector."""
    embedder = VLLMEmbedder(EmbedderConfig(backend="vllm", model="e", dim=vllm_stub.EMBED_DIM))
    stub.fail_embedding("broken text", "KV load failure")
    with pytest.raises(ModelError, match=r"e: vLLM failed text 1 of 3: internal_error: KV load failure"):
        embedder.embed(["fine", "broken text", "also fine"])
    assert embedder.embed(["fine"]).shape == (1, vllm_stub.EMBED_DIM)
    embedder.close()


def test_two_threads_inside_one_engine_raise_and_the_embedder_never_lets_them(
    stub: vllm_stub.StubState,
) -> None:
    embedder = VLLMEmbedder(EmbedderConfig(backend="vllm", model="e", dim=vllm_stub.EMBED_DIM))
    engine = stub.engines[0]
    many = [{"prompt_token_ids": [i, i + 1]} for i in range(2000)]

    def raw(_: int) -> str:
        try:
            engine.embed(many)
        except RuntimeError as exc:
            return str(exc)
        return "ok"

    with ThreadPoolExecutor(4) as pool:
        assert "two threads inside one engine" in set(pool.map(raw, range(8)))
    with ThreadPoolExecutor(8) as pool:
        shapes = list(pool.map(lambda i: embedder.embed([f"text {i}"] * 200).shape, range(16)))
    assert shapes == [(200, vllm_stub.EMBED_DIM)] * 16
    embedder.close()


def test_each_engine_process_holds_its_context_beside_its_share(stub: vllm_stub.StubState) -> None:
    """Two engines of half the device each do not fit: each process's CUDA context (~0.7 GiB) comes
    before its share; the shipped pair leaves room for both contexts."""
    first = VLLMChatModel(LLMConfig(backend="vllm", model="m", gpu_memory_utilization=0.5))
    with pytest.raises(ValueError, match="Free memory on device"):
        VLLMChatModel(LLMConfig(backend="vllm", model="m", gpu_memory_utilization=0.5))
    assert stub.device.free == pytest.approx(stub.device.total * 0.5 - vllm_stub.PROCESS_OVERHEAD_GIB)
    first.close()
    llm_cfg, emb_cfg = shipped()
    embedder, chat = build_embedder(emb_cfg), build_chat_model(llm_cfg)
    shares = llm_cfg.gpu_memory_utilization + emb_cfg.gpu_memory_utilization
    contexts = 2 * vllm_stub.PROCESS_OVERHEAD_GIB
    assert stub.device.free == pytest.approx(stub.device.total * (1 - shares) - contexts)
    chat.close()
    embedder.close()
    assert stub.device.held == {}


def test_a_share_too_small_for_one_full_context_of_kv_cache_is_refused(stub: vllm_stub.StubState) -> None:
    """Within its share an engine holds weights, the activation peak and the CUDA-graph estimate; what
    is left must hold the KV cache of one request at max_model_len."""
    llm_cfg, _ = shipped()
    llm_cfg.gpu_memory_utilization = 0.75  # 60 GiB: 57 of weights, 1 of activations and graphs, 2 of KV
    with pytest.raises(ValueError, match=r"one request with the model's max seq len \(32768\)"):
        build_chat_model(llm_cfg)
    llm_cfg.context_tokens = 16384  # 1.5 GiB of KV fits
    build_chat_model(llm_cfg).close()
    llm_cfg.gpu_memory_utilization = 0.7
    with pytest.raises(ValueError, match="No available memory for the cache blocks"):
        build_chat_model(llm_cfg)
    small, _ = shipped("qwen3_4b")  # 7.5 GiB of weights, 4.5 GiB of KV at 32768 tokens
    small.gpu_memory_utilization = 0.16  # 12.8 GiB: room for the KV cache only without CUDA graphs
    with pytest.raises(ValueError, match="KV cache is needed"):
        build_chat_model(small)
    small.engine_args["enforce_eager"] = True
    build_chat_model(small).close()
    assert stub.device.held == {}  # a process that failed to start holds nothing


def test_the_served_embedder_truncates_as_the_in_process_one() -> None:
    bodies: list[dict[str, Any]] = []

    def handler(http_request: httpx.Request) -> httpx.Response:
        body = json.loads(http_request.content)
        bodies.append(body)
        return httpx.Response(200, json={"data": [{"index": i, "embedding": [1.0, 0.0]}
                                                  for i in range(len(body["input"]))]})

    embedder = OpenAIEmbedder(EmbedderConfig(backend="openai", base_url="http://mock/v1", dim=2,
                                             context_tokens=512))
    embedder._client = httpx.Client(base_url="http://mock/v1", transport=httpx.MockTransport(handler))
    embedder.embed(["word " * 2000, "short"])
    assert bodies[0]["truncate_prompt_tokens"] == 512
    embedder.close()


def test_the_served_timeout_grows_with_the_requests_in_flight() -> None:
    def read_timeout(concurrency: int) -> float | None:
        model = OpenAIChatModel(LLMConfig(backend="openai", base_url="http://mock/v1", timeout_s=120.0,
                                          concurrency=concurrency))
        timeout = model._client.timeout
        model.close()
        assert timeout.connect == 120.0
        return timeout.read

    assert read_timeout(2) == read_timeout(32) == 120.0
    assert read_timeout(256) == 960.0


def test_an_openai_api_endpoint_gets_openai_fields_only() -> None:
    """`api: openai` (a hosted API that refuses fields it does not know, e.g. a judge on api.openai.com):
    chat requests carry OpenAI's sampling fields and embeddings no truncation field."""
    bodies: list[dict[str, Any]] = []

    def handler(http_request: httpx.Request) -> httpx.Response:
        body = json.loads(http_request.content)
        bodies.append(body)
        if "input" in body:
            return httpx.Response(200, json={"data": [{"index": i, "embedding": [1.0, 0.0]}
                                                      for i in range(len(body["input"]))]})
        message = {"role": "assistant", "content": "fine"}
        return httpx.Response(200, json={"choices": [{"message": message, "finish_reason": "stop"}]})

    transport = httpx.MockTransport(handler)
    chat = OpenAIChatModel(LLMConfig(backend="openai", base_url="http://mock/v1", api="openai"))
    chat._client = httpx.Client(base_url="http://mock/v1", transport=transport)
    embedder = OpenAIEmbedder(EmbedderConfig(backend="openai", base_url="http://mock/v1", dim=2,
                                             api="openai"))
    embedder._client = httpx.Client(base_url="http://mock/v1", transport=transport)
    chat.generate([request("a", seed=3)])
    embedder.embed(["text"])
    assert set(bodies[0]) == {"model", "messages", "max_tokens", "temperature", "top_p", "seed"}
    assert set(bodies[1]) == {"model", "input"}
    chat.close()
    embedder.close()


def test_the_server_api_option_is_checked() -> None:
    from memforest.config import MemForestConfig
    from memforest.errors import ConfigError

    with pytest.raises(ConfigError, match="llm.api"):
        MemForestConfig(llm=LLMConfig(api="anthropic")).validate()
