"""Asking ahead for the rows a search scores (`memforest.resident.prefetch`): only rows of a map are
asked for, as page-aligned ranges that cover each run, and a probe's scores are what they were."""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np
import pytest
from test_partitions import clustered

from memforest.resident import prefetch
from memforest.resident import vector_search as vs
from memforest.resident.packed_keys import PackedKeys
from memforest.resident.vector_search import probe_scores
from memforest.resident.vector_table import VectorTable


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
    monkeypatch.setattr(prefetch, "_MINCORE", None)  # (no page counts as in memory: all are asked for)
    return calls


def _rows_file(tmp_path: Path) -> tuple[np.ndarray, Path]:
    """64 rows of 8 float32 and a file holding them."""
    rows = np.arange(64 * 8, dtype=np.float32).reshape(64, 8)
    path = tmp_path / "rows"
    path.write_bytes(rows.tobytes())
    return rows, path


def _pages(asked: list[tuple[int, ...]]) -> set[int]:
    """The page numbers the `madvise` calls cover."""
    return {(a + k) // mmap.PAGESIZE for a, n, _ in asked for k in range(0, n, mmap.PAGESIZE)}


def _row_pages(rows: np.ndarray, at: object) -> set[int]:
    """The page numbers rows `at` of `rows` lie in."""
    step = rows.strides[0]
    return {(rows.ctypes.data + int(i) * step + b) // mmap.PAGESIZE
            for i in np.asarray(at) for b in (0, step - 1)}


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
        at = np.array([40, 3, 11, 2, 10, 4, 3])  # any order, repeats
        prefetch.will_need_rows(mapped, at)
        held = _row_pages(mapped, at)
        assert _pages(asked) == held and all(a % mmap.PAGESIZE == 0 for a, _, _ in asked)
        assert len(asked) == len(prefetch.runs_of(np.array(sorted(held))))  # consecutive pages at once
        asked.clear()
        prefetch.will_need_rows(mapped, np.zeros(0, np.int64))
        prefetch.will_need_rows(rows, np.array([1, 2]))  # (private memory: nothing asked)
        assert asked == []
        del mapped


def _mapped_table(buf: mmap.mmap, n: int = 1000) -> tuple[VectorTable, np.ndarray]:
    """A partitioned table of `n` clustered rows whose vectors are read from a map of `buf` (as an
    opened store's tables are), and those vectors."""
    vecs = clustered(n, seed=3)
    table = VectorTable(16, exact_rows=100)
    table.upsert(list(range(n)), vecs)
    held = table._rows.vecs
    buf.write(held.tobytes())
    table._rows.vecs = np.ndarray(held.shape, np.float32, buffer=buf)
    return table, vecs


def test_a_search_of_several_queries_asks_for_every_querys_rows_before_scoring_any(
        tmp_path: Path, asked: list[tuple[int, ...]], monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "rows"
    path.write_bytes(b"\0" * (1 << 20))
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), 0) as buf:
        table, vecs = _mapped_table(buf)
        parts = table.partitions
        assert parts is not None and prefetch.is_mapped(table._rows.vecs)
        queries = vecs[[5, 500, 900]]
        runs = [prefetch.runs_of(np.sort(parts.probe(parts.centroids @ q, 60))) for q in queries]
        asked_when_scored: list[int] = []
        score = vs.probe_scores

        def scored(*args: object) -> np.ndarray:
            asked_when_scored.append(len(asked))
            return score(*args)  # type: ignore[arg-type]
        monkeypatch.setattr(vs, "probe_scores", scored)
        found = table.above(queries, -1.0, 60)
        assert asked_when_scored == [sum(map(len, runs))] * 3  # all asked for, once each, before any
        held = np.array(table._rows.vecs)  # (row numbers, not keys: the rows as laid out)
        for (rows, sims), q in zip(found, queries):
            assert len(rows) >= 60 and np.allclose(sims, held[rows] @ q, atol=1e-6)
        del parts, table


def test_a_tables_rows_are_asked_for_by_key_before_they_are_read_one_by_one(
        tmp_path: Path, asked: list[tuple[int, ...]]) -> None:
    path = tmp_path / "rows"
    path.write_bytes(b"\0" * (1 << 20))
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), 0) as buf:
        table, vecs = _mapped_table(buf)
        mapped = table._rows.vecs
        table.will_need([7, "not held", 3, 7])
        assert _pages(asked) == _row_pages(mapped, [int(table._slot[k]) for k in (3, 7)])
        asked.clear()
        assert np.array_equal(table.vectors([9, 2]), vecs[[9, 2]]) and len(asked) >= 1  # a gather asks too
        private = VectorTable(16)
        private.upsert([1, 2], vecs[:2])
        asked.clear()
        private.will_need([1, 2])
        assert asked == []
        del mapped, table


def test_rows_whose_pages_are_in_memory_are_not_asked_for(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if prefetch._MINCORE is None or prefetch._MADVISE is None:
        pytest.skip("no mincore or madvise here")
    calls: list[tuple[int, ...]] = []
    monkeypatch.setattr(prefetch, "_MADVISE", lambda *args: calls.append(args))
    rows = np.arange(4096 * 8, dtype=np.float32).reshape(4096, 8)  # 32 pages
    path = tmp_path / "rows"
    path.write_bytes(rows.tobytes())
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) as buf:
        mapped = np.ndarray(rows.shape, np.float32, buffer=buf)
        assert float(mapped.sum()) == float(rows.sum())  # every page read: in memory
        prefetch.will_need_rows(mapped, np.array([5, 900, 4000]))
        assert calls == []
        del mapped


def test_a_tables_top_keys_are_decoded_with_their_pages_asked_for(
        tmp_path: Path, asked: list[tuple[int, ...]]) -> None:
    keys = [f"s{i:05d}#{i % 7}" * (1 + i % 3) for i in range(5000)] + [""]
    packed = PackedKeys.pack(keys)
    path = tmp_path / "keys"
    arrays = packed.arrays("docs")
    path.write_bytes(b"".join(a.tobytes() for a in arrays.values()))
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) as buf:
        views, at = {}, 0
        for name, a in arrays.items():
            views[name] = np.ndarray(a.shape, a.dtype, buffer=buf, offset=at)
            at += a.nbytes
        mapped = PackedKeys.of_arrays(views, "docs")
        wanted = np.array([4999, 0, 17, 2500, 5000, 17])
        assert mapped.keys_at(wanted) == [keys[i] for i in wanted.tolist()]
        assert asked and len(asked) <= 2 * 2 * len(wanted)  # the ends' pages, then the bytes'
        asked.clear()
        assert packed.keys_at(wanted) == [keys[i] for i in wanted.tolist()] and asked == []  # (not a map)
        del mapped, views


def test_rows_scattered_over_a_large_map_are_asked_for_without_a_residency_check(
        tmp_path: Path, asked: list[tuple[int, ...]], monkeypatch: pytest.MonkeyPatch) -> None:
    checked: list[tuple[int, ...]] = []

    def mincore(*args: int) -> int:  # (answers that no page is in memory)
        checked.append(args)
        return 0
    monkeypatch.setattr(prefetch, "_MINCORE", mincore)
    path = tmp_path / "rows"
    path.write_bytes(b"\0" * (8 << 20))
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) as buf:
        mapped = np.ndarray((1 << 18, 8), np.float32, buffer=buf)  # 32-byte rows, 2,048 pages
        prefetch.will_need_rows(mapped, np.array([0, (1 << 18) - 1]))  # two pages 2,047 apart
        assert checked == [] and _pages(asked) == _row_pages(mapped, [0, (1 << 18) - 1])
        asked.clear()
        prefetch.will_need_rows(mapped, np.array([0, 200]))  # two neighbouring pages: checked first
        assert len(checked) == 1 and _pages(asked) == _row_pages(mapped, [0, 200])
        del mapped
