"""The per-user write lock: an exclusive fcntl lock on a file, waited for at most a set time.

Writers of one user are serialised across threads and processes; a writer that cannot get the lock in
time fails with a StoreError naming the lock file and the user, instead of waiting forever behind a
writer stuck in a hung model call. A lock file that cannot be opened or locked is a StoreError too.

A writer whose first write failed removes the lock file with the rest of the new store, while holding
the lock. A writer that was waiting then holds the lock of a file no longer at the path, so the lock
counts only once the file locked is the one at the path; otherwise the one there is locked anew."""

from __future__ import annotations

import errno
import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO

from memforest.errors import StoreError
from memforest.store.space import ROOM_ERRNOS

_READ_ONLY = (errno.EACCES, errno.EPERM, errno.EROFS)  # a file that may not be written, or made
_FIRST_WAIT_S = 0.002
_LONGEST_WAIT_S = 0.1


@contextmanager
def write_lock(path: Path, user: str, timeout_s: float) -> Iterator[None]:
    """Hold the exclusive lock on `path` for the block; wait at most `timeout_s` seconds for it."""
    handle = _acquire(path, user, time.monotonic() + timeout_s, timeout_s)
    try:
        yield
    finally:
        with suppress(OSError):
            fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


def _acquire(path: Path, user: str, deadline: float, timeout_s: float) -> IO[str]:
    wait = _FIRST_WAIT_S
    while True:
        created = not path.exists()
        handle = _open(path, user)
        try:
            while not _try_lock(handle, path, user, created):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise StoreError(
                        f"user {user!r}: another writer has held the write lock {path} for more than "
                        f"{timeout_s:g} s; retry later, or raise limits.lock_wait_s")
                time.sleep(min(wait, left))
                wait = min(wait * 2, _LONGEST_WAIT_S)
            if _is_at(handle, path):
                return handle
        except BaseException:
            handle.close()
            raise
        handle.close()  # removed while this writer waited: lock the file now at the path


def _open(path: Path, user: str) -> IO[str]:
    try:
        try:
            return path.open("a")
        except FileNotFoundError:  # the folder of a new store, removed by a first write that failed
            path.parent.mkdir(parents=True, exist_ok=True)
            return path.open("a")
    except OSError as e:
        if e.errno in ROOM_ERRNOS:
            raise StoreError(f"user {user!r}: no space left to write the write lock {path}: "
                             f"{ROOM_ERRNOS[e.errno]}; nothing was written: free space and retry") from None
        if e.errno in _READ_ONLY:
            raise StoreError(f"user {user!r}: the write lock {path} cannot be opened "
                             f"({e.strerror}): the store is read-only for this user; "
                             "nothing was written") from None
        raise StoreError(f"user {user!r}: cannot open the write lock {path} "
                         f"({e.strerror or type(e).__name__}); check the store's permissions") from None


def _try_lock(handle: IO[str], path: Path, user: str, created: bool) -> bool:
    """Whether the lock was taken; False while another writer holds it. A lock refused for another
    reason is a StoreError (the lock file goes again if this writer created it)."""
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    except OSError as e:
        if created:
            path.unlink(missing_ok=True)
        raise StoreError(f"user {user!r}: cannot take the write lock {path} "
                         f"({e.strerror or type(e).__name__})"
                         ) from None


def _is_at(handle: IO[str], path: Path) -> bool:
    """Whether the open file `handle` is the file at `path` now."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    mine = os.fstat(handle.fileno())
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)
