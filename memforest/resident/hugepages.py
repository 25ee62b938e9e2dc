"""Transparent huge pages for a large resident memory (Linux).

A loaded memory of 10^4 sessions is millions of small objects spread over gigabytes of heap; an
operation reads a few thousand of them, scattered, and with 4 KiB pages most of those reads miss the
TLB as well as the cache (more so in a virtual machine, where a miss walks two page tables). Backing
the heap with 2 MiB pages removes most of the TLB misses. Most kernels leave transparent huge pages
to regions that ask for them (`enabled` = madvise), so after a large store is loaded the process's
populated private anonymous mappings are advised (MADV_HUGEPAGE) and, on kernels that have it
(6.1+), collapsed at once (MADV_COLLAPSE) instead of whenever khugepaged gets to them.

Only mappings at least `MIN_RESIDENT` resident are touched: collapsing fills a range's missing pages,
and a sparsely used one (a table's reserved capacity) would grow. Elsewhere (other systems, THP off,
no madvise) nothing happens."""

from __future__ import annotations

import ctypes
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

MADV_HUGEPAGE = 14
MADV_COLLAPSE = 25
MIN_RESIDENT = 0.5  # least resident share of a mapping for it to be collapsed
_THP = Path("/sys/kernel/mm/transparent_hugepage")


@dataclass(frozen=True)
class HugePageReport:
    advised_bytes: int = 0
    collapsed_bytes: int = 0
    seconds: float = 0.0
    reason: str = ""  # why nothing was done (empty when something was)


@dataclass(frozen=True)
class Mapping:
    start: int
    end: int
    resident: int  # bytes


def thp_mode(root: Path = _THP) -> str | None:
    """The kernel's transparent-huge-page mode (always, madvise, never), None where there is none."""
    try:
        text = (root / "enabled").read_text()
    except OSError:
        return None
    for word in text.split():
        if word.startswith("[") and word.endswith("]"):
            return word[1:-1]
    return None


def huge_page_size(root: Path = _THP) -> int:
    try:
        return int((root / "hpage_pmd_size").read_text())
    except (OSError, ValueError):
        return 2 << 20


def private_anonymous(smaps: str) -> list[Mapping]:
    """Writable private anonymous mappings (and the brk heap) of an smaps listing, with their
    resident bytes."""
    out: list[Mapping] = []
    current: list[int] | None = None
    for line in smaps.splitlines():
        head = line.split(maxsplit=5)
        if head and "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
            if current is not None:
                out.append(Mapping(*current))
            path = head[5].strip() if len(head) > 5 else ""
            lo, hi = (int(x, 16) for x in head[0].split("-"))
            current = ([lo, hi, 0]
                       if head[1].startswith("rw") and head[1][3] == "p" and path in ("", "[heap]") else None)
        elif current is not None and head and head[0] == "Rss:":
            current[2] = int(head[1]) * 1024
    if current is not None:
        out.append(Mapping(*current))
    return out


def advise_heap_later(done: Callable[[HugePageReport], None] | None = None) -> threading.Thread:
    """`advise_heap` in a daemon thread, so an open does not wait seconds for the kernel to collapse
    gigabytes (madvise runs without the interpreter lock); `done` gets the report."""
    def run() -> None:
        report = advise_heap()
        if done is not None:
            done(report)
    thread = threading.Thread(target=run, name="memforest-huge-pages", daemon=True)
    thread.start()
    return thread


def advise_heap(min_resident: float = MIN_RESIDENT) -> HugePageReport:
    """Advise (and where the kernel can, collapse) the process's populated anonymous memory into
    huge pages; a report of what was done, never an error."""
    t = time.perf_counter()
    if not sys.platform.startswith("linux"):
        return HugePageReport(reason="not Linux")
    mode = thp_mode()
    if mode not in ("always", "madvise"):
        return HugePageReport(reason=f"transparent huge pages {mode or 'absent'}")
    try:
        smaps = Path("/proc/self/smaps").read_text()
        libc = ctypes.CDLL(None, use_errno=True)
        madvise = libc.madvise
    except (OSError, AttributeError) as exc:
        return HugePageReport(reason=f"no madvise: {exc}")
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    size = huge_page_size()
    advised = collapsed = 0
    for m in private_anonymous(smaps):
        lo, hi = -(-m.start // size) * size, m.end // size * size
        if hi - lo < size or m.resident < min_resident * (m.end - m.start):
            continue
        if madvise(lo, hi - lo, MADV_HUGEPAGE) != 0:
            continue
        advised += hi - lo
        # fails (EINVAL) on kernels before 6.1: khugepaged then collapses the range in its own time
        if madvise(lo, hi - lo, MADV_COLLAPSE) == 0:
            collapsed += hi - lo
    return HugePageReport(advised, collapsed, time.perf_counter() - t, "" if advised else "no large mapping")
