"""The per-user write lock: an exclusive fcntl lock on a file, waited for at most a set time.

Writers of one user are serialised across threads and processes; a writer that cannot get the lock in
time fails with a StoreError naming the lock file and the user, instead of waiting forever behind a
writer stuck in a hung model call."""

from __future__ import annotations

import fcntl
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from memforest.errors import StoreError

_FIRST_WAIT_S = 0.002
_LONGEST_WAIT_S = 0.1


@contextmanager
def write_lock(path: Path, user: str, timeout_s: float) -> Iterator[None]:
    """Hold the exclusive lock on `path` for the block; wait at most `timeout_s` seconds for it."""
    with path.open("a") as handle:
        _acquire(handle, path, user, timeout_s)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _acquire(handle: IO[str], path: Path, user: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    wait = _FIRST_WAIT_S
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            left = deadline - time.monotonic()
            if left <= 0:
                raise StoreError(
                    f"user {user!r}: another writer has held the write lock {path} for more than "
                    f"{timeout_s:g} s; retry later, or raise limits.lock_wait_s") from None
            time.sleep(min(wait, left))
            wait = min(wait * 2, _LONGEST_WAIT_S)
