"""Small protocols through which every model call of the project passes."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

from memforest.errors import ModelError, shown

Message = dict[str, str]


@dataclass(frozen=True)
class ChatRequest:
    """One independent chat completion. `stage` and the prompt id/version go into the call log."""

    messages: tuple[Message, ...]
    stage: str
    prompt_id: str
    prompt_version: int = 1
    json_schema: dict[str, Any] | None = None
    max_tokens: int = 512
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    allow_truncation: bool = False  # free text (answers): a reply cut at max_tokens is kept as it is
    # vLLM's neutral values (its SamplingParams defaults): nothing cut, nothing penalised
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0

    def sampling(self) -> dict[str, Any]:
        """OpenAI-style sampling arguments (max_tokens, temperature, top_p, seed when set)."""
        out: dict[str, Any] = {"max_tokens": self.max_tokens, "temperature": self.temperature,
                               "top_p": self.top_p}
        if self.seed is not None:
            out["seed"] = self.seed
        return out

    def vllm_sampling(self) -> dict[str, Any]:
        """Every sampling field of vLLM's SamplingParams that a request sets, each given explicitly: the
        in-process engine builds its SamplingParams from these, and the served path sends the same
        fields, so that a server's defaults from the model's generation config (Qwen3: top_k=20) never
        apply to one path only."""
        return {**self.sampling(), "top_k": self.top_k, "min_p": self.min_p,
                "repetition_penalty": self.repetition_penalty, "presence_penalty": self.presence_penalty,
                "frequency_penalty": self.frequency_penalty}


@dataclass
class Usage:
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    completion_tokens: int = 0

    def __iadd__(self, other: Usage) -> Usage:
        self.prompt_tokens += other.prompt_tokens
        self.cached_prompt_tokens += other.cached_prompt_tokens
        self.completion_tokens += other.completion_tokens
        return self


@dataclass
class ChatResponse:
    text: str
    usage: Usage = field(default_factory=Usage)
    finish_reason: str = "stop"
    model: str = ""


class TransientModelError(Exception):
    """A failure worth retrying with backoff (timeout, connection reset, 5xx, overload)."""


class UnreachableModelError(TransientModelError):
    """The model's server could not be reached (connection refused, host unknown): worth retrying, and
    when every retry fails the model is unavailable (`ModelUnavailableError`), not merely busy."""


class RetryableModelError(ModelError, TransientModelError):
    """A request the engine failed and marks worth retrying: vLLM's finish_reason "error" (a
    request-level internal failure such as a KV-cache load, which its server answers with HTTP 500)."""


class InvalidOutputError(Exception):
    """The model answered, but not with what was asked (truncated, invalid JSON)."""


def is_transient(exc: BaseException) -> bool:
    """Whether a failed model call is worth retrying after a pause: a TransientModelError (what the HTTP
    backends make of timeouts, refused connections and HTTP 429/5xx), or a timeout or connection failure."""
    return isinstance(exc, (TransientModelError, TimeoutError, ConnectionError))


def backoff_delay(backoff_s: float, retry: int) -> float:
    """Seconds to wait before retry number `retry` (0 first): exponential backoff from `backoff_s`."""
    return backoff_s * 2.0 ** retry


def describe_model(model: object) -> str:
    """A model as messages name it: its name and its backend (the innermost of wrappers that keep the
    model they wrap as `inner`), e.g. `'all-MiniLM-L6-v2' (OpenAIEmbedder)`."""
    name = getattr(model, "name", None)
    for _ in range(8):
        inner = getattr(model, "inner", None)
        if inner is None:
            break
        model = inner
    backend = type(model).__name__
    return f"{shown(name)} ({backend})" if isinstance(name, str) else backend


def generate_each(
    requests: Sequence[ChatRequest],
    complete: Callable[[ChatRequest], ChatResponse],
    error: Callable[[Exception], Exception] = lambda exc: exc,
) -> list[ChatResponse | Exception]:
    """One result per request, in order, for a backend that completes one request at a time: the
    checked response, or what `error` makes of the exception `complete` raised."""
    results: list[ChatResponse | Exception] = []
    for request in requests:
        try:
            results.append(check_response(request, complete(request)))
        except Exception as exc:  # one result per request
            results.append(error(exc))
    return results


SUCCESS_FINISHES = ("stop", "length")  # "length" is a success only where the request allows truncation
RETRYABLE_FINISHES = ("error",)


def finish_failure(reason: str, text: str) -> ModelError:
    """The error of a request finished with `reason` (not a success): worth retrying for vLLM's "error",
    final for "abort" and the rest."""
    return RetryableModelError(text) if reason in RETRYABLE_FINISHES else ModelError(text)


def check_response(request: ChatRequest,
                   response: ChatResponse) -> ChatResponse | InvalidOutputError | ModelError:
    """The response; a ModelError if the engine did not finish it by itself (finish_reason "error",
    which is worth retrying, "abort", or any other than "stop" and "length"); an InvalidOutputError if
    it was truncated (unless the request allows it) or is not the JSON asked for."""
    reason = response.finish_reason
    if reason not in SUCCESS_FINISHES:
        return finish_failure(reason, f"{request.stage}: {response.model or 'the model'} finished the "
                                      f"request with finish_reason={reason!r}, not an answer")
    if response.finish_reason == "length" and not request.allow_truncation:
        return InvalidOutputError(
            f"{request.stage}: output truncated at max_tokens={request.max_tokens} "
            f"({response.usage.completion_tokens} tokens)"
        )
    if request.json_schema is not None:
        try:
            value = json.loads(response.text, strict=False)
        except (ValueError, RecursionError) as exc:
            return InvalidOutputError(f"{request.stage}: output is not valid JSON: {exc}")
        problem = shape_problem(value, request.json_schema)
        if problem is not None:
            return InvalidOutputError(f"{request.stage}: output JSON has the wrong shape: {problem}")
    return response


_JSON_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
}


def shape_problem(value: Any, schema: dict[str, Any], path: str = "$") -> str | None:
    """Where `value` departs from the types and required keys of a response schema, or None. Lengths
    and enums are left to each prompt's reader, which clips and normalises them."""
    kind = schema.get("type")
    check = _JSON_TYPES.get(kind) if isinstance(kind, str) else None
    if check is not None and not check(value):
        return f"{path} is not a{'n' if kind in ('object', 'array', 'integer') else ''} {kind}"
    if isinstance(value, dict):
        for key in schema.get("required", ()):
            if key not in value:
                return f"{path}.{key} is missing"
        for key, sub in (schema.get("properties") or {}).items():
            if key in value and (problem := shape_problem(value[key], sub, f"{path}.{key}")) is not None:
                return problem
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            if (problem := shape_problem(item, schema["items"], f"{path}[{index}]")) is not None:
                return problem
    return None


@runtime_checkable
class ChatModel(Protocol):
    """A chat model. `generate` takes independent requests and returns one result per request,
    in order: a ChatResponse, or the exception that request raised. Backends that batch natively
    (in-process vLLM) set `batched = True` and receive a whole wave at once; others receive one
    request per call, from up to `max_concurrency` threads at once."""

    name: str
    batched: bool
    max_concurrency: int

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResponse | Exception]: ...

    def close(self) -> None: ...


EmbedKind = Literal["query", "passage"]


@runtime_checkable
class Embedder(Protocol):
    """Maps texts to L2-normalised float32 vectors of `dim` dimensions."""

    name: str
    dim: int

    def embed(self, texts: Sequence[str], kind: EmbedKind = "passage") -> np.ndarray: ...

    def close(self) -> None: ...


def embedder_settings(embedder: Embedder) -> dict[str, Any]:
    """What determines an embedder's vectors, as resolved at run time (precision, truncation...):
    its own `settings()` where it has one, else its name and width."""
    settings = getattr(embedder, "settings", None)
    return dict(settings()) if callable(settings) else {"model": embedder.name, "dim": embedder.dim}


def normalize_rows(vectors: np.ndarray) -> np.ndarray:
    """L2-normalise rows in float32; zero rows stay zero."""
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim == 1:
        vectors = vectors[None, :]
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return vectors / norms
