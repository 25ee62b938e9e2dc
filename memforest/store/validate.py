"""What a store file must be before anything reads or writes it, and SQLite failures as StoreErrors.

A database is refused, naming its path, when it is empty (0 bytes), not an SQLite file, lacks a table
or a meta key of the schema, or carries another schema version (a newer one is never written to). It
is never re-created or repaired by a write: SQLite is the source of truth, only caches are rebuilt."""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path

from memforest.errors import StoreError, shown
from memforest.store.schema import DDL, MIGRATIONS, SCHEMA_VERSION
from memforest.store.space import lacks_room

TABLES = tuple(re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", DDL))
META_KEYS = ("schema_version", "embedder", "dim", "version", "next_tree_rowid", "next_scene")
_DAMAGED = ("malformed", "not a database", "no such table", "no such column", "corrupt", "disk i/o error")
_ADVICE = "run `memforest check` and restore it from a backup"
_PAGE_MIN = 512


def file_problem(path: Path) -> str | None:
    """Why the file at `path` cannot be a MemForest database (None: it may be one), from its metadata
    alone. The file is never opened here: POSIX locks belong to a process and a file, so closing any
    descriptor of the database drops the locks of every SQLite connection this process holds on it,
    and another process could then checkpoint and delete the write-ahead log under a connection still
    writing to it. A damaged header is refused by SQLite at its first statement (`store_error`); a
    file that is not a whole number of pages is refused here, since SQLite would take a file of one
    byte for an empty database and write a new one over it."""
    if path.is_dir():
        return f"{path} is a directory, not a database file"
    try:
        size = path.stat().st_size
    except OSError as e:
        return f"{path} cannot be read: {e.strerror or e}"
    if not os.access(path, os.R_OK):
        return f"{path} cannot be read: Permission denied"
    if not size:
        return f"{path} is empty (0 bytes): the database is lost; restore it from a backup"
    if size % _PAGE_MIN:  # SQLite writes whole pages (a power of two, at least 512 bytes)
        return f"{path} is damaged (truncated: {size:,} bytes, not a whole number of pages); {_ADVICE}"
    return None


def schema_problems(con: sqlite3.Connection, path: Path) -> list[str]:
    """Missing tables, missing meta keys and a foreign schema version, each naming `path`."""
    present = {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    meta = dict(con.execute("SELECT key, value FROM meta").fetchall()) if "meta" in present else {}
    version = str(meta.get("schema_version", ""))
    if version.isdigit() and int(version) < SCHEMA_VERSION:  # its tables are those of its own version
        return [f"{path} has schema version {version}, older than {SCHEMA_VERSION}: " + (
            "any MemForest command that opens it for use migrates it" if int(version) in MIGRATIONS
            else "no migration from it is known")]
    missing = [t for t in TABLES if t not in present]
    if missing:
        return [f"{path} is damaged: table(s) {', '.join(missing)} missing; {_ADVICE}"]
    absent = [k for k in META_KEYS if k not in meta]
    if absent:
        return [f"{path} is damaged: meta key(s) {', '.join(absent)} missing; {_ADVICE}"]
    problems = []
    if not str(version).isdigit():
        problems.append(f"{path} is damaged: schema version {shown(version)}")
    elif int(version) > SCHEMA_VERSION:
        problems.append(f"{path} has schema version {version}, newer than this MemForest's {SCHEMA_VERSION}: "
                        "upgrade MemForest to use it")
    for key in ("dim", "version", "next_tree_rowid", "next_scene"):
        if not str(meta[key]).isdigit():
            problems.append(f"{path} is damaged: meta {key} is {shown(meta[key])}")
    return problems


_TYPES = {"TEXT": ("text",), "INTEGER": ("integer",), "REAL": ("real", "integer"), "BLOB": ("blob",)}
_TIME_COLUMNS = {"time", "t_lo", "t_hi", "source_time", "event_start", "event_end", "t_last"}
_TIME_RANGE = (-3e9, 8e9)  # seconds since 1970: about the years 1875 to 2223


def column_problems(con: sqlite3.Connection, path: Path) -> list[str]:
    """Values whose type differs from their column's declared type (SQLite stores any type in any
    column), NULLs in NOT NULL columns, and times outside the calendar MemForest accepts."""
    problems = []
    for table in TABLES:
        for _, column, declared, notnull, _, _ in con.execute(f"PRAGMA table_info({table})").fetchall():
            allowed = _TYPES.get(str(declared).upper(), ())
            if not allowed:
                continue
            kinds = ", ".join(f"'{k}'" for k in (*allowed, *(() if notnull else ("null",))))
            condition = f"typeof({column}) NOT IN ({kinds})"
            if column in _TIME_COLUMNS:
                condition += (f" OR ({column} IS NOT NULL AND ({column} < {_TIME_RANGE[0]} "
                              f"OR {column} > {_TIME_RANGE[1]}))")
            bad = con.execute(f"SELECT count(*) FROM {table} WHERE {condition}").fetchone()[0]
            if bad:
                problems.append(f"{path} is damaged: {bad} value(s) of {table}.{column} are not "
                                f"{declared.lower()}{' times in range' if column in _TIME_COLUMNS else ''}; "
                                f"{_ADVICE}")
    return problems


def identity_problem(con: sqlite3.Connection, path: Path, embedder: str, dim: int) -> str | None:
    """A mismatch between the configured embedder and the one the store was built with."""
    meta = dict(con.execute("SELECT key, value FROM meta WHERE key IN ('embedder', 'dim')").fetchall())
    if meta.get("embedder") != embedder or str(meta.get("dim")) != str(dim):
        return (f"{path} was built with embedder {shown(meta.get('embedder'))} ({meta.get('dim')}-d); this "
                f"configuration uses {shown(embedder)} ({dim}-d): refusing to mix vectors, "
                "nothing was written")
    return None


def store_error(exc: sqlite3.Error | UnicodeDecodeError, path: Path) -> StoreError:
    """An SQLite failure as a one-line StoreError naming the database and what to do."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    low = text.lower()
    if isinstance(exc, UnicodeDecodeError):
        return StoreError(f"{path} is damaged (a text value is not valid UTF-8: {exc.reason}); {_ADVICE}")
    room = lacks_room(path, exc) if isinstance(exc, sqlite3.Error) else None
    if room is not None:
        return StoreError(f"{path}: no space left to write: {room} ({text}); the operation was rolled "
                          "back, nothing was written: free space and retry")
    if "locked" in low or "busy" in low:
        return StoreError(f"{path} is locked by another process ({text}); retry later")
    if "readonly" in low or "read-only" in low:
        return StoreError(f"{path} is read-only ({text}); nothing was written")
    if "unable to open" in low:
        return StoreError(f"{path} cannot be opened ({text}); check the store path and its permissions")
    if "file is not a database" in low:
        return StoreError(f"{path} is not an SQLite database (damaged header); {_ADVICE}")
    if any(word in low for word in _DAMAGED):
        return StoreError(f"{path} is damaged ({text}); {_ADVICE}")
    return StoreError(f"{path}: database error ({text})")
