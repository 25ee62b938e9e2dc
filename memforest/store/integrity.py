"""Findings about a store: SQLite's own integrity check, the schema, the vectors' widths, and the
resident indexes compared with the store row by row and vector by vector (a checksum per index).

Nothing here writes the database; indexes are derived from it and rebuilt by reloading."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import numpy as np

from memforest.errors import StoreError, shown
from memforest.index.forest_index import ForestIndex
from memforest.resident.vector_table import VectorTable
from memforest.state import UserState
from memforest.store.connection import open_reader
from memforest.store.validate import column_problems, file_problem, schema_problems, store_error

KINDS = ("cells", "roots", "facts")
_SHOWN_LINES = 10


def database_problems(path: Path) -> list[str]:
    """The file, SQLite's `PRAGMA integrity_check` and the schema (tables, meta, version)."""
    problem = file_problem(path)
    if problem is not None:
        return [problem]
    try:
        con = open_reader(path, strict=True)
    except sqlite3.Error as e:
        return [str(store_error(e, path))]
    except StoreError as e:
        return [str(e)]
    try:
        lines = [row[0] for row in con.execute("PRAGMA integrity_check")]
        if lines != ["ok"]:
            return [f"{path}: SQLite integrity check: {line}" for line in lines[:_SHOWN_LINES]]
        return schema_problems(con, path) or column_problems(con, path) or width_problems(con, path)
    except (sqlite3.Error, UnicodeDecodeError) as e:
        return [str(store_error(e, path))]
    finally:
        con.close()


VECTOR_COLUMNS = (("facts", "embedding"), ("nodes", "embedding"), ("scenes", "total"))


def width_problems(con: sqlite3.Connection, path: Path) -> list[str]:
    """Stored vectors whose width is not the store's dimension (meta `dim`): one line per table, with
    counts. A dimension that is no vector width (0, or beyond `MAX_DIM`) is damage too."""
    (value,) = con.execute("SELECT value FROM meta WHERE key='dim'").fetchone()
    try:
        dim = int(value)
    except (TypeError, ValueError):
        dim = -1
    problems = [] if 0 < dim <= MAX_DIM else [f"{path} is damaged: meta dim is {shown(value)}, not a vector "
                                              f"width; {_RESTORE}"]
    if not 0 <= dim <= MAX_DIM:
        return problems
    for table, column in VECTOR_COLUMNS:
        total, wrong = con.execute(f"SELECT count(*), coalesce(sum(length({column}) != ?), 0) FROM {table}",
                                   (4 * dim,)).fetchone()
        if wrong:
            (size,) = con.execute(f"SELECT length({column}) FROM {table} WHERE length({column}) != ? LIMIT 1",
                                  (4 * dim,)).fetchone()
            width = f"{size // 4}-d" if size % 4 == 0 else f"{size} bytes"
            problems.append(f"{path} is damaged: {wrong} of {total} vectors in {table}.{column} "
                            f"are not {dim}-d (the store's meta dim), e.g. one of {width}; {_RESTORE}")
    if dim:  # a cell's sentence vectors: rows of `dim` floats, one per sentence
        total, wrong = con.execute("SELECT count(vectors), coalesce(sum(length(vectors) % ? != 0), 0) "
                                   "FROM cell_sentences", (4 * dim,)).fetchone()
        if wrong:
            problems.append(f"{path} is damaged: {wrong} of {total} sentence matrices in "
                            f"cell_sentences.vectors are not rows of {dim} floats; {_RESTORE}")
    return problems


_RESTORE = "restore it from a backup"
MAX_DIM = 1 << 20  # far wider than any embedding


def widths_agree(state: UserState) -> bool:
    """Whether every stored vector of `state` is `state.dim` wide (shapes only: cheap beside a load)."""
    shape = (state.dim,)
    # of a memory whose trees are read on demand, the nodes read so far (each node's vector is checked
    # as its data are read, the leaves and roots the indexes take at the open)
    nodes = state.tree_source.data.values() if state.tree_source is not None else state.nodes.values()
    facts = state.fact_table
    return (all(d.embedding.shape == shape for d in nodes)
            and (facts is None or facts.dim == state.dim)  # (one width for every row of a table)
            and all(s.total.shape == shape for s in state.scenes.values()))


def vector_problems(state: UserState) -> list[str]:
    """Stored vectors of the wrong width or with non-finite values."""
    problems = []
    groups = {"node": {f"{t} node {n}": d.embedding for (t, n), d in state.nodes.items()},
              "fact": dict(state.fact_vecs), "scene": {s: sc.total for s, sc in state.scenes.items()}}
    for kind, vectors in groups.items():
        wrong = sorted(k for k, v in vectors.items() if v.shape != (state.dim,))
        bad = sorted(k for k, v in vectors.items() if v.shape == (state.dim,) and not np.isfinite(v).all())
        if wrong:
            problems.append(f"{len(wrong)} {kind} vector(s) are not {state.dim}-d, e.g. {wrong[0]}")
        if bad:
            problems.append(f"{len(bad)} {kind} vector(s) hold NaN or infinity, e.g. {bad[0]}")
    return problems


def index_findings(index: ForestIndex, state: UserState) -> list[str]:
    """How resident indexes differ from what the store says they hold: their version, missing or extra
    rows, vectors that differ (by checksum), and the row meta ranking reads (time, session tree)."""
    if index.version != state.version:
        return [f"the resident index is at version {index.version}, the store at {state.version}"]
    reference = ForestIndex.build(state, state.dim)
    findings: list[str] = []
    for kind in KINDS:
        findings += _compare(kind, _rows(getattr(index, kind)), _rows(getattr(reference, kind)))
    if findings:
        return findings
    for kind in ("cells", "facts"):
        have, want = getattr(index, kind), getattr(reference, kind)
        keys = want.keys()
        differ = sum(not np.array_equal(have.meta(k), want.meta(k)) for k in keys)
        if differ:
            findings.append(f"{kind} index: {differ} rows carry a time or session other than the store's")
    return findings


def _rows(table: VectorTable) -> tuple[np.ndarray, np.ndarray]:
    """(ids, vectors) of a table's live rows, sorted by id (integers, or text for the fact table)."""
    keys = sorted(table.keys())  # type: ignore[type-var]
    if not keys:
        return np.zeros(0, np.int64), np.zeros((0, table.dim), np.float32)
    return np.asarray(keys), np.stack([table.vector(k) for k in keys]).astype(np.float32)


def checksum(ids: np.ndarray, vecs: np.ndarray) -> str:
    return hashlib.sha256(ids.tobytes() + np.ascontiguousarray(vecs, dtype=np.float32).tobytes()).hexdigest()


def _compare(kind: str, have: tuple[np.ndarray, np.ndarray],
             expected: tuple[np.ndarray, np.ndarray]) -> list[str]:
    (ids, vecs), (want_ids, want_vecs) = have, expected
    if checksum(ids, vecs) == checksum(want_ids, want_vecs):
        return []
    if not np.array_equal(ids, want_ids):
        extra, missing = np.setdiff1d(ids, want_ids).size, np.setdiff1d(want_ids, ids).size
        return [f"{kind} index rows differ from the store ({missing} missing, {extra} extra)"]
    differ = int((~np.all(vecs == want_vecs, axis=1)).sum())
    return [f"{kind} index: {differ} of {len(ids)} vectors differ from the store (checksum mismatch)"]

