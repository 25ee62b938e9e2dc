"""A SQLite database created atomically: a complete file in WAL mode appears at its path, or none.

Two processes (or threads) opening a missing database at once would otherwise race to create it, and
switching a fresh file to WAL mode takes an exclusive lock that SQLite may refuse at once, without
waiting (`database is locked`). Built in a private file and linked into place, the database at the path
is already in WAL mode with its schema, so opening it takes no exclusive lock."""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path


def create_atomically(path: Path, build: Callable[[sqlite3.Connection], object]) -> bool:
    """Build the database with `build` (given an autocommit connection in WAL mode, synchronous=FULL)
    in a private file, then link it to `path` unless another writer was first. Returns whether this
    call created it; SQLite errors propagate."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.new")
    try:
        con = sqlite3.connect(tmp, isolation_level=None)
        try:
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("PRAGMA synchronous=FULL")
            build(con)
        finally:
            con.close()  # the last connection checkpoints the WAL into the file
        try:
            os.link(tmp, path)
            return True
        except FileExistsError:
            return False
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{tmp}{suffix}").unlink(missing_ok=True)
