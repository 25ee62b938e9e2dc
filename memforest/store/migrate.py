"""Creating a user's database at this schema version, and bringing one of an older version up to it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from memforest.sqlite_file import create_atomically
from memforest.store.connection import rollback
from memforest.store.schema import DDL, MIGRATIONS, SCHEMA_VERSION
from memforest.store.validate import store_error


def create_file(path: Path, embedder: str, dim: int) -> bool:
    """Build the schema in a private file, then link it into place unless another writer was first."""

    def build(con: sqlite3.Connection) -> None:
        con.execute("BEGIN IMMEDIATE")
        for statement in DDL.split(";"):
            if statement.strip():
                con.execute(statement)
        for k, v in {"schema_version": SCHEMA_VERSION, "embedder": embedder, "dim": dim,
                     "version": 0, "next_tree_rowid": 1, "next_scene": 1}.items():
            con.execute("INSERT INTO meta VALUES (?, ?)", (k, str(v)))
        con.execute("COMMIT")

    try:
        return create_atomically(path, build)
    except sqlite3.Error as e:
        raise store_error(e, path) from e


def _schema_version(con: sqlite3.Connection) -> int | None:
    try:
        row = con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    except sqlite3.Error:
        return None
    return int(row[0]) if row and str(row[0]).isdigit() else None


def migration_due(con: sqlite3.Connection) -> bool:
    """Whether the store is of an older schema version with a known migration."""
    start = _schema_version(con)
    return start is not None and start < SCHEMA_VERSION and start in MIGRATIONS


def migrate(con: sqlite3.Connection) -> None:
    """Bring a store of an older schema version up to this one, in one transaction (a no-op for a
    current store; one that is damaged or of an unknown version is left for validation to refuse)."""
    if not migration_due(con):
        return
    con.execute("BEGIN IMMEDIATE")
    try:
        v = _schema_version(con)  # another process may have migrated it meanwhile
        while v is not None and v < SCHEMA_VERSION and v in MIGRATIONS:
            for statement in MIGRATIONS[v]:
                con.execute(statement)
            v += 1
            con.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(v),))
        con.execute("COMMIT")
    except BaseException:
        rollback(con)
        raise
