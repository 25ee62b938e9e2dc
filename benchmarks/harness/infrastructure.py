"""Failures of the infrastructure as against failures of the system under test.

A model engine that died or a server that no longer answers is no answer of the system: the run stops
(`ModelUnavailableError`), the question it was asking gets no record, and the next invocation of the same
command asks it again. A request that failed with timeouts or server errors through every retry (an
overloaded server, `ModelBusyError`) is recorded with `error_kind: infrastructure`, and a resumed run
redoes it without `retry_errors`. Every other failure is the system's (`error_kind: system`): a resumed
run keeps it unless `retry_errors=true`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memforest.errors import ModelBusyError, ModelUnavailableError, caused_by, unavailable_cause
from memforest.llm.calllog import CallRecord

INFRASTRUCTURE = "infrastructure"
SYSTEM = "system"


def failure_kind(exc: BaseException | None) -> str:
    """`infrastructure` for a failure that a busy model caused (through its cause chain), else `system`."""
    return INFRASTRUCTURE if caused_by(exc, (ModelBusyError, ModelUnavailableError)) else SYSTEM


def model_lost(calls: Sequence[CallRecord]) -> ModelUnavailableError | None:
    """The model gone, as `calls` show it: a call the scheduler recorded as unavailable (a dead engine,
    a server unreachable through every retry), or, for chat or embedding requests that went through
    the logging proxy, a last one that could not reach its upstream (a system that retries by itself
    and then gives up quietly would otherwise answer from whatever it kept)."""
    last: dict[str, CallRecord] = {}
    for record in calls:
        if record.error_kind == "unavailable":
            return ModelUnavailableError(f"{record.stage} call: {record.error}")
        if "endpoint" in record.tags:
            last[record.stage] = record
    for record in last.values():
        if record.error_kind == "unreachable":
            return ModelUnavailableError(f"the {record.stage} server could not be reached: {record.error}")
    return None


def stop_cause(exc: BaseException | None, calls: Sequence[CallRecord]) -> ModelUnavailableError | None:
    """Why the run must stop after an operation that raised `exc` (None: it did not) and made `calls`."""
    return unavailable_cause(exc) or model_lost(calls)


class ServerProbe:
    """Asks the servers of the served models (backend `openai`) whether they are there, before each build
    and question: any HTTP answer to `GET /models` is a yes (vLLM, SGLang and llama.cpp's server answer
    it); a refused connection or an unknown host is a ModelUnavailableError, so that a sweep whose server
    job ended stops at once instead of recording failed questions."""

    def __init__(self, urls: Sequence[str], key_envs: Sequence[str], timeout_s: float = 10.0) -> None:
        from memforest.llm.openai_compat import make_client

        self.urls = list(urls)
        self._clients = [make_client(url, "", env, timeout_s)
                         for url, env in zip(urls, key_envs, strict=True)]

    @classmethod
    def of(cls, *nodes: Any) -> ServerProbe | None:
        """A probe of the served `llm` and `embedder` nodes among `nodes` (None entries are skipped);
        None when none is served."""
        served = [n for n in nodes if n is not None and n.backend == "openai" and n.base_url]
        if not served:
            return None
        return cls([str(n.base_url) for n in served], [str(n.api_key_env) for n in served])

    def __call__(self) -> None:
        import httpx

        for url, client in zip(self.urls, self._clients, strict=True):
            try:
                client.get("/models")
            except httpx.ConnectError as exc:
                raise ModelUnavailableError(f"the model server at {url} does not answer: {exc}") from exc
            except httpx.HTTPError:
                continue  # slow or odd, but there: the requests themselves will tell

    def close(self) -> None:
        for client in self._clients:
            client.close()
