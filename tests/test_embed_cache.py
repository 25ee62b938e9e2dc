"""The on-disk vector cache and the embedder's resolved precision."""

from __future__ import annotations

import multiprocessing
import threading
from pathlib import Path

import numpy as np
import pytest

from memforest.config import EmbedderConfig
from memforest.errors import ConfigError
from memforest.llm import embedders
from memforest.llm.base import embedder_settings
from memforest.llm.embed_cache import FILE_NAME, CachedEmbedder
from memforest.llm.factory import build_embedder
from memforest.llm.testing import HashEmbedder

TEXTS = ["my cat is called Miso", "I moved to Denver in May", "my cat is called Miso"]


def test_hits_return_the_vectors_first_computed(tmp_path: Path) -> None:
    plain = HashEmbedder(64)
    cached = CachedEmbedder(HashEmbedder(64), tmp_path)
    first = cached.embed(TEXTS)
    assert np.array_equal(first, plain.embed(TEXTS)) and first.dtype == np.float32
    assert cached.counts() == {"cache_hits": 1, "cache_misses": 2}  # the repeated text is encoded once
    again = CachedEmbedder(HashEmbedder(64), tmp_path)  # another process opening the same directory
    assert np.array_equal(again.embed(TEXTS[::-1]), first[::-1])
    assert again.counts() == {"cache_hits": 3, "cache_misses": 0}
    assert cached.embed([]).shape == (0, 64)


def test_the_key_holds_the_kind_and_the_embedders_settings(tmp_path: Path) -> None:
    CachedEmbedder(HashEmbedder(64), tmp_path).embed(TEXTS[:1])
    query = CachedEmbedder(HashEmbedder(64), tmp_path)
    query.embed(TEXTS[:1], "query")
    other = CachedEmbedder(HashEmbedder(32, name="hash32"), tmp_path)
    assert other.embed(TEXTS[:1]).shape == (1, 32)
    assert query.counts()["cache_misses"] == 1 and other.counts()["cache_misses"] == 1


def test_concurrent_writers_share_one_cache(tmp_path: Path) -> None:
    texts = [f"sentence number {i}" for i in range(200)]
    results: list[np.ndarray] = []

    def work() -> None:
        results.append(CachedEmbedder(HashEmbedder(64), tmp_path).embed(texts))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4 and all(np.array_equal(r, results[0]) for r in results)
    assert CachedEmbedder(HashEmbedder(64), tmp_path).embed(texts).shape == (200, 64)


def _open_and_embed(directory: str) -> str | None:
    try:
        CachedEmbedder(HashEmbedder(64), directory).embed([f"sentence number {i}" for i in range(50)])
    except ConfigError as exc:
        return str(exc)
    return None


def test_processes_creating_one_cache_at_once_all_open_it(tmp_path: Path) -> None:
    # the file is created whole, in WAL mode, so no opener has to switch its journal mode under the others
    with multiprocessing.get_context("fork").Pool(6) as pool:
        for trial in range(25):
            errors = [e for e in pool.map(_open_and_embed, [str(tmp_path / str(trial))] * 6) if e]
            assert errors == []
    assert (sorted(p.name for p in (tmp_path / "0").iterdir() if not p.name.endswith(("-wal", "-shm")))
            == [FILE_NAME])


def test_the_factory_wraps_when_a_cache_directory_is_set(tmp_path: Path) -> None:
    embedder = build_embedder(EmbedderConfig(backend="hash", dim=64, cache_dir=str(tmp_path / "c")))
    assert isinstance(embedder, CachedEmbedder)
    assert (embedder_settings(embedder)
            == {"model": "hash", "dim": 64, "cache": str(tmp_path / "c" / "vectors.sqlite")})
    assert not isinstance(build_embedder(EmbedderConfig(backend="hash", dim=64)), CachedEmbedder)


def test_auto_precision_is_bfloat16_only_with_native_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedders, "native_bf16", lambda: False)
    assert embedders.resolve_dtype("auto", "cpu") == "float32"
    monkeypatch.setattr(embedders, "native_bf16", lambda: True)
    assert embedders.resolve_dtype("auto", "cpu") == "bfloat16"
    assert embedders.resolve_dtype("auto", "cuda") == "float32"
    assert embedders.resolve_dtype("float32", "cpu") == "float32"
    with pytest.raises(ConfigError, match="use auto, float32 or bfloat16"):
        embedders.resolve_dtype("int4", "cpu")


def test_native_bf16_reads_the_cpu_flags() -> None:
    flags = Path("/proc/cpuinfo").read_text().split() if Path("/proc/cpuinfo").exists() else []
    assert embedders.native_bf16() == bool({"amx_bf16", "avx512_bf16"} & set(flags))
