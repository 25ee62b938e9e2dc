"""`memforest check`: every finding about a user's store, never a crash.

The database (file, SQLite integrity, schema version), the state it holds (tree structure,
placements, facts, vector widths) and the resident indexes (version, rows, a checksum of the
vectors against the store). A damaged database is reported with its path and left as it is; damaged
or stale indexes are dropped and rebuilt from it. What a sound store lacks without being damaged
(the sentence vectors of cells written before the store kept them: queries embed those sentences
themselves) is a note, which `ok` does not count."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from memforest.errors import MemForestError, StoreError, error_line
from memforest.index.forest_index import ForestIndex
from memforest.routing import entities
from memforest.state import UserState
from memforest.store.backfill import missing_sentences
from memforest.store.db import UserDB
from memforest.store.integrity import database_problems, index_findings, vector_problems
from memforest.store.space import lacks_room
from memforest.trees.memtree import TreeInvariantError


@dataclass
class CacheCheck:
    """What a check of the cache files beside a database found wrong, what it checked and what it did."""

    findings: list[str] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)
    done: list[str] = field(default_factory=list)


def check_store(user: str, db: UserDB, index: ForestIndex | None,
                cache_findings: Callable[[UserState], CacheCheck] | None = None) -> dict[str, Any]:
    """`ok` is whether the database is sound; `problems` lists what is wrong with it, `cache` what
    was wrong with the resident indexes `index` (the caller then drops them: `index_rebuilt`) and,
    with `cache_findings`, with the cache files beside the database (rebuilt by it: `caches_rebuilt`);
    `checked` says what was checked (and found), `done` what was rebuilt or removed."""
    report: dict[str, Any] = {"user": user, "path": str(db.path), "ok": False, "problems": [], "cache": [],
                              "index_rebuilt": False, "caches_rebuilt": False, "checked": [], "done": [],
                              "notes": []}
    checked: list[str] = report["checked"]
    problems = database_problems(db.path)
    checked.append("database file, SQLite integrity and schema")
    state = None
    if not problems:
        state, problems = _loaded(user, db)
    if state is not None:
        try:
            problems += vector_problems(state)
            if not problems:
                problems += state_problems(state)
        except Exception as e:  # a finding, never a crash
            problems.append(f"{db.path}: the stored state cannot be checked ({_one_line(e)})")
        if not problems:
            report.update(version=state.version, trees=len(state.trees), facts=len(state.facts))
        checked.append(f"stored state: vector widths, tree structure, placements and facts "
                       f"({len(state.trees)} trees, {len(state.facts)} facts)")
    if state is not None and not problems:
        report["notes"] += _sentence_notes(db, checked)
        _check_caches(report, state, index, cache_findings)
    report["problems"], report["ok"] = problems, not problems
    return report


def _sentence_notes(db: UserDB, checked: list[str]) -> list[str]:
    """A note when cells lack their sentence rows (`memforest.store.backfill`): not damage, since a
    query embeds their sentences itself, but each such query pays for it."""
    try:
        with db.read() as con:
            cells, missing = missing_sentences(con)
    except Exception as e:  # a finding, never a crash
        return [f"the cells' sentence vectors cannot be counted ({_one_line(e)})"]
    checked.append(f"cell sentence vectors: {cells - missing} of {cells} cells have their row")
    if not missing:
        return []
    return [f"{missing} of {cells} cells were stored without their sentence vectors (by an older MemForest): "
            "queries embed those sentences themselves; `memforest migrate` stores them"]


def _check_caches(report: dict[str, Any], state: UserState, index: ForestIndex | None,
                  cache_findings: Callable[[UserState], CacheCheck] | None) -> None:
    """The resident indexes and the cache files of a sound store, into `report`."""
    if index is None:
        report["checked"].append("resident indexes: none loaded in this process")
    else:
        try:
            report["cache"] = index_findings(index, state)
        except Exception as e:
            report["cache"] = [f"the resident indexes cannot be compared with the store ({_one_line(e)})"]
        report["index_rebuilt"] = bool(report["cache"])
        report["checked"].append("resident indexes against the store")
        if report["index_rebuilt"]:
            report["done"].append("resident indexes dropped (built from the store at the next read)")
    if cache_findings is not None:
        try:
            files = cache_findings(state)
        except Exception as e:
            files = CacheCheck([f"the cache files cannot be checked ({_one_line(e)})"])
        report["cache"] = [*report["cache"], *files.findings]
        report["checked"] += files.checked
        report["done"] += files.done
        report["caches_rebuilt"] = bool(files.findings)


def store_problems(user: str, db: UserDB) -> list[str]:
    """What is wrong with the database (file, integrity, schema, rows, vectors, trees), caches left
    alone: the diagnosis of an operation that failed unexpectedly."""
    problems = database_problems(db.path)
    if problems:
        return problems
    try:
        state = db.load(user)
    except StoreError as e:
        return [str(e)]
    return vector_problems(state) or state_problems(state)


def _loaded(user: str, db: UserDB) -> tuple[UserState | None, list[str]]:
    """The stored state, or None and why it cannot be loaded (a finding, never a crash)."""
    try:
        return db.load(user), []
    except StoreError as e:
        return None, [str(e)]
    except Exception as e:
        return None, [f"{db.path}: the stored state cannot be loaded ({_one_line(e)})"]


def damaged(exc: BaseException, user: str, db: UserDB) -> BaseException:
    """A StoreError naming the damage when an unexpected failure comes from a damaged store, else `exc`.
    Only a check of the file finds damage: a failure that is already a MemForestError (a model's, a
    refused input), or one where there is no file to check, is returned as it is."""
    if isinstance(exc, MemForestError) or not isinstance(exc, Exception) or not db.path.is_file():
        return exc
    room = lacks_room(db.path, exc) if isinstance(exc, OSError) else None
    if room is not None:  # a write found no room (a cache file, a temporary one): nothing is damaged
        return StoreError(f"user {user!r}: no space left to write beside {db.path}: {room} "
                          f"({error_line(exc, _MAX_ERROR_CHARS)}); nothing was written: free space and retry")
    try:
        problems = store_problems(user, db)
    except Exception:  # the diagnosis must never hide the failure it explains
        return exc
    if not problems:
        return exc
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    if str(db.path) in problems[0]:  # a finding about the file, which says what it is and what to do
        return StoreError(f"user {user!r}: {problems[0]}{more}")
    return StoreError(f"the memory of user {user!r} in {db.path} is damaged: {problems[0]}{more}; "
                      "run `memforest check` and restore it from a backup")


def _one_line(exc: BaseException) -> str:
    return error_line(exc, _MAX_ERROR_CHARS)


_MAX_ERROR_CHARS = 200


def state_problems(state: UserState) -> list[str]:
    """Tree structure, every node's summary and vector, placements and facts."""
    problems: list[str] = []
    for tid, info in state.trees.items():
        try:
            info.tree.validate()
        except (TreeInvariantError, KeyError, TypeError) as e:
            problems.append(f"{tid}: {e}")
            continue
        for nid in info.tree.nodes:
            if (tid, nid) not in state.nodes:
                problems.append(f"{tid} node {nid}: no summary or embedding")
        problems += _placements(state, tid)
    problems += _facts(state)
    return problems


def _placements(state: UserState, tid: str) -> list[str]:
    info = state.trees[tid]
    items = set(info.tree.placements())
    if info.family == "session":
        expected = set(state.session_cells.get(info.label, []))
        return [] if items == expected else [f"{tid}: leaves differ from the session's cells"]
    missing = sorted(i for i in items if i not in state.facts)
    return [f"{tid}: leaf for unknown fact {m}" for m in missing[:5]]


def _facts(state: UserState) -> list[str]:
    problems = []
    user_tree = state.trees.get(entities.USER_TREE)
    in_scene = {item for s in state.scenes.values() if s.tree_id in state.trees
                for item in state.trees[s.tree_id].tree.placements()}
    state.read_facts()
    for f in state.facts.values():
        if not f.occurrences:
            problems.append(f"fact {f.id} has no occurrence")
        for o in f.occurrences:
            if o.session_id not in state.sessions or o.cell_id not in state.cells:
                problems.append(f"fact {f.id}: occurrence in missing session or cell {o.cell_id}")
        if f.origin == "user" and (user_tree is None or f.id not in user_tree.tree):
            problems.append(f"fact {f.id}: user fact missing from {entities.USER_TREE}")
        if f.id not in in_scene:
            problems.append(f"fact {f.id}: in no scene")
    for sid, scene in state.scenes.items():
        if scene.tree_id not in state.trees or len(state.trees[scene.tree_id].tree) != scene.size:
            problems.append(f"{sid}: size {scene.size} differs from its tree")
    for sid, cells in state.session_cells.items():
        if sid not in state.sessions:
            problems.append(f"cells {cells[:3]} belong to missing session {sid}")
        elif cells and f"session:{sid}" not in state.trees:
            problems.append(f"session {sid} has no session tree")
    return problems
