"""In-process vLLM chat backend (GPU): one engine, whole waves of requests per call."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memforest.config import LLMConfig
from memforest.errors import ConfigError
from memforest.llm.base import ChatRequest, ChatResponse, TransientModelError, Usage, check_response

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
    `structured_outputs=StructuredOutputsParams(...)` (newer) or `guided_decoding=GuidedDecodingParams(...)`."""
    from vllm import sampling_params

    if hasattr(sampling_params, "StructuredOutputsParams"):
        return {"structured_outputs": sampling_params.StructuredOutputsParams(json=schema)}
    if hasattr(sampling_params, "GuidedDecodingParams"):
        return {"guided_decoding": sampling_params.GuidedDecodingParams(json=schema)}
    raise ConfigError("this vLLM version has neither StructuredOutputsParams nor GuidedDecodingParams")


class VLLMChatModel:
    """`vllm.LLM` in this process; `generate` sends a whole wave through `LLM.chat` at once."""

    batched = True

    def __init__(self, cfg: LLMConfig) -> None:
        vllm = import_vllm()
        self.cfg = cfg
        self.name = cfg.model
        self.max_concurrency = cfg.concurrency
        self._vllm = vllm
        self._llm = vllm.LLM(
            model=cfg.model,
            tensor_parallel_size=cfg.tensor_parallel_size,
            gpu_memory_utilization=cfg.gpu_memory_utilization,
            max_model_len=cfg.context_tokens,
            enable_prefix_caching=cfg.enable_prefix_caching,
            dtype=cfg.dtype,
            seed=cfg.seed,
        )

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResponse | Exception]:
        if not requests:
            return []
        try:
            params = [self._sampling_params(r) for r in requests]
            outputs = self._llm.chat([list(r.messages) for r in requests], params, use_tqdm=False)
        except (TimeoutError, ConnectionError) as exc:
            return [TransientModelError(f"{type(exc).__name__}: {exc}") for _ in requests]
        except Exception as exc:  # the engine fails a wave as a whole
            return [exc for _ in requests]
        return [check_response(r, self._response(o)) for r, o in zip(requests, outputs, strict=True)]

    def close(self) -> None:
        self._llm = None

    def _sampling_params(self, request: ChatRequest) -> Any:
        kwargs: dict[str, Any] = {
            "temperature": request.temperature,
            "top_p": request.top_p,
            "max_tokens": request.max_tokens,
            "seed": request.seed,
        }
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
