"""A store's files put out of the page cache, so a memory of any size can be measured as one far larger
than the machine's memory finds it: every page an operation needs is read from the disk again.

Linux only: this process's maps of the files are paged out (`madvise(MADV_PAGEOUT)`, kernel 5.4+:
clean pages are reclaimed, pages a private map has written stay), then each file's cached pages are
written back and dropped (`posix_fadvise(POSIX_FADV_DONTNEED)`). Nothing is dropped elsewhere, and the
files are not changed."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from memforest.resident.prefetch import libc_madvise

MADV_PAGEOUT = 21  # linux/mman-common.h


def supported() -> bool:
    return sys.platform.startswith("linux") and hasattr(os, "posix_fadvise")


def mapped_ranges(root: Path, maps: str) -> list[tuple[int, int]]:
    """(start, end) of the lines of `maps` (`/proc/self/maps`) that map a file under `root`."""
    prefix = str(root.resolve()) + os.sep
    out = []
    for line in maps.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and parts[5].startswith(prefix):
            lo, hi = parts[0].split("-")
            out.append((int(lo, 16), int(hi, 16)))
    return out


def drop_pages(root: Path) -> dict[str, int]:
    """Put the files under `root` out of the page cache (module docstring): how many ranges of this
    process's maps of them were found and paged out (none on a kernel before 5.4), and how many files
    were dropped (nothing where the platform cannot: `supported`)."""
    madvise = libc_madvise()
    if not supported() or madvise is None:
        return {"ranges": 0, "paged_out": 0, "files": 0}
    ranges = mapped_ranges(root, Path("/proc/self/maps").read_text())
    paged = sum(madvise(lo, hi - lo, MADV_PAGEOUT) == 0 for lo, hi in ranges)
    files = 0
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)  # (dirty pages are not dropped)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            files += 1
        finally:
            os.close(fd)
    return {"ranges": len(ranges), "paged_out": paged, "files": files}
