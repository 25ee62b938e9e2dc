"""The model endpoints a baseline talks to: a chat server, an embeddings server, and the logging proxy
in front of both, started around a baseline and stopped with it.

`ServingStack` forwards chat to `llm_base_url` when given; else serves an in-process ChatModel
(`chat`: the scripted test model, vLLM) over `/v1/chat/completions`; else starts `llama_cpp.server` on
the packaged (or `gguf_path`) GGUF. Embeddings go to `embed_base_url`, or an in-process Embedder is
served over `/v1/embeddings`. Every request passes through one `LoggingProxy`, whose `base_url` is the
only address the baseline sees.
`ProxiedSystem` wraps a baseline so that its calls are tagged with the phase they belong to, named as
the harness names it in its call log: `build` while memory is written, `retrieve` while it is read."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from baselines.base import EvidenceItem, MemorySystem, Retrieval, Session, render_evidence
from benchmarks.serving.llama_server import LlamaCppServer
from benchmarks.serving.model_server import ModelServer
from benchmarks.serving.proxy import LoggingProxy
from memforest.config import LLMConfig
from memforest.errors import ModelError
from memforest.llm.base import ChatModel, Embedder
from memforest.llm.calllog import CallLog

BUILD_PHASE, RETRIEVE_PHASE = "build", "retrieve"


class ServingStack:
    def __init__(self, call_log: CallLog, system: str, *, llm_model: str, llm_base_url: str | None = None,
                 chat: ChatModel | None = None, gguf_path: str | None = None,
                 n_ctx: int = LLMConfig.context_tokens,
                 threads: int = 1, seed: int = 0, embedder: Embedder | None = None,
                 embed_base_url: str | None = None, max_tokens_cap: int | None = None,
                 log_dir: str | Path | None = None) -> None:
        if llm_base_url is None and chat is None and gguf_path is None:
            from memforest.llm.llamacpp import packaged_gguf_path

            gguf_path = packaged_gguf_path()
        if embed_base_url is None and embedder is None:
            raise ValueError("ServingStack needs an embeddings URL or an Embedder to serve")
        self.call_log, self.system = call_log, system
        self.llm_model, self.llm_base_url, self.chat, self.gguf_path = (llm_model, llm_base_url, chat,
                                                                        gguf_path)
        self.n_ctx, self.threads, self.seed = n_ctx, threads, seed
        self.embedder, self.embed_base_url = embedder, embed_base_url
        self.max_tokens_cap = max_tokens_cap
        self.log_dir = Path(log_dir) if log_dir else None
        self.llama: LlamaCppServer | None = None
        self.model_server: ModelServer | None = None
        self.proxy: LoggingProxy | None = None

    @property
    def running(self) -> bool:
        return self.proxy is not None

    @property
    def base_url(self) -> str:
        assert self.proxy is not None, "start() first"
        return self.proxy.base_url

    def __enter__(self) -> ServingStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> ServingStack:
        if self.running:
            return self
        try:
            chat = self.chat if self.llm_base_url is None else None
            embedder = self.embedder if self.embed_base_url is None else None
            if chat is not None or embedder is not None:
                self.model_server = ModelServer(embedder, chat, model_name=self.llm_model).start()
            llm_url = self.llm_base_url
            if llm_url is None and chat is not None and self.model_server is not None:
                llm_url = self.model_server.base_url
            if llm_url is None:
                log = self.log_dir / "llama_server.log" if self.log_dir else None
                self.llama = LlamaCppServer(str(self.gguf_path), self.llm_model, n_ctx=self.n_ctx,
                                            threads=self.threads, seed=self.seed, log_path=log).start()
                llm_url = self.llama.base_url
            embed_url = self.embed_base_url or (self.model_server.base_url if self.model_server else None)
            assert embed_url is not None
            self.proxy = LoggingProxy(llm_url, self.call_log, self.system, embeddings_upstream=embed_url,
                                      max_tokens_cap=self.max_tokens_cap).start()
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        for part in (self.proxy, self.model_server, self.llama):
            if part is not None:
                part.close()
        self.proxy = self.model_server = self.llama = None


class ProxiedSystem:
    """A baseline built on a ServingStack. The stack starts on `reset` (so its start-up is not build
    time) and stops on `close`; the baseline is rebuilt by `factory(base_url)` each time, because the
    harness closes a system between instances. Failures of the baseline's library are re-raised as
    ModelError, which the harness records as a failed build or retrieval."""

    def __init__(self, name: str, factory: Callable[[str], MemorySystem], stack: ServingStack,
                 runtime_settings: dict[str, Any] | None = None) -> None:
        self.name = name
        self.factory, self.stack = factory, stack
        self.runtime_settings = dict(runtime_settings or {})  # what the baseline's environment allows
        self.inner: MemorySystem | None = None

    def reset(self, instance_id: str, workdir: Path) -> None:
        if self.inner is None:
            self.stack.start()
            self.inner = self.factory(self.stack.base_url)
        self._phase("reset")
        self.inner.reset(instance_id, workdir)

    def ingest(self, sessions: Sequence[Session]) -> dict[str, Any]:
        assert self.inner is not None, "reset() first"
        self._phase(BUILD_PHASE)
        return self._guard(lambda: self.inner.ingest(sessions))  # type: ignore[union-attr]

    def retrieve(self, question: str, when: datetime | None) -> Retrieval:
        assert self.inner is not None, "reset() first"
        self._phase(RETRIEVE_PHASE)
        return self._guard(lambda: self.inner.retrieve(question, when))  # type: ignore[union-attr]

    def render(self, items: Sequence[EvidenceItem]) -> str:
        """The baseline's own layout of `items` (`render_evidence` when it has none)."""
        render = getattr(self.inner, "render", None)
        return str(render(items)) if callable(render) else render_evidence(items)

    def close(self) -> None:
        inner, self.inner = self.inner, None
        try:
            if inner is not None:
                inner.close()
        finally:
            self.stack.close()

    def _phase(self, phase: str) -> None:
        if self.stack.proxy is not None:
            self.stack.proxy.phase = phase

    def _guard(self, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except ModelError:
            raise
        except Exception as exc:
            raise ModelError(f"{self.name}: {type(exc).__name__}: {exc}") from exc
