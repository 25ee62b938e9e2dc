"""A stand-in for the `vllm` package in tests, in three API generations, injected with `install`
(monkeypatch.setitem on sys.modules, so nothing outlives the test).

Names and signatures follow the real sources of the versions each generation stands for:
- "0.10.0": `SamplingParams(guided_decoding=GuidedDecodingParams(json=...))`; pooling through
  `EngineArgs.task` ("embed"); a failing `chat` leaves the requests added before the failing one in
  the engine, and the next call returns their outputs too (sorted by request id);
- "0.11.0": `StructuredOutputsParams` (with `GuidedDecodingParams` as its subclass) and both
  `SamplingParams` fields; `EngineArgs.runner` ("pooling"); failing calls leave requests behind too;
- "0.33.0": `StructuredOutputsParams` only; `runner`; a failing call aborts what it added.

`LLM(...)` accepts only arguments that are `EngineArgs` fields. Its memory follows vLLM 0.33's start-up
(`vllm/v1/worker/utils.py`, `gpu_worker.determine_available_memory`, `core/kv_cache_planning.py`): the
engine process first creates its CUDA context (PROCESS_OVERHEAD_GIB, outside the engine's budget), then
checks that the device's free memory covers its `gpu_memory_utilization` share of the whole; within the
share, weights, the profiled activation peak and the CUDA-graph estimate (none with `enforce_eager`)
leave the KV cache, which must hold one request of `max_model_len` tokens. The process holds its share
and its context until its engine core is shut down.
The KV cache it allocated is on the client as vLLM 0.11 and 0.33 put it there
(`llm_engine.vllm_config.cache_config.num_gpu_blocks` and `block_size`). `StubState.kill_engines` stands
for an engine core process that died (preempted, killed): every later `chat` and `embed` raises
`vllm.v1.engine.exceptions.EngineDeadError`, as vLLM's client does.

Prompts are counted in whitespace words. A prompt longer than `max_model_len` is refused: with ValueError
before 0.33, with `vllm.exceptions.VLLMValidationError` (a VLLMClientError, not a ValueError) from 0.33
on, where a chat prompt of exactly `max_model_len`, which leaves no room for output, is refused too.
Requests named in `StubState.finish_reasons` finish with that reason (vLLM's "error", "abort",
"repetition"), empty; embedding prompts named in `StubState.embed_errors` come back as vLLM 0.33 returns
a failed pooling request: an empty embedding with `error` set. Two threads inside one engine (chat or
embed) raise, as the real engine is not thread-safe. Answers echo the last message, so that tests can see
which request an answer belongs to; embeddings are a hash of the token ids.

The field lists below (SAMPLING_FIELDS, ENGINE_FIELDS, the output dataclasses, the exception classes) are
the stub's claims about vLLM 0.11 and 0.33 (the "0.11.0" and "0.33.0" generations); tests/
test_vllm_contract.py checks each generation against its version's row, and against the real package
where it is installed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
import threading
import time
import types
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

GENERATIONS = ("0.10.0", "0.11.0", "0.33.0")
DEFAULT_UTILIZATION = {"0.10.0": 0.9, "0.11.0": 0.9, "0.33.0": 0.92}
EMBED_DIM = 16  # the width of every embedding model but these:
MODEL_DIMS = {"Qwen/Qwen3-Embedding-0.6B": 1024}

# Memory, in GiB. Per engine process, before its budget is measured: CUDA context and cuBLAS workspace
# (measured on an H200).
PROCESS_OVERHEAD_GIB = 0.7
ACTIVATION_GIB = 0.5  # the profiled activation peak of a forward pass at max_num_batched_tokens
CUDA_GRAPH_GIB = 0.5  # the CUDA-graph estimate (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS, on by default)
# bf16 weights (parameters x 2 bytes) and KV cache per token (2 x layers x KV heads x head dim x 2 bytes)
MODEL_WEIGHTS_GIB = {"Qwen/Qwen3-30B-A3B-Instruct-2507": 56.9, "Qwen/Qwen3-30B-A3B-Instruct-2507-FP8": 30.5,
                     "Qwen/Qwen3-4B-Instruct-2507": 7.5,
                     "google/gemma-4-12B-it": 22.4, "Qwen/Qwen3-Embedding-0.6B": 1.1}
KV_BYTES_PER_TOKEN = {"Qwen/Qwen3-30B-A3B-Instruct-2507": 2 * 48 * 4 * 128 * 2,
                      "Qwen/Qwen3-30B-A3B-Instruct-2507-FP8": 2 * 48 * 4 * 128 * 2,  # FP8 weights, bf16 cache
                      "Qwen/Qwen3-4B-Instruct-2507": 2 * 36 * 8 * 128 * 2,
                      "Qwen/Qwen3-Embedding-0.6B": 2 * 28 * 8 * 128 * 2}
SMALL_MODEL_GIB = 1.0  # any other model name
SMALL_MODEL_KV_BYTES = 2 * 24 * 8 * 128 * 2
NATIVE_CONTEXT = 32768  # max_model_len when none is given
GIB = 1 << 30

# (name, default) of the SamplingParams fields the stub has (0.11 and 0.33 alike; the contract test checks)
SAMPLING_FIELDS: tuple[tuple[str, Any], ...] = (
    ("n", 1), ("presence_penalty", 0.0), ("frequency_penalty", 0.0), ("repetition_penalty", 1.0),
    ("temperature", 1.0), ("top_p", 1.0), ("top_k", 0), ("min_p", 0.0), ("seed", None),
    ("max_tokens", 16), ("min_tokens", 0))
# (name, default) of the EngineArgs fields the stub has (the LLM arguments the project passes)
ENGINE_FIELDS: tuple[tuple[str, Any], ...] = (
    ("model", ""), ("tensor_parallel_size", 1), ("dtype", "auto"), ("seed", 0),
    ("max_model_len", None), ("enable_prefix_caching", None), ("max_num_seqs", None),
    ("enforce_eager", False), ("limit_mm_per_prompt", None))


@dataclass
class Device:
    """One GPU: `total` GiB, with the shares that live engines hold."""

    total: float = 80.0
    held: dict[int, float] = field(default_factory=dict)

    @property
    def free(self) -> float:
        return self.total - sum(self.held.values())


@dataclass
class StubState:
    """What the tests look at: every engine built, every clean-up call, the device."""

    generation: str
    device: Device = field(default_factory=Device)
    engines: list[Any] = field(default_factory=list)
    cleanups: int = 0
    finish_reasons: dict[str, str] = field(default_factory=dict)  # last message -> finish reason
    embed_errors: dict[tuple[int, ...], RequestError] = field(default_factory=dict)  # token ids -> error
    dead: bool = False  # the engine core process has gone: every call raises EngineDeadError

    def kill_engines(self) -> None:
        """The engine core processes die (a SIGTERM under preemption, an OOM kill): from now on every
        `chat` and `embed` raises EngineDeadError, as vLLM's client does once its core is gone."""
        self.dead = True

    def fail_embedding(self, text: str, message: str) -> None:
        """Have the embedding of `text` fail as vLLM 0.33 reports a failed pooling request."""
        self.embed_errors[tuple(Tokenizer().encode(text))] = RequestError("internal_error", message)


def install(monkeypatch: pytest.MonkeyPatch, generation: str) -> StubState:
    """Put a stub `vllm` of `generation` into sys.modules for the current test only."""
    state = StubState(generation)
    modules = _modules(state)
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    return state


def _modules(state: StubState) -> dict[str, types.ModuleType]:
    gen = state.generation
    vllm = types.ModuleType("vllm")
    sp = types.ModuleType("vllm.sampling_params")
    engine = types.ModuleType("vllm.engine")
    arg_utils = types.ModuleType("vllm.engine.arg_utils")
    distributed = types.ModuleType("vllm.distributed")
    parallel_state = types.ModuleType("vllm.distributed.parallel_state")

    sampling_fields: list[tuple[str, Any, Any]] = [(n, Any, d) for n, d in SAMPLING_FIELDS]
    if gen in ("0.11.0", "0.33.0"):
        sampling_fields.append(("structured_outputs", Any, None))
        sp.StructuredOutputsParams = StructuredOutputsParams  # type: ignore[attr-defined]
    if gen in ("0.10.0", "0.11.0"):
        sampling_fields.append(("guided_decoding", Any, None))
        sp.GuidedDecodingParams = GuidedDecodingParams  # type: ignore[attr-defined]
    sampling_params_cls = dataclasses.make_dataclass(
        "SamplingParams", [(n, t, field(default=d)) for n, t, d in sampling_fields])
    sp.SamplingParams = sampling_params_cls  # type: ignore[attr-defined]

    pooling = (("task", str, field(default="auto")) if gen == "0.10.0"
               else ("runner", str, field(default="auto")))
    engine_fields = [pooling, ("gpu_memory_utilization", float, field(default=DEFAULT_UTILIZATION[gen])),
                     *((n, Any, field(default=d)) for n, d in ENGINE_FIELDS)]
    engine_args_cls = dataclasses.make_dataclass("EngineArgs", engine_fields)
    arg_utils.EngineArgs = engine_args_cls  # type: ignore[attr-defined]

    def cleanup_dist_env_and_memory(shutdown_ray: bool = False) -> None:
        state.cleanups += 1

    parallel_state.cleanup_dist_env_and_memory = cleanup_dist_env_and_memory  # type: ignore[attr-defined]
    distributed.parallel_state = parallel_state  # type: ignore[attr-defined]
    engine.arg_utils = arg_utils  # type: ignore[attr-defined]
    vllm.LLM = _llm_class(state, engine_args_cls)  # type: ignore[attr-defined]
    vllm.SamplingParams = sampling_params_cls  # type: ignore[attr-defined]
    vllm.sampling_params = sp  # type: ignore[attr-defined]
    vllm.engine = engine  # type: ignore[attr-defined]
    vllm.distributed = distributed  # type: ignore[attr-defined]
    vllm.__version__ = gen  # type: ignore[attr-defined]
    modules = {"vllm": vllm, "vllm.sampling_params": sp, "vllm.engine": engine,
               "vllm.engine.arg_utils": arg_utils, "vllm.distributed": distributed,
               "vllm.distributed.parallel_state": parallel_state}
    v1 = types.ModuleType("vllm.v1")
    v1_engine = types.ModuleType("vllm.v1.engine")
    v1_exceptions = types.ModuleType("vllm.v1.engine.exceptions")
    v1_exceptions.EngineDeadError = (  # type: ignore[attr-defined]
        EngineDeadServerError if gen == "0.33.0" else EngineDeadError)
    v1_exceptions.EngineGenerateError = EngineGenerateError  # type: ignore[attr-defined]
    v1_engine.exceptions = v1_exceptions  # type: ignore[attr-defined]
    v1.engine = v1_engine  # type: ignore[attr-defined]
    vllm.v1 = v1  # type: ignore[attr-defined]
    modules.update({"vllm.v1": v1, "vllm.v1.engine": v1_engine, "vllm.v1.engine.exceptions": v1_exceptions})
    if gen == "0.33.0":
        exceptions = types.ModuleType("vllm.exceptions")
        for cls in (VLLMError, VLLMClientError, VLLMServerError, VLLMValidationError):
            setattr(exceptions, cls.__name__, cls)
        vllm.exceptions = exceptions  # type: ignore[attr-defined]
        modules["vllm.exceptions"] = exceptions
    return modules


# ---------------------------------------------------------------- exceptions, as vllm/exceptions.py has them


class VLLMError(Exception):
    """Base class of vLLM's own errors."""


class VLLMClientError(VLLMError):
    """Caused by the request (the server answers 4xx)."""


class VLLMServerError(VLLMError):
    """Caused by the server (5xx)."""


class VLLMValidationError(VLLMClientError):
    """A request that fails validation, e.g. a prompt longer than the model's context."""

    def __init__(self, message: str, *, parameter: str | None = None, value: Any = None) -> None:
        super().__init__(message)
        self.parameter = parameter
        self.value = value


for _cls in (VLLMError, VLLMClientError, VLLMServerError, VLLMValidationError):
    _cls.__module__ = "vllm.exceptions"


# ---------------------------------------------------------------- engine death (vllm/v1/engine/exceptions.py)

ENGINE_DEAD_MESSAGE = "EngineCore encountered an issue. See stack trace (above) for the root cause."


class EngineGenerateError(Exception):
    """A request failed; the engine lives on."""


class EngineDeadError(Exception):
    """The engine core process is gone: no later request can succeed."""

    def __init__(self, *args: Any, suppress_context: bool = False, **kwargs: Any) -> None:
        super().__init__(ENGINE_DEAD_MESSAGE, *args, **kwargs)
        self.__suppress_context__ = suppress_context


class EngineDeadServerError(VLLMServerError):
    """0.33's EngineDeadError, one of vLLM's server errors (named as vLLM names it)."""

    def __init__(self, *args: Any, suppress_context: bool = False, **kwargs: Any) -> None:
        super().__init__(ENGINE_DEAD_MESSAGE, *args, **kwargs)
        self.__suppress_context__ = suppress_context


EngineDeadServerError.__name__ = EngineDeadServerError.__qualname__ = "EngineDeadError"
for _dead in (EngineGenerateError, EngineDeadError, EngineDeadServerError):
    _dead.__module__ = "vllm.v1.engine.exceptions"


# ---------------------------------------------------------------- parameters and outputs, as vllm has them


@dataclass
class StructuredOutputsParams:
    json: str | dict[str, Any] | None = None


class GuidedDecodingParams(StructuredOutputsParams):
    """0.10: the only form; 0.11: a deprecated subclass of StructuredOutputsParams."""


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None = None
    logprobs: Any = None
    finish_reason: str | None = "stop"
    stop_reason: int | str | None = None


@dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    num_cached_tokens: int = 0
    finished: bool = True


@dataclass
class EmbeddingOutput:
    embedding: list[float]


@dataclass(frozen=True)
class RequestError:
    """vllm.outputs.RequestError: why a request failed without marking the engine unhealthy."""

    code: str
    message: str
    retryable: bool = False


@dataclass
class EmbeddingRequestOutput:
    request_id: str
    outputs: EmbeddingOutput
    prompt_token_ids: list[int] = field(default_factory=list)
    num_cached_tokens: int = 0
    finished: bool = True
    error: RequestError | None = None


class Tokenizer:
    """Whitespace words; `encode` as the HF tokenizers' signature has it."""

    def encode(self, text: str, truncation: bool | None = None, max_length: int | None = None,
               add_special_tokens: bool = True) -> list[int]:
        ids = [zlib.crc32(word.encode()) % 50000 for word in text.split()]
        return ids[:max_length] if truncation and max_length is not None else ids


class EngineCore:
    def __init__(self, state: StubState, key: int) -> None:
        self.state, self.key = state, key
        self.shutdowns = 0

    def shutdown(self) -> None:
        self.shutdowns += 1
        self.state.device.held.pop(self.key, None)


BLOCK_SIZE = 16  # tokens per KV-cache block (vLLM's default for CUDA)


def start_engine(state: StubState, key: int, args: Any) -> int:
    """vLLM 0.33's start-up memory steps for one engine process; raises what vLLM raises, holding
    nothing then (the process is gone). Returns the KV-cache blocks the engine allocated."""
    device = state.device
    device.held[key] = PROCESS_OVERHEAD_GIB  # the CUDA context comes first
    try:
        requested = device.total * args.gpu_memory_utilization
        if device.free < requested:
            raise ValueError(
                f"Free memory on device cuda:0 ({device.free:.2f}/{device.total:.2f} GiB) on startup is less "
                f"than desired GPU memory utilization ({args.gpu_memory_utilization}, {requested:.2f} GiB). "
                "Decrease GPU memory utilization or reduce GPU memory used by other processes.")
        graphs = 0.0 if args.enforce_eager else CUDA_GRAPH_GIB
        available = requested - MODEL_WEIGHTS_GIB.get(args.model, SMALL_MODEL_GIB) - ACTIVATION_GIB - graphs
        if available <= 0:
            raise ValueError("No available memory for the cache blocks. Try increasing "
                             "`gpu_memory_utilization` when initializing the engine.")
        context = args.max_model_len or NATIVE_CONTEXT
        needed = context * KV_BYTES_PER_TOKEN.get(args.model, SMALL_MODEL_KV_BYTES) / GIB
        if needed > available:
            raise ValueError(
                f"To serve at least one request with the model's max seq len ({context}), ({needed:.2f} GiB "
                f"KV cache is needed, which is larger than the available KV cache memory ({available:.2f} "
                "GiB). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
                "initializing the engine.")
    except ValueError:
        device.held.pop(key, None)
        raise
    device.held[key] = PROCESS_OVERHEAD_GIB + requested
    per_block = BLOCK_SIZE * KV_BYTES_PER_TOKEN.get(args.model, SMALL_MODEL_KV_BYTES)
    return int(available * GIB // per_block)


def _too_long(state: StubState, length: int, limit: int, generating: bool) -> Exception | None:
    """What vLLM raises for a prompt of `length` tokens against `max_model_len` = `limit`, or None: from
    0.33 on a generating model needs room for one output token; before, only a longer prompt is refused."""
    if length < limit or (length == limit and not (generating and state.generation == "0.33.0")):
        return None
    if length == limit:
        message = (f"The decoder prompt (length {length}) plus the number of requested output tokens (at "
                   f"least 1) is longer than the maximum model length of {limit}.")
    else:
        message = f"The decoder prompt (length {length}) is longer than the maximum model length of {limit}."
    return VLLMValidationError(message) if state.generation == "0.33.0" else ValueError(message)


def _llm_class(state: StubState, engine_args_cls: Any) -> type:
    class LLM:
        def __init__(self, model: str, **kwargs: Any) -> None:
            self.kwargs = {"model": model, **kwargs}
            args = engine_args_cls(**self.kwargs)  # unknown arguments: TypeError, as in vLLM
            blocks = start_engine(state, id(self), args)
            self.max_model_len = args.max_model_len or NATIVE_CONTEXT
            cache_config = types.SimpleNamespace(num_gpu_blocks=blocks, block_size=BLOCK_SIZE)
            self.llm_engine = types.SimpleNamespace(engine_core=EngineCore(state, id(self)),
                                                    vllm_config=types.SimpleNamespace(cache_config=cache_config))
            state.engines.append(self)
            self.chat_calls: list[int] = []  # conversations per call
            self.embed_calls: list[list[Any]] = []
            self.sampling: list[Any] = []
            self._pending: list[tuple[int, Any]] = []
            self._next_id = 0
            self._busy = threading.Lock()

        def get_tokenizer(self) -> Tokenizer:
            return Tokenizer()

        def chat(self, messages: list[list[dict[str, str]]], sampling_params: Any = None,
                 use_tqdm: bool = True, **kwargs: Any) -> list[RequestOutput]:
            with self._inside():
                self.chat_calls.append(len(messages))
                params = (sampling_params if isinstance(sampling_params, list)
                          else [sampling_params] * len(messages))
                added = []
                for conversation, param in zip(messages, params, strict=True):
                    prompt = " ".join(m["content"] for m in conversation).split()
                    refused = _too_long(state, len(prompt), self.max_model_len, generating=True)
                    if refused is not None:
                        if state.generation == "0.33.0":
                            self._pending = [p for p in self._pending if p[0] not in added]
                        raise refused
                    self.sampling.append(param)
                    self._pending.append((self._next_id, (conversation, param)))
                    added.append(self._next_id)
                    self._next_id += 1
                done, self._pending = self._pending, []
                return sorted((self._answer(i, c, p) for i, (c, p) in done), key=lambda o: int(o.request_id))

        def embed(self, prompts: list[Any], *, use_tqdm: bool = True,
                  **kwargs: Any) -> list[EmbeddingRequestOutput]:
            with self._inside():
                self.embed_calls.append(list(prompts))
                return [self._embedding(str(i), prompt) for i, prompt in enumerate(prompts)]

        @contextlib.contextmanager
        def _inside(self) -> Iterator[None]:
            if state.dead:
                raise sys.modules["vllm.v1.engine.exceptions"].EngineDeadError()
            if not self._busy.acquire(blocking=False):
                raise RuntimeError("two threads inside one engine")
            try:
                time.sleep(0)  # let another thread try to come in
                yield
            finally:
                self._busy.release()

        def _embedding(self, request_id: str, prompt: Any) -> EmbeddingRequestOutput:
            ids = prompt["prompt_token_ids"] if isinstance(prompt, dict) else Tokenizer().encode(prompt)
            refused = _too_long(state, len(ids), self.max_model_len, generating=False)
            if refused is not None:
                raise refused
            failed = state.embed_errors.get(tuple(ids))
            if failed is not None:
                return EmbeddingRequestOutput(request_id, EmbeddingOutput([]), list(ids), error=failed)
            width = MODEL_DIMS.get(self.kwargs["model"], EMBED_DIM)
            vector = [float((zlib.crc32(str(ids).encode()) >> (k % 29)) & 7) + 1.0 for k in range(width)]
            return EmbeddingRequestOutput(request_id, EmbeddingOutput(vector), list(ids))

        def _answer(self, request_id: int, conversation: list[dict[str, str]], param: Any) -> RequestOutput:
            last = conversation[-1]["content"]
            prompt = Tokenizer().encode(" ".join(m["content"] for m in conversation))
            reason = state.finish_reasons.get(last)
            if reason is not None:  # a failed or aborted request: finished, with what it had (nothing)
                failed = CompletionOutput(0, "", [], finish_reason=reason)
                return RequestOutput(str(request_id), prompt, [failed])
            constrained = (getattr(param, "structured_outputs", None)
                           or getattr(param, "guided_decoding", None))
            text = json.dumps({"echo": last}) if constrained is not None else f"echo: {last}"
            return RequestOutput(str(request_id), prompt,
                                 [CompletionOutput(0, text, list(range(len(text.split()))))],
                                 num_cached_tokens=len(prompt) // 2)

    return LLM
