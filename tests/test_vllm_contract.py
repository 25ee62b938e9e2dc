"""The vLLM stub (tests/vllm_stub.py) against the real `vllm` package, where it is installed (on a GPU
node: slurm/gpu_smoke.sh runs this file first); skipped elsewhere. Each test compares one claim of the
stub, or one call the backends make, with the installed vLLM: the SamplingParams and EngineArgs fields and
defaults, the LLM call signatures, the output classes' fields, the exception classes, the finish reasons,
the start-up memory errors, and the fields the served path sends."""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
from pathlib import Path
from typing import Any

import pytest
import vllm_stub

from memforest.llm.base import SUCCESS_FINISHES, ChatRequest
from memforest.llm.vllm_backend import json_constraint, refusal_types

vllm = pytest.importorskip("vllm")
STUB = "0.33.0"  # the generation of the stub that stands for the pinned vLLM


def test_the_installed_vllm_is_the_one_the_stub_stands_for() -> None:
    assert vllm.__version__.startswith("0.33."), (
        f"vLLM {vllm.__version__} is installed; tests/vllm_stub.py stands for {STUB}: check the stub's "
        "claims against the new version and add it as a generation")


def parameters(func: Any) -> dict[str, inspect.Parameter]:
    return dict(inspect.signature(func).parameters)


def init_names(cls: type) -> set[str]:
    if dataclasses.is_dataclass(cls):
        return {f.name for f in dataclasses.fields(cls)}
    return set(parameters(cls)) - {"args", "kwargs"}


def test_sampling_params_fields_and_defaults() -> None:
    real = vllm.SamplingParams()
    for name, default in vllm_stub.SAMPLING_FIELDS:
        assert getattr(real, name) == default, name
    structured = vllm.SamplingParams(**json_constraint({"type": "object"}))
    assert type(structured.structured_outputs).__name__ == "StructuredOutputsParams"
    assert not hasattr(vllm.sampling_params, "GuidedDecodingParams")  # as the 0.33 stub has it


def test_the_in_process_request_fields_are_sampling_params_fields() -> None:
    request = ChatRequest(messages=({"role": "user", "content": "x"},), stage="t", prompt_id="t",
                          max_tokens=40, temperature=0.3, top_p=0.9, seed=7)
    fields = request.vllm_sampling()
    params = vllm.SamplingParams(**fields)
    assert {name: getattr(params, name) for name in fields} == fields


def test_engine_args_fields_and_llm_defaults() -> None:
    from vllm.engine.arg_utils import EngineArgs

    real = {f.name: f for f in dataclasses.fields(EngineArgs)}
    for name, _ in vllm_stub.ENGINE_FIELDS:
        assert name in real, f"EngineArgs has no {name}"
    assert "runner" in real and "task" not in real
    llm_init = parameters(vllm.LLM.__init__)
    assert llm_init["gpu_memory_utilization"].default == vllm_stub.DEFAULT_UTILIZATION[STUB]
    assert any(p.kind is inspect.Parameter.VAR_KEYWORD for p in llm_init.values())  # the rest: EngineArgs


def test_llm_call_signatures() -> None:
    chat = parameters(vllm.LLM.chat)
    assert list(chat)[1:4] == ["messages", "sampling_params", "use_tqdm"]
    embed = parameters(vllm.LLM.embed)
    assert list(embed)[1] == "prompts" and embed["use_tqdm"].kind is inspect.Parameter.KEYWORD_ONLY
    assert callable(vllm.LLM.get_tokenizer)
    from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

    assert "shutdown_ray" in parameters(cleanup_dist_env_and_memory)


def test_output_classes_have_the_stubs_fields() -> None:
    from vllm import outputs

    for stub_cls, real_cls in ((vllm_stub.CompletionOutput, outputs.CompletionOutput),
                               (vllm_stub.RequestOutput, outputs.RequestOutput),
                               (vllm_stub.EmbeddingOutput, outputs.EmbeddingOutput),
                               (vllm_stub.EmbeddingRequestOutput, outputs.PoolingRequestOutput),
                               (vllm_stub.RequestError, outputs.RequestError)):
        missing = init_names(stub_cls) - init_names(real_cls)
        assert not missing, f"{real_cls.__name__} has no {sorted(missing)}"
    assert outputs.EmbeddingRequestOutput.__mro__[1] is outputs.PoolingRequestOutput


def test_exception_classes_and_what_a_refusal_is() -> None:
    from vllm import exceptions

    for stub_cls in (vllm_stub.VLLMError, vllm_stub.VLLMClientError, vllm_stub.VLLMServerError,
                     vllm_stub.VLLMValidationError):
        real = getattr(exceptions, stub_cls.__name__)
        assert [c.__name__ for c in real.__mro__] == [c.__name__ for c in stub_cls.__mro__]
    assert not issubclass(exceptions.VLLMValidationError, ValueError)
    assert issubclass(exceptions.VLLMValidationError, refusal_types(vllm))
    assert "parameter" in parameters(exceptions.VLLMValidationError.__init__)


def source(module: str) -> str:
    spec = importlib.util.find_spec(module)  # read, not imported: these modules need a GPU build
    assert spec is not None and spec.origin is not None, module
    return Path(spec.origin).read_text(encoding="utf-8")


def test_finish_reasons_and_the_over_length_refusal() -> None:
    from vllm.v1.engine import FINISH_REASON_STRINGS

    assert set(SUCCESS_FINISHES) | {"error", "abort", "repetition"} == set(FINISH_REASON_STRINGS)
    processor = source("vllm.v1.engine.input_processor")
    assert "raise VLLMValidationError(" in processor
    assert "longer than the maximum model length of" in processor
    assert "plus the number of" in processor  # a prompt that fills the context leaves no room for output


def test_the_start_up_memory_errors_the_stub_raises() -> None:
    worker = source("vllm.v1.worker.utils")
    assert "is less than desired GPU memory utilization" in worker and "on startup" in worker
    planning = source("vllm.v1.core.kv_cache_planning")
    assert "No available memory for the cache blocks" in planning
    assert "To serve at least one request with the model's max seq len" in planning
    assert "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS" in source("vllm.v1.worker.gpu_worker")


def test_the_served_path_sends_fields_the_server_knows() -> None:
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.entrypoints.pooling.embed.protocol import EmbeddingCompletionRequest

    request = ChatRequest(messages=({"role": "user", "content": "x"},), stage="t", prompt_id="t", seed=1)
    assert set(request.vllm_sampling()) <= set(ChatCompletionRequest.model_fields)
    assert "truncate_prompt_tokens" in EmbeddingCompletionRequest.model_fields
