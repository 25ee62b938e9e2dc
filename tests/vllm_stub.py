"""A stand-in for the `vllm` package in tests, in three API generations, injected with `install`
(monkeypatch.setitem on sys.modules, so nothing outlives the test).

Names and signatures follow the real sources of the versions each generation stands for:
- "0.10.0": `SamplingParams(guided_decoding=GuidedDecodingParams(json=...))`; pooling through
  `EngineArgs.task` ("embed"); a failing `chat` leaves the requests added before the failing one in
  the engine, and the next call returns their outputs too (sorted by request id);
- "0.11.0": `StructuredOutputsParams` (with `GuidedDecodingParams` as its subclass) and both
  `SamplingParams` fields; `EngineArgs.runner` ("pooling"); failing calls leave requests behind too;
- "0.33.0": `StructuredOutputsParams` only; `runner`; a failing call aborts what it added.

`LLM(...)` accepts only arguments that are `EngineArgs` fields, checks at start-up that the device's free
memory covers its `gpu_memory_utilization` share of the whole (vLLM's start-up check), and holds that
share until its engine core is shut down. Prompts are counted in whitespace words; a prompt longer than
`max_model_len` is refused with vLLM's ValueError. Answers echo the last message, so that tests can
see which request an answer belongs to; embeddings are a hash of the token ids.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import threading
import types
import zlib
from dataclasses import dataclass, field
from typing import Any

import pytest

GENERATIONS = ("0.10.0", "0.11.0", "0.33.0")
DEFAULT_UTILIZATION = {"0.10.0": 0.9, "0.11.0": 0.9, "0.33.0": 0.92}
EMBED_DIM = 16  # the width of every embedding model but these:
MODEL_DIMS = {"Qwen/Qwen3-Embedding-0.6B": 1024}


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

    sampling_fields: list[tuple[str, Any, Any]] = [
        ("temperature", float, 1.0), ("top_p", float, 1.0), ("seed", int | None, None),
        ("max_tokens", int | None, 16)]
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
    engine_fields = [
        ("model", str, field(default="")), pooling, ("tensor_parallel_size", int, field(default=1)),
        ("dtype", str, field(default="auto")), ("seed", int | None, field(default=None)),
        ("gpu_memory_utilization", float, field(default=DEFAULT_UTILIZATION[gen])),
        ("max_model_len", int | None, field(default=None)),
        ("enable_prefix_caching", bool | None, field(default=None)),
        ("max_num_seqs", int | None, field(default=None)), ("enforce_eager", bool, field(default=False)),
        ("limit_mm_per_prompt", dict, field(default_factory=dict)),
    ]
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
    return {"vllm": vllm, "vllm.sampling_params": sp, "vllm.engine": engine,
            "vllm.engine.arg_utils": arg_utils, "vllm.distributed": distributed,
            "vllm.distributed.parallel_state": parallel_state}


# ---------------------------------------------------------------- parameters and outputs, as vllm has them


@dataclass
class StructuredOutputsParams:
    json: str | dict[str, Any] | None = None


class GuidedDecodingParams(StructuredOutputsParams):
    """0.10: the only form; 0.11: a deprecated subclass of StructuredOutputsParams."""


@dataclass
class CompletionOutput:
    text: str
    token_ids: list[int]
    finish_reason: str | None = "stop"


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


@dataclass
class EmbeddingRequestOutput:
    request_id: str
    outputs: EmbeddingOutput


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


def _llm_class(state: StubState, engine_args_cls: Any) -> type:
    class LLM:
        def __init__(self, model: str, **kwargs: Any) -> None:
            self.kwargs = {"model": model, **kwargs}
            args = engine_args_cls(**self.kwargs)  # unknown arguments: TypeError, as in vLLM
            requested = state.device.total * args.gpu_memory_utilization
            if state.device.free < requested:
                raise ValueError(
                    f"Free memory on device ({state.device.free}/{state.device.total} GiB) on "
                    f"startup is less than desired GPU memory utilization ({args.gpu_memory_utilization}, "
                    f"{requested} GiB).")
            self.max_model_len = args.max_model_len or 1 << 20
            self.llm_engine = types.SimpleNamespace(engine_core=EngineCore(state, id(self)))
            state.device.held[id(self)] = requested
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
            if not self._busy.acquire(blocking=False):
                raise RuntimeError("two threads inside one engine")
            try:
                self.chat_calls.append(len(messages))
                params = (sampling_params if isinstance(sampling_params, list)
                          else [sampling_params] * len(messages))
                added = []
                for conversation, param in zip(messages, params, strict=True):
                    prompt = " ".join(m["content"] for m in conversation).split()
                    if len(prompt) > self.max_model_len:
                        if state.generation == "0.33.0":
                            self._pending = [p for p in self._pending if p[0] not in added]
                        raise ValueError(f"The decoder prompt (length {len(prompt)}) is longer than the "
                                         f"maximum model length of {self.max_model_len}.")
                    self.sampling.append(param)
                    self._pending.append((self._next_id, (conversation, param)))
                    added.append(self._next_id)
                    self._next_id += 1
                done, self._pending = self._pending, []
                return sorted((self._answer(i, c, p) for i, (c, p) in done), key=lambda o: int(o.request_id))
            finally:
                self._busy.release()

        def embed(self, prompts: list[Any], *, use_tqdm: bool = True,
                  **kwargs: Any) -> list[EmbeddingRequestOutput]:
            self.embed_calls.append(list(prompts))
            out = []
            for i, prompt in enumerate(prompts):
                ids = prompt["prompt_token_ids"] if isinstance(prompt, dict) else Tokenizer().encode(prompt)
                if len(ids) > self.max_model_len:
                    raise ValueError(f"The decoder prompt (length {len(ids)}) is longer than "
                                     f"the maximum model length of {self.max_model_len}.")
                width = MODEL_DIMS.get(self.kwargs["model"], EMBED_DIM)
                vector = [float((zlib.crc32(str(ids).encode()) >> (k % 29)) & 7) + 1.0 for k in range(width)]
                out.append(EmbeddingRequestOutput(str(i), EmbeddingOutput(vector)))
            return out

        def _answer(self, request_id: int, conversation: list[dict[str, str]], param: Any) -> RequestOutput:
            last = conversation[-1]["content"]
            constrained = (getattr(param, "structured_outputs", None)
                           or getattr(param, "guided_decoding", None))
            text = json.dumps({"echo": last}) if constrained is not None else f"echo: {last}"
            prompt = Tokenizer().encode(" ".join(m["content"] for m in conversation))
            return RequestOutput(str(request_id), prompt,
                                 [CompletionOutput(text, list(range(len(text.split()))))],
                                 num_cached_tokens=len(prompt) // 2)

    return LLM
