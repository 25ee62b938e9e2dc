"""Opening one user's SQLite database to read it, also where it may not be written, and rolling back
what a failed operation left open."""

from __future__ import annotations

import sqlite3
from contextlib import suppress
from pathlib import Path

from memforest.errors import StoreError
from memforest.store.space import file_size as _size

# primary result codes: a file that may not be written, an I/O error, a full disk, a file not opened
_SQLITE_READONLY, _SQLITE_IOERR, _SQLITE_FULL, _SQLITE_CANTOPEN = 8, 10, 13, 14


def rollback(con: sqlite3.Connection) -> None:
    """Roll back if a transaction is still open: SQLite has already rolled back after some errors (a
    full disk), and a second failure must not hide the first."""
    if con.in_transaction:
        with suppress(sqlite3.Error):
            con.execute("ROLLBACK")


def open_reader(path: Path, strict: bool = False, shared: bool = False) -> sqlite3.Connection:
    """A connection that only reads (`strict`: opened with `mode=ro`, so SQLite itself refuses any
    write, as a check of a store that may be damaged wants). SQLite opens a database file it may not
    write read-only by itself, but reading a store in WAL mode takes its WAL index (the `-shm` file),
    which the first reader creates beside the database: in a read-only folder, with no connection
    holding the store open (so neither index nor log exists), that fails. The database file then
    holds every commit, and it is read as immutable, without the index. The same holds where the
    index cannot be made: on a read-only file system (SQLite cannot open it) or with no room left
    for it (an I/O error). A write-ahead log left with commits but without its index (a writer
    killed) cannot be read that way: that is refused.
    `shared`: the connection may be used from any thread (its user serialises the calls)."""
    con = sqlite3.connect(_uri(path, "mode=ro") if strict else path, uri=strict, timeout=60.0,
                          isolation_level=None, check_same_thread=not shared)
    try:
        con.execute("PRAGMA schema_version").fetchone()  # opens the database and its WAL index
        return con
    except sqlite3.Error as e:
        con.close()
        code = _primary_code(e)
        if code not in (_SQLITE_READONLY, _SQLITE_CANTOPEN, _SQLITE_IOERR, _SQLITE_FULL):
            raise
        wal, index = Path(f"{path}-wal"), Path(f"{path}-shm")
        if _size(wal) and not index.exists() and code in (_SQLITE_READONLY, _SQLITE_CANTOPEN):
            raise StoreError(f"{path} is read-only and its write-ahead log {wal.name} holds "
                             "commits that cannot be read without write access to its folder; nothing was "
                             "read or written: open the store once with write access") from None
        if code != _SQLITE_READONLY and (_size(wal) or not path.is_file()):
            raise
    return sqlite3.connect(_uri(path, "mode=ro&immutable=1"), uri=True, timeout=60.0, isolation_level=None,
                           check_same_thread=not shared)


def _uri(path: Path, query: str) -> str:
    return f"{Path(path).absolute().as_uri()}?{query}"


def _primary_code(e: sqlite3.Error) -> int | None:
    """SQLite's primary result code of `e` (Python 3.11 and later carry it; before, from the message)."""
    code = getattr(e, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF
    text = str(e).lower()
    for words, code in (("readonly", _SQLITE_READONLY), ("unable to open", _SQLITE_CANTOPEN),
                        ("disk i/o error", _SQLITE_IOERR), ("disk is full", _SQLITE_FULL)):
        if words in text:
            return code
    return None

