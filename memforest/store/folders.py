"""A user's folder in the store: made for a first write, removed when a failed first write leaves it
holding no database."""

from __future__ import annotations

import errno
from contextlib import suppress
from pathlib import Path

from memforest.errors import StoreError
from memforest.store.space import ROOM_ERRNOS

_FOLDER_TRIES = 5


def make_folder(directory: Path) -> None:
    """Make a new user's folder (and the store's `users/` folder) or fail with a StoreError naming it.
    A first write of another user that fails may remove an empty `users/` meanwhile: then try again."""
    for _ in range(_FOLDER_TRIES):
        try:
            directory.mkdir(parents=True, exist_ok=True)
            return
        except FileNotFoundError:
            continue
        except OSError as e:
            if e.errno in ROOM_ERRNOS:
                raise StoreError(f"cannot make the store folder {directory}: no space left to write: "
                                 f"{ROOM_ERRNOS[e.errno]}; nothing was written") from None
            if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise StoreError(f"cannot make the store folder {directory} ({e.strerror}): the "
                                 "store is read-only for this user; nothing was written") from None
            raise StoreError(f"cannot make the store folder {directory} ({e.strerror or type(e).__name__}); "
                             "check the store path and its permissions") from None
    raise StoreError(f"cannot make the store folder {directory}: it keeps being removed")


def remove_folder(directory: Path, lock_file: bool) -> None:
    """Remove a user's folder holding no database, and the store's `users/` folder when that is left
    empty. `lock_file`: the caller holds the write lock, so its file goes too; otherwise only empty
    folders are removed (another writer may hold the lock)."""
    if lock_file:
        with suppress(OSError):
            (directory / "write.lock").unlink(missing_ok=True)
    for folder in (directory, directory.parent):
        try:
            folder.rmdir()
        except OSError:  # not empty (something else lives there), or already gone
            if folder.exists():
                return
