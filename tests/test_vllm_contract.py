"""The vLLM stub (tests/vllm_stub.py) and the backends' calls against what each supported vLLM version
has. VERSIONS holds, per minor version of vLLM that a wheel set installs (slurm/constraints-gpu*.txt),
the facts read from that version's released wheel: the structured-output classes, the finish reasons,
the LLM's default memory share, the pooling field of EngineArgs, the exception classes and what a
refusal is, the modules holding the messages the stub imitates, and the server's request models.

Two kinds of test, both over that table:
- the stub's generation for each version (its `stub` column) has the version's facts: runs anywhere;
- the installed vLLM has its row's facts, and the stub's field lists and defaults: runs where vLLM is
  installed (on a GPU node: slurm/gpu_smoke.sh runs this file first), skipped elsewhere, and skipped
  for a version the table does not know, naming the ones it knows.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.util
import inspect
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import vllm_stub

from memforest.llm.base import SUCCESS_FINISHES, ChatRequest
from memforest.llm.embedders import pooling_args
from memforest.llm.vllm_backend import json_constraint, refusal_types

REPO = Path(__file__).resolve().parents[1]
STRUCTURED_CLASSES = ("StructuredOutputsParams", "GuidedDecodingParams")  # in vllm.sampling_params
STRUCTURED_FIELDS = ("structured_outputs", "guided_decoding")  # of SamplingParams
POOLING_FIELDS = ("runner", "task")  # of EngineArgs


@dataclass(frozen=True)
class Version:
    """What one vLLM minor version has; each fact names the file of the wheel it was read from."""

    stub: str  # the generation of tests/vllm_stub.py that stands for this version
    structured_classes: frozenset[str]  # vllm/sampling_params.py
    structured_fields: frozenset[str]  # vllm/sampling_params.py, SamplingParams
    finish_reasons: tuple[str, ...]  # vllm/v1/engine/__init__.py, FINISH_REASON_STRINGS
    default_utilization: float  # vllm/entrypoints/llm.py, LLM.__init__
    pooling_fields: frozenset[str]  # vllm/engine/arg_utils.py, EngineArgs
    exceptions_module: bool  # vllm/exceptions.py exists
    refusal: str  # the class the input processor raises for a prompt longer than max_model_len
    refuses_full_context: bool  # a generating prompt of exactly max_model_len is refused too
    engine_dead_mro: tuple[str, ...]  # vllm/v1/engine/exceptions.py, EngineDeadError
    engine_dead_message: str
    # vLLM output class -> the fields of the stub's class that it lacks (vllm/outputs.py); absent: none
    outputs_lacking: dict[str, frozenset[str]]
    input_processor: str  # the module that refuses over-length prompts
    startup_memory_check: str  # the module of "... on startup is less than desired GPU memory ..."
    kv_cache_planning: str  # the module of the KV-cache-too-small errors
    kv_cache_fit_message: str  # how its one-request-of-max-seq-len error starts
    cuda_graph_estimate: bool  # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS in vllm/v1/worker/gpu_worker.py
    chat_protocol: str  # the module of the server's ChatCompletionRequest
    embed_protocol: str  # the module of the server's EmbeddingCompletionRequest

    @property
    def pooling_args(self) -> dict[str, str]:
        """The embedder's pooling argument on this version (memforest.llm.embedders.pooling_args)."""
        return {"runner": "pooling"} if "runner" in self.pooling_fields else {"task": "embed"}


ENGINE_DEAD = "EngineCore encountered an issue. See stack trace (above) for the root cause."
VERSIONS: dict[tuple[int, int], Version] = {
    (0, 11): Version(
        stub="0.11.0",
        structured_classes=frozenset(STRUCTURED_CLASSES),  # GuidedDecodingParams: a deprecated subclass
        structured_fields=frozenset(STRUCTURED_FIELDS),
        finish_reasons=("stop", "length", "abort"),
        default_utilization=0.9,
        pooling_fields=frozenset({"runner", "task"}),
        exceptions_module=False,
        refusal="ValueError",
        refuses_full_context=False,  # only prompts longer than max_model_len are refused
        engine_dead_mro=("EngineDeadError", "Exception", "BaseException", "object"),
        engine_dead_message=ENGINE_DEAD,
        outputs_lacking={"PoolingRequestOutput": frozenset({"num_cached_tokens", "error"}),
                         "RequestError": frozenset({"code", "message", "retryable"})},
        input_processor="vllm.v1.engine.processor",
        startup_memory_check="vllm.v1.worker.gpu_worker",
        kv_cache_planning="vllm.v1.core.kv_cache_utils",
        kv_cache_fit_message="To serve at least one request with the models's max seq len",
        cuda_graph_estimate=False,
        chat_protocol="vllm.entrypoints.openai.protocol",
        embed_protocol="vllm.entrypoints.openai.protocol",
    ),
    (0, 33): Version(
        stub="0.33.0",
        structured_classes=frozenset({"StructuredOutputsParams"}),
        structured_fields=frozenset({"structured_outputs"}),
        finish_reasons=("stop", "length", "abort", "error", "repetition"),
        default_utilization=0.92,
        pooling_fields=frozenset({"runner"}),
        exceptions_module=True,
        refusal="VLLMValidationError",
        refuses_full_context=True,
        engine_dead_mro=("EngineDeadError", "VLLMServerError", "VLLMError", "Exception", "BaseException",
                         "object"),
        engine_dead_message=ENGINE_DEAD,
        outputs_lacking={},
        input_processor="vllm.v1.engine.input_processor",
        startup_memory_check="vllm.v1.worker.utils",
        kv_cache_planning="vllm.v1.core.kv_cache_planning",
        kv_cache_fit_message="To serve at least one request with the model's max seq len",
        cuda_graph_estimate=True,
        chat_protocol="vllm.entrypoints.openai.chat_completion.protocol",
        embed_protocol="vllm.entrypoints.pooling.embed.protocol",
    ),
}


def expectations(version: str) -> Version:
    """The row of vLLM `version` ("0.11.0", "0.33.2rc1"); skips the calling test for another version."""
    match = re.match(r"(\d+)\.(\d+)", version)
    row = VERSIONS.get((int(match.group(1)), int(match.group(2)))) if match else None
    if row is None:
        known = " and ".join(f"{major}.{minor}" for major, minor in sorted(VERSIONS))
        pytest.skip(f"vLLM {version} is installed; this test knows vLLM {known}: read the new version's "
                    "sources, add its row to VERSIONS in tests/test_vllm_contract.py and a generation for "
                    "it to tests/vllm_stub.py")
    return row


# ---------------------------------------------------------------- the table and the stub (no vLLM needed)


def test_the_table_has_a_row_for_each_stub_generation_of_a_wheel_set() -> None:
    assert sorted(row.stub for row in VERSIONS.values()) == ["0.11.0", "0.33.0"]
    for (major, minor), row in VERSIONS.items():
        assert row.stub in vllm_stub.GENERATIONS and row.stub.startswith(f"{major}.{minor}.")
        assert set(SUCCESS_FINISHES) <= set(row.finish_reasons)
    pins = set()
    for name in ("constraints-gpu.txt", "constraints-gpu-cuda12.txt"):  # the wheel sets
        pin = re.search(r"^vllm==(\d+)\.(\d+)\.", (REPO / "slurm" / name).read_text(), re.M)
        assert pin is not None, name
        pins.add((int(pin.group(1)), int(pin.group(2))))
    assert pins == set(VERSIONS)


def test_a_version_picks_its_row_by_its_minor_version_and_another_is_skipped() -> None:
    assert expectations("0.11.0") is VERSIONS[0, 11]
    assert expectations("0.33.2") is VERSIONS[0, 33]
    assert expectations("0.33.0rc1") is VERSIONS[0, 33]
    with pytest.raises(pytest.skip.Exception, match=r"vLLM 0\.12\.1 is installed; this test knows vLLM 0\.11 "
                                                    r"and 0\.33: .* add its row to VERSIONS"):
        expectations("0.12.1")


@contextlib.contextmanager
def stub_vllm(generation: str) -> Iterator[Any]:
    """The stub's `vllm` of `generation`, installed for the block only."""
    with pytest.MonkeyPatch.context() as patch:
        vllm_stub.install(patch, generation)
        yield sys.modules["vllm"]


def _refusal(vllm: Any, words: int) -> str | None:
    """The class the stub's engine (max_model_len 4) raises for a chat prompt of `words` words, or None."""
    llm = vllm.LLM("m", max_model_len=4)
    try:
        llm.chat([[{"role": "user", "content": "w " * words}]])
    except Exception as exc:  # the class is the answer
        return type(exc).__name__
    return None


def _stub_utilization(vllm: Any) -> object:
    """The default share of the stub's EngineArgs (DEFAULT_UTILIZATION), which its LLM starts with."""
    return {f.name: f.default for f in dataclasses.fields(vllm.engine.arg_utils.EngineArgs)}[
        "gpu_memory_utilization"]


def structured_classes(vllm: Any) -> frozenset[str]:
    return frozenset(n for n in STRUCTURED_CLASSES if hasattr(vllm.sampling_params, n))


def structured_fields(vllm: Any) -> frozenset[str]:
    params = vllm.SamplingParams()
    return frozenset(n for n in STRUCTURED_FIELDS if hasattr(params, n))


def mro_names(cls: type) -> tuple[str, ...]:
    return tuple(c.__name__ for c in cls.__mro__)


# Each fact of a row, as the stub's `vllm` shows it
STUB_FACTS: dict[str, Callable[[Any], object]] = {
    "structured_classes": structured_classes,
    "structured_fields": structured_fields,
    "default_utilization": _stub_utilization,
    "pooling_args": lambda v: pooling_args(),
    "exceptions_module": lambda v: hasattr(v, "exceptions"),
    "refusal": lambda v: _refusal(v, 9),
    "refuses_full_context": lambda v: _refusal(v, 4) is not None,
    "engine_dead_mro": lambda v: mro_names(v.v1.engine.exceptions.EngineDeadError),
    "engine_dead_message": lambda v: str(v.v1.engine.exceptions.EngineDeadError()),
}


@pytest.mark.parametrize(("generation", "fact"), [
    pytest.param(row.stub, fact, id=f"{row.stub}-{fact}")
    for row in VERSIONS.values() for fact in STUB_FACTS])
def test_each_stub_generation_has_its_versions_facts(generation: str, fact: str) -> None:
    row = expectations(generation)
    with stub_vllm(generation) as vllm:
        assert STUB_FACTS[fact](vllm) == getattr(row, fact)


# ---------------------------------------------------------------- the installed vLLM (a GPU node)


@pytest.fixture(scope="module")
def vllm() -> Any:
    return pytest.importorskip("vllm")


@pytest.fixture(scope="module")
def row(vllm: Any) -> Version:
    return expectations(vllm.__version__)


def parameters(func: Any) -> dict[str, inspect.Parameter]:
    return dict(inspect.signature(func).parameters)


def init_names(cls: type) -> set[str]:
    if dataclasses.is_dataclass(cls):
        return {f.name for f in dataclasses.fields(cls)}
    return set(parameters(cls)) - {"args", "kwargs"}


def source(module: str) -> str:
    spec = importlib.util.find_spec(module)  # read, not imported: these modules need a GPU build
    assert spec is not None and spec.origin is not None, module
    return Path(spec.origin).read_text(encoding="utf-8")


def test_sampling_params_fields_and_defaults(vllm: Any, row: Version) -> None:
    real = vllm.SamplingParams()
    for name, default in vllm_stub.SAMPLING_FIELDS:
        assert getattr(real, name) == default, name
    assert structured_classes(vllm) == row.structured_classes
    assert structured_fields(vllm) == row.structured_fields
    structured = vllm.SamplingParams(**json_constraint({"type": "object"}))
    assert type(structured.structured_outputs).__name__ == "StructuredOutputsParams"


def test_the_in_process_request_fields_are_sampling_params_fields(vllm: Any, row: Version) -> None:
    request = ChatRequest(messages=({"role": "user", "content": "x"},), stage="t", prompt_id="t",
                          max_tokens=40, temperature=0.3, top_p=0.9, seed=7)
    fields = request.vllm_sampling()
    params = vllm.SamplingParams(**fields)
    assert {name: getattr(params, name) for name in fields} == fields


def test_engine_args_fields_and_llm_defaults(vllm: Any, row: Version) -> None:
    from vllm.engine.arg_utils import EngineArgs

    real = {f.name: f for f in dataclasses.fields(EngineArgs)}
    for name, _ in vllm_stub.ENGINE_FIELDS:
        assert name in real, f"EngineArgs has no {name}"
    assert frozenset(n for n in POOLING_FIELDS if n in real) == row.pooling_fields
    assert pooling_args() == row.pooling_args
    llm_init = parameters(vllm.LLM.__init__)
    assert llm_init["gpu_memory_utilization"].default == row.default_utilization
    assert vllm_stub.DEFAULT_UTILIZATION[row.stub] == row.default_utilization
    assert any(p.kind is inspect.Parameter.VAR_KEYWORD for p in llm_init.values())  # the rest: EngineArgs


def test_llm_call_signatures(vllm: Any, row: Version) -> None:
    chat = parameters(vllm.LLM.chat)
    assert list(chat)[1:4] == ["messages", "sampling_params", "use_tqdm"]
    embed = parameters(vllm.LLM.embed)
    assert list(embed)[1] == "prompts" and embed["use_tqdm"].kind is inspect.Parameter.KEYWORD_ONLY
    assert callable(vllm.LLM.get_tokenizer)
    from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

    assert "shutdown_ray" in parameters(cleanup_dist_env_and_memory)


def test_output_classes_have_the_stubs_fields(vllm: Any, row: Version) -> None:
    from vllm import outputs

    for stub_cls, name in ((vllm_stub.CompletionOutput, "CompletionOutput"),
                           (vllm_stub.RequestOutput, "RequestOutput"),
                           (vllm_stub.EmbeddingOutput, "EmbeddingOutput"),
                           (vllm_stub.EmbeddingRequestOutput, "PoolingRequestOutput"),
                           (vllm_stub.RequestError, "RequestError")):
        real_cls = getattr(outputs, name, None)
        missing = init_names(stub_cls) - (init_names(real_cls) if real_cls is not None else set())
        assert missing == row.outputs_lacking.get(name, set()), name
    assert outputs.EmbeddingRequestOutput.__mro__[1] is outputs.PoolingRequestOutput


def test_exception_classes_and_what_a_refusal_is(vllm: Any, row: Version) -> None:
    assert (importlib.util.find_spec("vllm.exceptions") is not None) == row.exceptions_module
    if not row.exceptions_module:
        assert refusal_types(vllm) == (ValueError,)
        return
    from vllm import exceptions

    for stub_cls in (vllm_stub.VLLMError, vllm_stub.VLLMClientError, vllm_stub.VLLMServerError,
                     vllm_stub.VLLMValidationError):
        assert mro_names(getattr(exceptions, stub_cls.__name__)) == mro_names(stub_cls)
    assert not issubclass(exceptions.VLLMValidationError, ValueError)
    assert issubclass(exceptions.VLLMValidationError, refusal_types(vllm))
    assert "parameter" in parameters(exceptions.VLLMValidationError.__init__)


def test_a_dead_engine_raises_the_class_and_message_the_stub_raises(vllm: Any, row: Version) -> None:
    dead = importlib.import_module("vllm.v1.engine.exceptions").EngineDeadError
    assert str(dead()) == row.engine_dead_message == vllm_stub.ENGINE_DEAD_MESSAGE
    assert mro_names(dead) == row.engine_dead_mro


def test_finish_reasons_and_the_over_length_refusal(vllm: Any, row: Version) -> None:
    from vllm.v1.engine import FINISH_REASON_STRINGS

    assert tuple(FINISH_REASON_STRINGS) == row.finish_reasons
    processor = source(row.input_processor)
    at = processor.index("longer than the maximum model length of")
    raised = re.findall(r"raise (\w+)\(", processor[:at])[-1]  # the raise this message belongs to
    assert raised == row.refusal
    assert ("plus the number of" in processor) == row.refuses_full_context  # no room left for output


def test_the_start_up_memory_errors_the_stub_raises(vllm: Any, row: Version) -> None:
    check = source(row.startup_memory_check)
    assert "is less than desired GPU memory utilization" in check and "on startup" in check
    planning = source(row.kv_cache_planning)
    assert "No available memory for the cache blocks" in planning
    assert row.kv_cache_fit_message in planning
    assert ("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS" in source("vllm.v1.worker.gpu_worker")
            ) == row.cuda_graph_estimate


def test_the_served_path_sends_fields_the_server_knows(vllm: Any, row: Version) -> None:
    chat = importlib.import_module(row.chat_protocol).ChatCompletionRequest
    embed = importlib.import_module(row.embed_protocol).EmbeddingCompletionRequest
    request = ChatRequest(messages=({"role": "user", "content": "x"},), stage="t", prompt_id="t", seed=1)
    assert set(request.vllm_sampling()) <= set(chat.model_fields)
    assert "truncate_prompt_tokens" in embed.model_fields
