"""Runs independent model requests as waves of at most P requests, with retries and a call log.

A wave is a set of requests dispatched together; the next wave starts when the slowest request of
the previous one has finished. Requests that depend on each other go in separate `run` calls,
labelled with their dependency `level`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from memforest.errors import ModelBusyError, ModelError, ModelUnavailableError, error_line
from memforest.llm.base import (
    ChatModel,
    ChatRequest,
    ChatResponse,
    InvalidOutputError,
    UnreachableModelError,
    Usage,
    backoff_delay,
    check_response,
    describe_model,
    is_transient,
)
from memforest.llm.calllog import CallLog, CallRecord


class Scheduler:
    def __init__(
        self,
        model: ChatModel,
        concurrency: int | None = None,
        log: CallLog | None = None,
        max_retries: int = 3,
        json_retries: int = 2,
        backoff_s: float = 0.5,
    ) -> None:
        self.model = model
        self.concurrency = max(1, concurrency or model.max_concurrency)
        self.log = log if log is not None else CallLog()
        self.max_retries = max_retries
        self.json_retries = json_retries
        self.backoff_s = backoff_s
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="memforest-llm")
        self.busy_seconds = 0.0  # wall time spent inside `run`, summed over calls

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def run(
        self, requests: Sequence[ChatRequest], level: int = 0, tags: dict[str, Any] | None = None
    ) -> list[ChatResponse | ModelError]:
        """Run independent requests; one result per request, in order. Failures are returned, not raised."""
        started = time.perf_counter()
        try:
            return self._run_waves(requests, level, tags)
        finally:
            with self._lock:
                self.busy_seconds += time.perf_counter() - started

    def _run_waves(
        self, requests: Sequence[ChatRequest], level: int, tags: dict[str, Any] | None
    ) -> list[ChatResponse | ModelError]:
        results: list[ChatResponse | ModelError] = []
        for start in range(0, len(requests), self.concurrency):
            wave = requests[start : start + self.concurrency]
            with self._lock:
                wave_id = self.log.next_wave()
            if self.model.batched:
                results.extend(self._run_batched(wave, wave_id, level, tags or {}))
            else:
                futures = [self._pool.submit(self._run_one, r, wave_id, level, tags or {}) for r in wave]
                results.extend(f.result() for f in futures)
        return results

    def run_strict(
        self, requests: Sequence[ChatRequest], level: int = 0, tags: dict[str, Any] | None = None
    ) -> list[ChatResponse]:
        """Like `run`, but raises the first failure as a ModelError."""
        out = self.run(requests, level, tags)
        for r in out:
            if isinstance(r, ModelError):
                raise r
        return out  # type: ignore[return-value]

    def _run_one(
        self, request: ChatRequest, wave: int, level: int, tags: dict[str, Any]
    ) -> ChatResponse | ModelError:
        start = time.time()
        usage = Usage()
        transient = invalid = 0
        attempt = request
        while True:
            result = _generate(self.model, [attempt])[0]
            if isinstance(result, ChatResponse):
                usage += result.usage
                result = check_response(request, result)
            kind = _failure_kind(result)
            if kind is None:
                assert isinstance(result, ChatResponse)
                self._record(request, wave, level, tags, start, usage, transient + invalid, None, result)
                return result
            if kind == "transient" and transient < self.max_retries:
                time.sleep(backoff_delay(self.backoff_s, transient))
                transient += 1
                continue
            if kind == "invalid" and invalid < self.json_retries:
                invalid += 1
                attempt = resample(request, invalid)
                continue
            error = _error_text(result)
            failure = self._failure(request, transient + invalid, error, result)
            self._record(request, wave, level, tags, start, usage, transient + invalid, error, None,
                         error_kind(failure))
            return failure

    def _run_batched(
        self, wave: Sequence[ChatRequest], wave_id: int, level: int, tags: dict[str, Any]
    ) -> list[ChatResponse | ModelError]:
        start = time.time()
        pending = list(range(len(wave)))
        results: list[ChatResponse | Exception | None] = [None] * len(wave)
        usages = [Usage() for _ in wave]
        tries = [0] * len(wave)
        sent = list(wave)
        attempt = 0
        while pending and attempt <= max(self.max_retries, self.json_retries):
            outs = _generate(self.model, [sent[i] for i in pending])
            retry = []
            if any(isinstance(out, ModelUnavailableError) for out in outs):
                # the engine is gone: no retry can succeed
                for i, out in zip(pending, outs):
                    results[i] = out
                break
            for i, out in zip(pending, outs):
                if isinstance(out, ChatResponse):
                    usages[i] += out.usage
                    out = check_response(wave[i], out)
                results[i] = out
                kind = _failure_kind(out)
                limit = self.max_retries if kind == "transient" else self.json_retries
                if kind is not None and tries[i] < limit:
                    tries[i] += 1
                    retry.append(i)
                    if kind == "invalid":
                        sent[i] = resample(wave[i], tries[i])
            pending = retry
            attempt += 1
        final: list[ChatResponse | ModelError] = []
        for i, (req, res) in enumerate(zip(wave, results)):
            if isinstance(res, ChatResponse):
                self._record(req, wave_id, level, tags, start, usages[i], tries[i], None, res)
                final.append(res)
            else:
                error = _error_text(res)
                failure = self._failure(req, tries[i], error, res)
                self._record(req, wave_id, level, tags, start, usages[i], tries[i], error, None,
                             error_kind(failure))
                final.append(failure)
        return final

    def _failure(self, request: ChatRequest, retries: int, error: str, cause: object) -> ModelError:
        """One line naming the call, the model and its backend, and the last error (redacted), as a
        ModelUnavailableError when the model is gone (a dead engine, a server unreachable through every
        retry), a ModelBusyError when timeouts or server errors outlasted the retries."""
        text = f"{request.stage} call to {describe_model(self.model)} failed after {retries} retries: {error}"
        if isinstance(cause, (ModelUnavailableError, UnreachableModelError, ConnectionRefusedError)):
            return ModelUnavailableError(text)
        if _failure_kind(cause) == "transient":
            return ModelBusyError(text)
        return ModelError(text)

    def _record(
        self,
        request: ChatRequest,
        wave: int,
        level: int,
        tags: dict[str, Any],
        start: float,
        usage: Usage,
        retries: int,
        error: str | None,
        response: ChatResponse | None,
        kind: str | None = None,
    ) -> None:
        self.log.add(
            CallRecord(
                id=self.log.next_id(),
                stage=request.stage,
                prompt_id=request.prompt_id,
                prompt_version=request.prompt_version,
                wave=wave,
                level=level,
                start=start,
                end=time.time(),
                prompt_tokens=usage.prompt_tokens,
                cached_prompt_tokens=usage.cached_prompt_tokens,
                completion_tokens=usage.completion_tokens,
                retries=retries,
                error=error,
                error_kind=kind,
                finish_reason=response.finish_reason if response else None,
                model=(response.model if response else "") or self.model.name,
                tags=dict(tags),
            )
        )


RETRY_TEMPERATURE = 0.7


def resample(request: ChatRequest, attempt: int) -> ChatRequest:
    """The request for a retry after invalid output: a greedy decode would repeat the same output, so
    retries sample (temperature at least RETRY_TEMPERATURE) with a seed that differs per attempt."""
    return replace(request, temperature=max(request.temperature, RETRY_TEMPERATURE),
                   seed=(request.seed or 0) + attempt)


def _generate(model: ChatModel, requests: Sequence[ChatRequest]) -> list[ChatResponse | Exception]:
    """One result per request whatever the backend does: an exception it raises, or a result list of the
    wrong length, becomes a failure of each request (a model fault, handled like any failed call)."""
    try:
        outs = list(model.generate(requests))
    except Exception as exc:  # the backend itself failed
        return [exc] * len(requests)
    if len(outs) != len(requests):
        fault = RuntimeError(f"{model.name} returned {len(outs)} results for {len(requests)} requests")
        return [fault] * len(requests)
    return [out if isinstance(out, (ChatResponse, Exception)) else
            RuntimeError(f"{model.name} returned {type(out).__name__}, not a response") for out in outs]


def error_kind(failure: ModelError) -> str:
    """How a failed call is recorded (`CallRecord.error_kind`): "unavailable" (the model is gone),
    "busy" (timeouts or server errors through every retry), "failed" (anything else)."""
    if isinstance(failure, ModelUnavailableError):
        return "unavailable"
    return "busy" if isinstance(failure, ModelBusyError) else "failed"


def _failure_kind(result: object) -> str | None:
    if isinstance(result, ChatResponse):
        return None
    if isinstance(result, ModelUnavailableError):
        return "fatal"
    if isinstance(result, BaseException) and is_transient(result):
        return "transient"
    if isinstance(result, InvalidOutputError):
        return "invalid"
    return "fatal"


def _error_text(error: object) -> str:
    """A failure as the call log and the ModelError show it."""
    return error_line(error, _MAX_ERROR_CHARS)


_MAX_ERROR_CHARS = 1000


def parse_json(response: ChatResponse) -> Any:
    """The JSON value of a response the scheduler has already checked."""
    return json.loads(response.text, strict=False)
