"""Asking ahead for the rows a search is about to score, where they are pages of a mapped cache file.

The partitions cache is mapped for random access (`cache_file.read_arrays(..., random_access=True)`),
so a fault on one vector row reads its page, not the read-ahead window around it (8 MiB on some
disks); a probe first asks for each of its runs of consecutive rows as one range (`will_need`), so
they are read in a few large requests at once rather than a page a fault. Where a map is not in the
page cache (a store larger than memory), at 10^4 sessions with every page dropped before each round
an ingest read 15 MiB instead of 203 MiB and took about half the time (docs/performance.md). Nothing
is asked of rows in private memory, nor where there is no `madvise`.

Scattered rows (`will_need_rows`) are asked for only where their pages are not in memory already,
where the pages lie close enough together for one `mincore` over their span to cost less than an
`madvise` of each (a query's top documents' keys); rows scattered over a large map are asked for
as they are."""

from __future__ import annotations

import ctypes
import mmap
from collections.abc import Iterable
from typing import Any

import numpy as np

MADV_WILLNEED = 3  # (Linux and the BSDs)


# A residency check covers the span of the pages asked about (at 10^5 sessions, profiled, about 14 ms
# a check over the facts' 1.7 GB map), and an `madvise` of a page already in memory costs about
# 1.6 µs: the check is made only where the span is at most this many pages per page asked about.
SPAN_PER_PAGE = 64


def _libc(name: str, *argtypes: Any) -> Any:
    """The C library's function `name`, typed; None where there is none."""
    try:
        fn = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError, TypeError):
        return None
    fn.argtypes = list(argtypes)
    fn.restype = ctypes.c_int
    return fn


def libc_madvise() -> Any:
    """The C library's `madvise(address, length, advice)`, typed; None where there is none."""
    return _libc("madvise", ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)


_MADVISE = libc_madvise()
# `mincore(address, length, vector)`: a byte a page, bit 0 set when the page is in memory
_MINCORE = _libc("mincore", ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)


def is_mapped(array: np.ndarray) -> bool:
    """Whether `array` is a view of a memory map (its pages may have to be read from a file)."""
    base = array.base
    while isinstance(base, np.ndarray):
        base = base.base
    return isinstance(base, mmap.mmap)


def page_ranges(address: int, row_bytes: int, runs: Iterable[tuple[int, int]],
                page: int = mmap.PAGESIZE) -> list[tuple[int, int]]:
    """(start, length) of the page-aligned range holding each run (first row, rows) of rows of
    `row_bytes` bytes from `address`."""
    out = []
    for first, rows in runs:
        lo = address + first * row_bytes
        start = lo - lo % page
        out.append((start, lo + rows * row_bytes - start))
    return out


def will_need(rows: np.ndarray, runs: Iterable[tuple[int, int]]) -> None:
    """Ask the kernel to read the pages of each run (first row, rows) of `rows` (a 2-d array) now,
    all at once, when `rows` is a view of a map; nothing otherwise."""
    if _MADVISE is None or not is_mapped(rows):
        return
    for start, length in page_ranges(rows.ctypes.data, rows.strides[0], runs):
        _MADVISE(start, length, MADV_WILLNEED)  # (a refusal leaves the faults to read them)


def will_need_rows(rows: np.ndarray, at: np.ndarray) -> None:
    """Ask for the pages of the rows `at` of `rows` (row numbers, any order, repeats allowed) that are
    not in memory, consecutive pages as one range: what a gather of scattered rows of a map reads,
    asked for before it faults them in one at a time. Nothing for private memory."""
    if _MADVISE is None or not len(at) or not is_mapped(rows):
        return
    page, step = mmap.PAGESIZE, rows.strides[0]
    start = rows.ctypes.data + np.unique(np.asarray(at, np.int64)) * step
    lo, hi = start // page, (start + step - 1) // page  # the first and last page of each row
    pages = np.unique(np.concatenate([np.minimum(lo + j, hi) for j in range(int((hi - lo).max()) + 1)]))
    pages = pages[~_resident(pages)]
    for first, n in runs_of(pages):
        _MADVISE(first * page, n * page, MADV_WILLNEED)  # (a refusal leaves the faults to read them)


def _resident(pages: np.ndarray) -> np.ndarray:
    """Whether each of `pages` (page numbers of mapped memory, ascending) is in memory, found by one
    `mincore` over their span; all False where that cannot be asked or would cost more than asking
    for them (`SPAN_PER_PAGE`), so all are asked for."""
    span = int(pages[-1] - pages[0]) + 1
    if _MINCORE is None or span > SPAN_PER_PAGE * len(pages):
        return np.zeros(len(pages), bool)
    found = np.zeros(span, np.uint8)
    if _MINCORE(int(pages[0]) * mmap.PAGESIZE, span * mmap.PAGESIZE, found.ctypes.data) != 0:
        return np.zeros(len(pages), bool)
    return (found[pages - pages[0]] & 1).astype(bool)


def runs_of(rows: np.ndarray) -> list[tuple[int, int]]:
    """(first row, rows) of each run of consecutive row numbers in `rows` (ascending, distinct)."""
    if not len(rows):
        return []
    starts = np.flatnonzero(np.diff(rows) != 1) + 1
    bounds = [0, *starts.tolist(), len(rows)]
    return list(zip(rows[bounds[:-1]].tolist(), np.diff(bounds).tolist()))
