"""Asking ahead for the rows a search scores (`memforest.resident.prefetch`): only rows of a map are
asked for, as page-aligned ranges that cover each run, and a probe's scores are what they were."""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np
import pytest

from memforest.resident import prefetch
from memforest.resident.vector_search import probe_scores


def test_each_run_is_asked_for_as_one_page_aligned_range_covering_it() -> None:
    ranges = prefetch.page_ranges(10_000, 1536, [(0, 1), (5, 3), (100, 40)], page=4096)
    for (start, length), (first, rows) in zip(ranges, [(0, 1), (5, 3), (100, 40)]):
        lo, hi = 10_000 + first * 1536, 10_000 + (first + rows) * 1536
        assert start % 4096 == 0 and start <= lo < start + 4096 and start + length == hi


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, ...]]:
    """The (address, length, advice) of every `madvise` the module makes, none of them made."""
    calls: list[tuple[int, ...]] = []
    monkeypatch.setattr(prefetch, "_MADVISE", lambda *args: calls.append(args))
    return calls


def _rows_file(tmp_path: Path) -> tuple[np.ndarray, Path]:
    """64 rows of 8 float32 and a file holding them."""
    rows = np.arange(64 * 8, dtype=np.float32).reshape(64, 8)
    path = tmp_path / "rows"
    path.write_bytes(rows.tobytes())
    return rows, path


def test_only_the_rows_of_a_map_are_asked_for(tmp_path: Path, asked: list[tuple[int, ...]]) -> None:
    rows, path = _rows_file(tmp_path)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) as buf:
        mapped = np.ndarray(rows.shape, np.float32, buffer=buf)
        assert prefetch.is_mapped(mapped) and prefetch.is_mapped(mapped[3:9])
        assert not prefetch.is_mapped(rows) and not prefetch.is_mapped(rows[3:9])
        prefetch.will_need(rows, [(0, 4)])
        assert asked == []
        q = np.ones(8, np.float32)
        probed = np.array([2, 3, 4, 10, 11, 40])
        assert np.array_equal(probe_scores(mapped, probed, q), rows[probed] @ q)
        assert len(asked) == 3 and {a for _, _, a in asked} == {prefetch.MADV_WILLNEED}  # one per run
        del mapped


def test_scattered_rows_are_asked_for_as_their_runs(tmp_path: Path, asked: list[tuple[int, ...]]) -> None:
    rows, path = _rows_file(tmp_path)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) as buf:
        mapped = np.ndarray(rows.shape, np.float32, buffer=buf)
        prefetch.will_need_rows(mapped, np.array([40, 3, 11, 2, 10, 4, 3]))  # any order, repeats
        expected = prefetch.page_ranges(mapped.ctypes.data, mapped.strides[0], [(2, 3), (10, 2), (40, 1)])
        assert [(a, n) for a, n, _ in asked] == expected
        asked.clear()
        prefetch.will_need_rows(mapped, np.zeros(0, np.int64))
        prefetch.will_need_rows(rows, np.array([1, 2]))  # (private memory: nothing asked)
        assert asked == []
        del mapped
