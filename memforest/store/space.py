"""Whether a failed write ran out of room: no space left on the device, a file-size limit
(RLIMIT_FSIZE) or a disk quota. SQLite reports a full device as SQLITE_FULL, but a write refused for
a file-size limit or a quota, and a full device met while sizing the log's index, as a plain I/O
error, which would otherwise read as damage: those are told apart here by looking at the room left."""

from __future__ import annotations

import errno
import os
import resource
import sqlite3
import tempfile
from pathlib import Path

ROOM_ERRNOS = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EFBIG: "a file-size limit is reached",
}
_SQLITE_IOERR, _SQLITE_FULL = 10, 13
_LOW_BYTES = 1 << 20  # free space under which a failed write is taken to have found no room
_PROBE_BYTES = 64 << 10  # a write that must fit in the store's folder for it to have room


def lacks_room(path: Path, exc: BaseException | None = None) -> str | None:
    """Why a write to the store at `path` (its database, log or caches) found no room, when `exc` is
    such a failure (an OSError of a full device, quota or size limit, SQLITE_FULL, or an I/O error
    met while the folder has no room); None when it is not."""
    if isinstance(exc, OSError):
        return ROOM_ERRNOS.get(exc.errno or 0)
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        text = str(exc).lower()
        primary = code & 0xFF if isinstance(code, int) else (
            _SQLITE_FULL if "disk is full" in text else _SQLITE_IOERR if "i/o error" in text else None)
        if primary == _SQLITE_FULL:
            return room_left(path) or "the disk is full or the database reached its size limit"
        if primary == _SQLITE_IOERR:
            return room_left(path)
    return None


def room_left(path: Path) -> str | None:
    """Why the folder of `path` has no room for a write now (None: it has, as far as can be seen):
    the process's file-size limit at or below a store file's size, little free space, or a small
    write refused (a quota)."""
    folder = Path(path).parent
    limit, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    if limit != resource.RLIM_INFINITY:
        largest = max((file_size(Path(f"{path}{suffix}")) for suffix in ("", "-wal", "-shm")), default=0)
        if largest + _PROBE_BYTES >= limit:
            return f"a file-size limit is reached (RLIMIT_FSIZE {limit:,} bytes)"
    try:
        st = os.statvfs(folder)
        if st.f_bavail * st.f_frsize < _LOW_BYTES:
            return f"no space left on the device ({st.f_bavail * st.f_frsize:,} bytes free)"
    except OSError:
        pass
    size = _PROBE_BYTES if limit == resource.RLIM_INFINITY else min(_PROBE_BYTES, max(limit - 1, 0))
    return _probe(folder, size)


def _probe(folder: Path, size: int) -> str | None:
    """Whether writing `size` bytes in `folder` is refused for want of room (a quota shows here)."""
    try:
        with tempfile.TemporaryFile(dir=folder) as f:
            f.write(b"\0" * size)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        return ROOM_ERRNOS.get(e.errno or 0)
    return None


def file_size(path: Path) -> int:
    """The size of the file at `path` in bytes; 0 when it cannot be read (absent, no permission)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0
