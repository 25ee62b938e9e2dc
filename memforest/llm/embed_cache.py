"""A content-addressed on-disk cache of embedding vectors, shared by threads and processes.

A row is keyed by sha256 of (the embedder's vector-determining settings, the kind, the text): a vector
is reused only for the same text embedded as the same kind by the same model with the same settings.
One SQLite file in WAL mode, created atomically (`memforest.sqlite_file`); each batch of new rows is
one transaction, so concurrent writers (parallel runs on one machine) never see a partial row. Hits
return the float32 vector first computed, bit for bit.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from memforest.errors import ConfigError
from memforest.llm.base import Embedder, EmbedKind, embedder_settings
from memforest.sqlite_file import create_atomically

FILE_NAME = "vectors.sqlite"
_SCHEMA = "CREATE TABLE vectors (key BLOB PRIMARY KEY, vec BLOB NOT NULL) WITHOUT ROWID"
_QUERY_ROWS = 500  # keys per SELECT ... IN (...)
# Settings that change speed, never the vectors: not part of the key.
_SPEED_ONLY = ("threads", "batch_size", "native_bf16", "dtype_requested")


class CachedEmbedder:
    """Wraps any Embedder; texts seen before (by any process sharing `directory`) are not re-encoded."""

    def __init__(self, inner: Embedder, directory: str | Path) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self._settings = embedder_settings(inner)
        salt = {k: v for k, v in self._settings.items() if k not in _SPEED_ONLY}
        self._salt = json.dumps(salt, sort_keys=True, default=str).encode()
        self.path = Path(directory) / FILE_NAME
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # created whole, already in WAL mode: opening it takes no exclusive lock
            if not self.path.exists():
                create_atomically(self.path, lambda con: con.execute(_SCHEMA))
            self._db = sqlite3.connect(self.path, timeout=120.0, check_same_thread=False,
                                       isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("SELECT 1 FROM vectors LIMIT 1").fetchall()  # a file of another kind fails here
        except (OSError, sqlite3.Error) as exc:
            raise ConfigError(f"embedding cache {self.path}: {exc}") from exc
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def settings(self) -> dict[str, Any]:
        return {**self._settings, "cache": str(self.path)}

    def counts(self) -> dict[str, int]:
        return {"cache_hits": self.hits, "cache_misses": self.misses}

    def embed(self, texts: Sequence[str], kind: EmbedKind = "passage") -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        keys = [self._key(kind, t) for t in texts]
        with self._lock:
            found = self._lookup(set(keys))
            todo = {k: t for k, t in zip(keys, texts) if k not in found}
            if todo:
                fresh = np.asarray(self.inner.embed(list(todo.values()), kind), dtype=np.float32)
                rows = list(zip(todo, fresh))
                self._store(rows)
                found.update(rows)
            self.hits += len(texts) - len(todo)
            self.misses += len(todo)
        return np.stack([found[k] for k in keys]).astype(np.float32, copy=False)

    def close(self) -> None:
        with self._lock:
            self._db.close()
        self.inner.close()

    def _key(self, kind: str, text: str) -> bytes:
        h = hashlib.sha256(self._salt)
        h.update(b"\x00" + kind.encode() + b"\x00")
        h.update(text.encode("utf-8", "surrogatepass"))
        return h.digest()

    def _lookup(self, keys: set[bytes]) -> dict[bytes, np.ndarray]:
        out: dict[bytes, np.ndarray] = {}
        ordered = sorted(keys)
        for i in range(0, len(ordered), _QUERY_ROWS):
            chunk = ordered[i : i + _QUERY_ROWS]
            marks = ",".join("?" * len(chunk))
            for key, blob in self._db.execute(f"SELECT key, vec FROM vectors WHERE key IN ({marks})", chunk):
                vec = np.frombuffer(blob, dtype=np.float32)
                if vec.shape == (self.dim,):
                    out[bytes(key)] = vec
        return out

    def _store(self, rows: list[tuple[bytes, np.ndarray]]) -> None:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.executemany("INSERT OR IGNORE INTO vectors (key, vec) VALUES (?, ?)",
                                 [(k, np.ascontiguousarray(v, dtype=np.float32).tobytes()) for k, v in rows])
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
