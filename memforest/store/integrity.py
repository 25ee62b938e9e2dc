"""Findings about a store on disk: SQLite's own integrity check, the schema, the vectors' widths, and
the index caches compared with the store row by row and vector by vector (a checksum per index).

Nothing here writes the database; only the caches, which are derived from it, are rebuilt."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import numpy as np

from memforest.errors import StoreError
from memforest.index.forest_index import ForestIndex
from memforest.index.vectors import VectorIndex, _faiss
from memforest.state import UserState
from memforest.store.validate import column_problems, file_problem, schema_problems, store_error

KINDS = ("nodes", "roots", "facts")
_SHOWN_LINES = 10


def database_problems(path: Path) -> list[str]:
    """The file, SQLite's `PRAGMA integrity_check` and the schema (tables, meta, version)."""
    problem = file_problem(path)
    if problem is not None:
        return [problem]
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=60.0)
    except sqlite3.Error as e:
        return [str(store_error(e, path))]
    try:
        lines = [row[0] for row in con.execute("PRAGMA integrity_check")]
        if lines != ["ok"]:
            return [f"{path}: SQLite integrity check: {line}" for line in lines[:_SHOWN_LINES]]
        return schema_problems(con, path) or column_problems(con, path)
    except (sqlite3.Error, UnicodeDecodeError) as e:
        return [str(store_error(e, path))]
    finally:
        con.close()


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


def index_findings(directory: Path, state: UserState) -> list[str]:
    """How the cached indexes in `directory` differ from what the store says they hold: a missing or
    stale stamp, an unreadable file, missing or extra rows, vectors that differ (by checksum)."""
    findings = _stamp_findings(directory, state)
    reference = ForestIndex.build(state, state.dim)
    for kind in KINDS:
        try:
            cached = VectorIndex.load(directory / f"{kind}.faiss", state.dim)
        except Exception as e:  # faiss reports damage as RuntimeError, MemoryError, ValueError...
            findings.append(f"{kind}.faiss cannot be read ({type(e).__name__}: {' '.join(str(e).split())[:100]})")
            continue
        findings += _compare(kind, _rows(cached), _rows(getattr(reference, kind)))
    return findings


def _stamp_findings(directory: Path, state: UserState) -> list[str]:
    try:
        stamp = json.loads((directory / "stamp.json").read_text())
        version, dim = stamp["version"], stamp["dim"]
    except FileNotFoundError:
        return ["the index stamp is missing"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        return [f"the index stamp cannot be read ({type(e).__name__})"]
    out = []
    if version != state.version:
        out.append(f"the index stamp names version {version}, the store is at {state.version}")
    if dim != state.dim:
        out.append(f"the index stamp names dimension {dim}, the store's is {state.dim}")
    return out


def _rows(index: VectorIndex) -> tuple[np.ndarray, np.ndarray]:
    """(ids, vectors) of an index, sorted by id."""
    faiss = _faiss()
    ids = faiss.vector_to_array(index.index.id_map).astype(np.int64)
    inner = faiss.downcast_index(index.index.index)
    vecs = inner.reconstruct_n(0, inner.ntotal) if inner.ntotal else np.zeros((0, index.dim), np.float32)
    order = np.argsort(ids, kind="stable")
    return ids[order], np.asarray(vecs, dtype=np.float32)[order]


def checksum(ids: np.ndarray, vecs: np.ndarray) -> str:
    return hashlib.sha256(ids.tobytes() + np.ascontiguousarray(vecs, dtype=np.float32).tobytes()).hexdigest()


def _compare(kind: str, cached: tuple[np.ndarray, np.ndarray], expected: tuple[np.ndarray, np.ndarray]) -> list[str]:
    (ids, vecs), (want_ids, want_vecs) = cached, expected
    if checksum(ids, vecs) == checksum(want_ids, want_vecs):
        return []
    if not np.array_equal(ids, want_ids):
        extra, missing = np.setdiff1d(ids, want_ids).size, np.setdiff1d(want_ids, ids).size
        return [f"{kind}.faiss rows differ from the store ({missing} missing, {extra} extra)"]
    differ = int((~np.all(vecs == want_vecs, axis=1)).sum())
    return [f"{kind}.faiss: {differ} of {len(ids)} vectors differ from the store (checksum mismatch)"]


def rebuild_index(directory: Path, state: UserState) -> str | None:
    """Rewrite the caches from the store; a message if they could not be written."""
    try:
        ForestIndex.build(state, state.dim).save(directory)
    except (OSError, RuntimeError) as e:
        return f"the index cache in {directory} could not be rewritten: {e}"
    return None


def load_problem(exc: Exception) -> str:
    return str(exc) if isinstance(exc, StoreError) else f"the state cannot be loaded ({type(exc).__name__}: {exc})"
