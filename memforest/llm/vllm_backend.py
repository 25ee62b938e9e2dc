"""In-process vLLM (GPU): engines built from the library configs, released on close, and the chat model.

Several engines may share one GPU (a chat model and an embedder): each is built with its own memory
share (`gpu_memory_utilization`, a fraction of the whole device that vLLM checks is free at start-up)
and context length. `engine_args` pass further `vllm.LLM` arguments through unchanged. An engine is
thread-safe here: one lock serialises the calls into it.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from memforest.config import LLMConfig
from memforest.errors import ConfigError, ModelError, ModelUnavailableError, error_line
from memforest.llm.base import (
    SUCCESS_FINISHES,
    ChatRequest,
    ChatResponse,
    TransientModelError,
    Usage,
    check_response,
    finish_failure,
)

INSTALL_HINT = "pip install 'memforest[gpu]'"


def import_vllm() -> Any:
    """The `vllm` module, or a ConfigError with the install hint."""
    try:
        import vllm
    except ImportError as exc:
        raise ConfigError(f"vLLM is not installed: {INSTALL_HINT}") from exc
    return vllm


def json_constraint(schema: dict[str, Any]) -> dict[str, Any]:
    """SamplingParams keyword constraining output to `schema`, for whichever vLLM API exists:
    `structured_outputs=StructuredOutputsParams(...)` (newer) or
    `guided_decoding=GuidedDecodingParams(...)`."""
    from vllm import sampling_params

    if hasattr(sampling_params, "StructuredOutputsParams"):
        return {"structured_outputs": sampling_params.StructuredOutputsParams(json=schema)}
    if hasattr(sampling_params, "GuidedDecodingParams"):
        return {"guided_decoding": sampling_params.GuidedDecodingParams(json=schema)}
    raise ConfigError("this vLLM version has neither StructuredOutputsParams nor GuidedDecodingParams")


# ---------------------------------------------------------------- engines


def engine_kwargs(section: str, fields: Mapping[str, tuple[str, Any]],
                  engine_args: Mapping[str, Any]) -> dict[str, Any]:
    """`vllm.LLM` keyword arguments: `fields` maps an argument to (the config field that sets it, its
    value); `engine_args` adds any other argument. Setting an argument in both is a ConfigError."""
    for name in engine_args:
        if name in fields:
            raise ConfigError(f"{section}.engine_args.{name}: set {section}.{fields[name][0]} instead")
    return {**{name: value for name, (_, value) in fields.items()}, **engine_args}


class _LiveEngines:
    """How many engines this process holds; vLLM's process-wide clean-up waits for the last one."""

    def __init__(self) -> None:
        self.count = 0
        self.lock = threading.Lock()

    def change(self, delta: int) -> int:
        with self.lock:
            self.count = max(0, self.count + delta)
            return self.count


_live = _LiveEngines()


def open_engine(vllm: Any, kwargs: dict[str, Any]) -> Any:
    """A `vllm.LLM` built with `kwargs`, counted until `release_memory`."""
    llm = vllm.LLM(**kwargs)
    _live.change(+1)
    return llm


def shutdown_engine(llm: Any) -> None:
    """Stop an offline `vllm.LLM`'s engine core (on vLLM's V1 engine a separate process that holds the
    weights and KV cache; stopping it returns that memory to the device)."""
    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    shutdown = getattr(core, "shutdown", None)
    if callable(shutdown):
        shutdown()


def release_memory() -> None:
    """After the caller dropped its engine: collect it, and when it was this process's last engine let
    vLLM tear down its distributed state and empty the CUDA cache (`cleanup_dist_env_and_memory`);
    otherwise empty the CUDA cache only, leaving the other engines' state alone."""
    last = _live.change(-1) == 0
    gc.collect()
    if last:
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

        cleanup_dist_env_and_memory()
        return
    try:
        import torch
    except ImportError:
        return
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def kv_cache_capacity(llm: Any) -> dict[str, int] | None:
    """The KV cache the engine allocated, as its client learnt it from the engine core at start-up
    (`llm_engine.vllm_config.cache_config`: blocks and tokens per block, vLLM 0.11 and 0.33); None when
    this vLLM does not say."""
    engine = getattr(llm, "llm_engine", None)
    cache = getattr(getattr(engine, "vllm_config", None), "cache_config", None)
    blocks, block_size = getattr(cache, "num_gpu_blocks", None), getattr(cache, "block_size", None)
    if not isinstance(blocks, int) or not isinstance(block_size, int) or blocks <= 0:
        return None
    return {"gpu_blocks": blocks, "block_size": block_size, "tokens": blocks * block_size}


class EngineOwner:
    """Holds one offline `vllm.LLM` behind a lock; `close` stops it and returns its memory."""

    _lock: threading.Lock
    _llm: Any
    kv_cache: dict[str, int] | None = None  # what the engine allocated (kv_cache_capacity)

    def close(self) -> None:
        with self._lock:
            llm, self._llm = self._llm, None
        if llm is None:
            return
        try:
            shutdown_engine(llm)
        finally:  # a core that fails to stop (or is already dead) still leaves memory to return
            del llm  # the last reference, so that release_memory can collect the engine
            release_memory()


def refusal_types(vllm: Any) -> tuple[type[Exception], ...]:
    """What vLLM raises for a request it refuses (a prompt longer than the context, a schema it cannot
    compile): `vllm.exceptions.VLLMClientError` from 0.33 on (its VLLMValidationError is not a
    ValueError), ValueError in earlier versions."""
    client_error = getattr(getattr(vllm, "exceptions", None), "VLLMClientError", None)
    return (ValueError, client_error) if isinstance(client_error, type) else (ValueError,)


def _failure(name: str, exc: Exception, refusals: tuple[type[Exception], ...]) -> Exception:
    """A failed request's result: a dead engine as a ModelUnavailableError (no request can succeed any
    more), a refusal as a ModelError with vLLM's reason, a timeout or lost connection as worth
    retrying, anything else as it is."""
    if engine_dead(exc):
        return ModelUnavailableError(f"{name}: the vLLM engine is gone: {error_line(exc)}")
    if isinstance(exc, (TimeoutError, ConnectionError)):
        return TransientModelError(f"{type(exc).__name__}: {exc}")
    if isinstance(exc, refusals):
        return ModelError(f"{name}: vLLM refused the request: {error_line(exc)}")
    return exc


def engine_dead(exc: Exception) -> bool:
    """vLLM's EngineDeadError: the engine is gone, so every request fails the same way."""
    return type(exc).__name__ == "EngineDeadError"


# ---------------------------------------------------------------- the chat model


class VLLMChatModel(EngineOwner):
    """`vllm.LLM` in this process; `generate` sends a whole wave through one `LLM.chat` call. A request
    that makes the call fail (a prompt longer than the context, a schema the engine refuses) fails
    alone: the wave is split in halves and retried until the failing requests stand alone. A request
    the engine finished without an answer (finish_reason "error", "abort", "repetition") is a ModelError
    with that reason, worth retrying for "error" (`finish_failure`)."""

    batched = True

    def __init__(self, cfg: LLMConfig) -> None:
        vllm = import_vllm()
        self.cfg = cfg
        self.name = cfg.model
        self.max_concurrency = cfg.concurrency
        self._vllm = vllm
        self._refusals = refusal_types(vllm)
        self._lock = threading.Lock()
        fields = {
            "model": ("model", cfg.model),
            "tensor_parallel_size": ("tensor_parallel_size", cfg.tensor_parallel_size),
            "gpu_memory_utilization": ("gpu_memory_utilization", cfg.gpu_memory_utilization),
            "max_model_len": ("context_tokens", cfg.context_tokens),
            "enable_prefix_caching": ("enable_prefix_caching", cfg.enable_prefix_caching),
            "dtype": ("dtype", cfg.dtype),
            "seed": ("seed", cfg.seed),
        }
        self._llm: Any = open_engine(vllm, engine_kwargs("llm", fields, cfg.engine_args))
        self.kv_cache = kv_cache_capacity(self._llm)

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResponse | Exception]:
        if not requests:
            return []
        with self._lock:
            if self._llm is None:
                return [ModelError(f"{self.name}: the model is closed") for _ in requests]
            return self._generate(list(requests))


    def _generate(self, requests: list[ChatRequest]) -> list[ChatResponse | Exception]:
        try:
            outputs = self._chat(requests)
        except Exception as exc:
            if len(requests) == 1 or engine_dead(exc):
                return [_failure(self.name, exc, self._refusals) for _ in requests]
            half = len(requests) // 2
            return self._generate(requests[:half]) + self._generate(requests[half:])
        return [self._result(r, o) for r, o in zip(requests, outputs, strict=True)]

    def _result(self, request: ChatRequest, output: Any) -> ChatResponse | Exception:
        completion = output.outputs[0]
        reason = completion.finish_reason or "stop"
        if reason not in SUCCESS_FINISHES:
            stop = getattr(completion, "stop_reason", None)
            detail = f", stop_reason={stop!r}" if stop is not None else ""
            return finish_failure(reason, f"{self.name}: vLLM finished the {request.stage} request with "
                                  f"finish_reason={reason!r}{detail}, not an answer")
        return check_response(request, self._response(output))

    def _chat(self, requests: list[ChatRequest]) -> list[Any]:
        params = [self._sampling_params(r) for r in requests]
        outputs = list(self._llm.chat([list(r.messages) for r in requests], params, use_tqdm=False))
        # vLLM 0.10 and 0.11 keep the requests added before the one that failed an earlier call in the engine
        # and finish with the next call. Outputs come sorted by request id, so this call's are the last.
        if len(outputs) < len(requests):
            raise ModelError(f"{self.name}: {len(outputs)} outputs for {len(requests)} requests")
        return outputs[len(outputs) - len(requests):]

    def _sampling_params(self, request: ChatRequest) -> Any:
        kwargs = request.vllm_sampling()
        if request.json_schema is not None:
            kwargs.update(json_constraint(request.json_schema))
        return self._vllm.SamplingParams(**kwargs)

    def _response(self, output: Any) -> ChatResponse:
        completion = output.outputs[0]
        return ChatResponse(
            text=completion.text,
            usage=Usage(
                prompt_tokens=len(output.prompt_token_ids or []),
                cached_prompt_tokens=int(getattr(output, "num_cached_tokens", 0) or 0),
                completion_tokens=sum(len(c.token_ids) for c in output.outputs),
            ),
            finish_reason=completion.finish_reason or "stop",
            model=self.name,
        )
