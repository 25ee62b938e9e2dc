"""Storing the sentence vectors of cells written before the store kept them (schema 3 and older).

Since schema 4 the write stores, beside every cell, its length and, for a cell longer than its leaf
vector reads, the vectors of the user sentences it is scored by (`memforest.sentences`), so that a
query embeds only its question. A store migrated from an older schema has the table but no rows for
the cells it held. Such a store keeps working as it is, which is why opening it does not backfill:
the query path embeds the sentences of a long cell stored without them and ranks exactly as with
stored ones, at the cost of an embedding call per query; a backfill needs the embedder, takes time
in proportion to the store, and would have to write to a store that may be read-only. `backfill`
(`memforest migrate`) stores the rows a fresh write would have stored, with the store's own embedder
(another is refused before anything is written), so that the old store answers as a new one does.

Cells are read in order of id, `BACKFILL_BATCH` at a time; each batch's rows are written in one
transaction, only if no operation committed since the batch was read (else it is read again, and the
vectors already made are reused). A backfill stopped midway leaves the rows of the batches it
committed, which are those a write stores: the store opens, answers the same, and a later run goes on
with the cells still without rows. The rows change no result, only where the vectors come from, so
the store's version stays as it is (its caches stay valid)."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from memforest.errors import InputError, ModelError, StoreError
from memforest.sentences import sentences_to_embed
from memforest.store.connection import rollback
from memforest.store.db import UserDB
from memforest.store.validate import file_problem, identity_problem
from memforest.types import Turn

if TYPE_CHECKING:
    from memforest.llm.base import Embedder

BACKFILL_BATCH = 256  # cells per transaction: up to 8 sentences each are embedded in one call

# (cell id, words, vectors) of a cell's row, as `memforest.store.commit` writes it
Row = tuple[str, int, bytes | None]


@dataclass
class BackfillReport:
    """What a backfill did: every cell it examined is counted once, as `present` (it had its row),
    `backfilled` (its sentence vectors were stored: `sentences` of them in all), `short` (its leaf
    vector reads it whole: its length alone was stored, as a write stores it) or `orphaned` (its
    session is missing: left alone, `memforest check` reports it)."""

    user: str
    path: str
    examined: int = 0
    present: int = 0
    backfilled: int = 0
    short: int = 0
    orphaned: int = 0
    sentences: int = 0
    batches: int = 0  # transactions committed
    reread: int = 0  # batches read again because an operation committed meanwhile

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def missing_sentences(con: sqlite3.Connection) -> tuple[int, int]:
    """(cells, cells without a sentence row) of the store."""
    total, missing = con.execute(
        "SELECT count(*), coalesce(sum(s.cell_id IS NULL), 0) FROM cells c "
        "LEFT JOIN cell_sentences s ON s.cell_id = c.cell_id").fetchone()
    return int(total), int(missing)


def backfill(db: UserDB, user: str, embedder: Embedder, leaf_words: int,
             batch: int = BACKFILL_BATCH) -> BackfillReport:
    """Store the sentence rows of the cells of `db` that lack them (the module's notes), with
    `embedder`, which must be the one the store was built with, and the write's `leaf_words`
    (`TreeConfig.leaf_words`). An older schema is migrated first."""
    if batch < 1:
        raise InputError(f"a backfill batch must hold at least 1 cell, not {batch}")
    _refuse_other_embedder(db, user, embedder)
    db.validate(embedder.name, embedder.dim)  # migrates an older schema; refuses a read-only store
    report = BackfillReport(user, str(db.path))
    after = ""
    reuse: dict[str, np.ndarray] = {}
    with db.connect() as con:
        while True:
            version, cells = _read_batch(con, db.path, after, batch)
            if not cells:
                return report
            rows, made = _rows(cells, embedder, leaf_words, reuse)
            if rows and not _write(con, version, rows):
                report.reread += 1
                reuse = made  # the batch is read again; its unchanged sentences are not embedded again
                continue
            reuse = {}
            _tally(report, cells, rows, embedder.dim)
            after = cells[-1][0]


def _refuse_other_embedder(db: UserDB, user: str, embedder: Embedder) -> None:
    """A StoreError, before anything is written (the migration included), when the store is missing,
    not a database, or was built with another embedder than `embedder`."""
    if not db.path.exists():
        raise StoreError(f"no memory for user {user!r} at {db.path}")
    problem = file_problem(db.path)
    if problem is None:
        with db.read() as con:
            problem = identity_problem(con, db.path, embedder.name, embedder.dim)
    if problem is not None:
        raise StoreError(problem)


# (cell id, turns of its session or None when the session is missing, turn_lo, turn_hi, has a row)
_Cell = tuple[str, list[Turn] | None, int, int, bool]


def _read_batch(con: sqlite3.Connection, path: Path, after: str, batch: int) -> tuple[int, list[_Cell]]:
    """The store's version and the next `batch` cells after `after` (by id), with their sessions'
    turns where they lack a row, read in one snapshot."""
    con.execute("BEGIN")
    try:
        (version,) = con.execute("SELECT value FROM meta WHERE key='version'").fetchone()
        found = con.execute(
            "SELECT c.cell_id, c.session_id, c.turn_lo, c.turn_hi, s.cell_id IS NOT NULL FROM cells c "
            "LEFT JOIN cell_sentences s ON s.cell_id = c.cell_id WHERE c.cell_id > ? ORDER BY c.cell_id "
            "LIMIT ?", (after, batch)).fetchall()
        wanted = sorted({sid for _, sid, _, _, present in found if not present})
        turns = {sid: _turns(path, sid, text) for sid, text in con.execute(
            "SELECT session_id, turns FROM sessions WHERE session_id IN (SELECT value FROM json_each(?))",
            (json.dumps(wanted),))}
    finally:
        rollback(con)  # a read: nothing to keep
    return int(version), [(cid, turns.get(sid), lo, hi, bool(present)) for cid, sid, lo, hi, present in found]


def _turns(path: Path, session_id: str, text: str) -> list[Turn]:
    try:
        return [Turn(r, c, t) for r, c, t in json.loads(text)]
    except (ValueError, TypeError) as e:
        raise StoreError(f"{path} is damaged: the turns of session {session_id!r} cannot be read "
                         f"({type(e).__name__}); run `memforest check`") from e


def _rows(cells: list[_Cell], embedder: Embedder, leaf_words: int, reuse: dict[str, np.ndarray]
          ) -> tuple[list[Row], dict[str, np.ndarray]]:
    """The rows of the cells of a batch that lack them (and have a session), and the vectors by
    sentence (`reuse`'s not embedded again)."""
    todo: list[tuple[str, int, list[str] | None]] = []
    for cid, turns, lo, hi, present in cells:
        if not present and turns is not None:
            todo.append((cid, *sentences_to_embed(turns[lo : hi + 1], leaf_words)))
    made = _embed(sorted({s for _, _, said in todo for s in said or ()} - set(reuse)), embedder)
    made.update(reuse)
    rows: list[Row] = [(cid, words, None if said is None else _blob([made[s] for s in said], embedder.dim))
                       for cid, words, said in todo]
    return rows, made


def _tally(report: BackfillReport, cells: list[_Cell], rows: list[Row], dim: int) -> None:
    """Count a batch written (`rows`) into `report`."""
    short = sum(blob is None for _, _, blob in rows)
    report.examined += len(cells)
    report.present += sum(present for *_, present in cells)
    report.orphaned += sum(turns is None and not present for _, turns, _, _, present in cells)
    report.short += short
    report.backfilled += len(rows) - short
    report.sentences += sum(len(blob) // (4 * dim) for _, _, blob in rows if blob is not None)
    report.batches += bool(rows)


def _embed(texts: list[str], embedder: Embedder) -> dict[str, np.ndarray]:
    if not texts:
        return {}
    vecs = np.asarray(embedder.embed(texts, "passage"), dtype=np.float32)
    if vecs.shape != (len(texts), embedder.dim):
        raise ModelError(f"embedder {embedder.name} returned vectors of shape {vecs.shape} for {len(texts)} "
                         f"sentences; expected ({len(texts)}, {embedder.dim}); nothing was written")
    return dict(zip(texts, vecs))


def _blob(vectors: list[np.ndarray], dim: int) -> bytes:
    return np.asarray(vectors, dtype=np.float32).reshape(-1, dim).tobytes()


def _write(con: sqlite3.Connection, version: int, rows: list[Row]) -> bool:
    """Write `rows` in one transaction if the store is still at `version`; whether it was."""
    con.execute("BEGIN IMMEDIATE")
    try:
        (current,) = con.execute("SELECT value FROM meta WHERE key='version'").fetchone()
        if int(current) != version:
            rollback(con)
            return False
        con.executemany("INSERT OR IGNORE INTO cell_sentences VALUES (?, ?, ?)", rows)
        con.execute("COMMIT")
    except BaseException:
        rollback(con)
        raise
    return True
