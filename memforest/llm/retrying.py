"""Embedding calls under the retry policy of chat calls, their failures as ModelErrors.

Every embedder MemForest uses, injected or built from the config, is wrapped here: a transient failure
(`is_transient`: a timeout, a refused connection, HTTP 429 or 5xx) is retried with exponential backoff,
as the scheduler retries chat calls; any failure that remains, and vectors of the wrong shape or with
non-finite values, raise one ModelError naming the embedder, its backend and the original error, with
credentials redacted. Nothing the embedder returned wrongly reaches a store."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from memforest.config import EmbedderConfig
from memforest.errors import MemForestError, ModelError, ModelUnavailableError, error_line
from memforest.llm.base import (
    Embedder,
    EmbedKind,
    UnreachableModelError,
    backoff_delay,
    describe_model,
    embedder_settings,
    is_transient,
)

_MAX_ERROR_CHARS = 500


class RetryingEmbedder:
    """`inner` behind retries (`max_retries`, `backoff_s`), failing with a ModelError."""

    def __init__(self, inner: Embedder, max_retries: int = 3, backoff_s: float = 0.5) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.max_retries = max_retries
        self.backoff_s = backoff_s

    @classmethod
    def around(cls, embedder: Embedder, cfg: EmbedderConfig) -> RetryingEmbedder:
        """`embedder` with the retry policy of `cfg` (itself when already wrapped)."""
        if isinstance(embedder, RetryingEmbedder):
            return embedder
        return cls(embedder, cfg.max_retries, cfg.backoff_s)

    def settings(self) -> dict[str, Any]:
        return embedder_settings(self.inner)

    def embed(self, texts: Sequence[str], kind: EmbedKind = "passage") -> np.ndarray:
        retries = 0
        while True:
            try:
                vectors = self.inner.embed(texts, kind)
                break
            except Exception as e:
                if is_transient(e) and retries < self.max_retries:
                    time.sleep(backoff_delay(self.backoff_s, retries))
                    retries += 1
                    continue
                raise self._failure(e, retries) from e
        return self._checked(vectors, len(texts))

    def close(self) -> None:
        self.inner.close()

    def _failure(self, exc: Exception, retries: int) -> ModelError:
        text = error_line(str(exc) if isinstance(exc, MemForestError) else exc, _MAX_ERROR_CHARS)
        tries = f" after {retries} retries" if retries else ""
        gone = isinstance(exc, (ModelUnavailableError, UnreachableModelError, ConnectionRefusedError))
        return (ModelUnavailableError if gone else ModelError)(
            f"embedder {describe_model(self)} failed{tries}: {text}")

    def _checked(self, vectors: Any, rows: int) -> np.ndarray:
        """`vectors` as float32 rows of `dim` values, or a ModelError saying what came back instead."""
        try:
            out = np.asarray(vectors, dtype=np.float32)
        except (TypeError, ValueError) as e:
            raise self._failure(ValueError(f"returned {type(vectors).__name__}, not vectors ({e})"), 0) from e
        if out.shape != (rows, self.dim):
            raise self._failure(ValueError(f"returned vectors of shape {out.shape} for {rows} texts, "
                                           f"expected ({rows}, {self.dim})"), 0)
        if not np.isfinite(out).all():
            raise self._failure(ValueError("returned vectors holding NaN or infinity"), 0)
        return out
