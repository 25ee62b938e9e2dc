"""MemForest: the façade over a store directory holding one SQLite database per user."""

from __future__ import annotations

import fcntl
import itertools
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from memforest.check import check_state
from memforest.config import LLM_QUERY_MODES, QUERY_MODES, MemForestConfig
from memforest.errors import InputError, StoreError
from memforest.index.forest_index import ForestIndex
from memforest.lifecycle import delete_session
from memforest.llm.base import ChatModel, Embedder
from memforest.llm.calllog import CallLog
from memforest.llm.factory import build_chat_model, build_embedder
from memforest.llm.scheduler import Scheduler
from memforest.merge import merge_into
from memforest.refresh import RefreshStats, refresh
from memforest.retrieval.query import run_query
from memforest.retrieval.results import QueryResult
from memforest.sessions import check_id, parse_session, parse_sessions
from memforest.snapshot import Snapshot
from memforest.state import ChangeSet, UserState
from memforest.store.db import UserDB
from memforest.timeutil import iso_minute, parse_time
from memforest.types import Session
from memforest.write import IngestReport, ingest_sessions, refresh_pending


class MemForest:
    """Persistent memory for many users in one directory.

    Models are injected (`llm`, `embedder`) or built from `config`. `llm=None` with
    `config.tree.summary_mode == "extractive"` and `generate=False` gives the generator-free write path."""

    def __init__(
        self,
        path: str | Path,
        config: MemForestConfig | None = None,
        llm: ChatModel | None = None,
        embedder: Embedder | None = None,
        call_log: CallLog | None = None,
        generate: bool = True,
    ) -> None:
        self.root = Path(path)
        self.config = (config or MemForestConfig()).validate()
        self._owns = {"llm": llm is None, "embedder": embedder is None}  # close only what we built
        self._embedder = embedder
        self.log = call_log if call_log is not None else CallLog()
        self._llm = llm
        self._scheduler: Scheduler | None = None
        self.generate = generate
        self._snapshots: dict[str, Snapshot] = {}
        self._lock = threading.Lock()
        self._query_ids = itertools.count(1)
        self.last_commit: dict[str, float] = {}

    # ---- models -------------------------------------------------------------------------------

    @property
    def embedder(self) -> Embedder:
        with self._lock:
            if self._embedder is None:
                self._embedder = build_embedder(self.config.embedder)
            return self._embedder

    @property
    def scheduler(self) -> Scheduler | None:
        if not self.generate:
            return None
        with self._lock:
            if self._scheduler is None:
                llm = self._llm or build_chat_model(self.config.llm)
                self._llm = llm
                c = self.config.llm
                self._scheduler = Scheduler(llm, c.concurrency, self.log, c.max_retries, c.json_retries, c.backoff_s)
            return self._scheduler

    def close(self) -> None:
        if self._scheduler is not None:
            self._scheduler.close()
        if self._llm is not None and self._owns["llm"]:
            self._llm.close()
        if self._embedder is not None and self._owns["embedder"]:
            self._embedder.close()

    def __enter__(self) -> MemForest:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- users ----------------------------------------------------------------------------------

    def user_dir(self, user: str) -> Path:
        return self.root / "users" / check_id(user, "user id")

    def users(self) -> list[str]:
        base = self.root / "users"
        return sorted(p.name for p in base.iterdir() if (p / "memory.sqlite").exists()) if base.exists() else []

    def _db(self, user: str, create: bool) -> UserDB:
        directory = self.user_dir(user)
        path = directory / "memory.sqlite"
        if not path.exists():
            if not create:
                raise StoreError(f"no memory for user {user!r} in {self.root}")
            directory.mkdir(parents=True, exist_ok=True)
        db = UserDB(path)
        if create:
            db.create(self.embedder.name, self.embedder.dim)
        return db

    def snapshot(self, user: str) -> Snapshot:
        """The last committed version of `user`'s memory (reloaded when another process committed)."""
        db = self._db(user, create=False)
        version = db.version()
        snap = self._snapshots.get(user)
        if snap is None or snap.state.version != version:
            state = db.load(user)
            index, _ = ForestIndex.open(self.user_dir(user) / "index", state, state.dim)
            snap = Snapshot(state, index)
            self._snapshots[user] = snap
        return snap

    @contextmanager
    def _writer(self, user: str, create: bool = True) -> Iterator[tuple[UserDB, UserState, ChangeSet]]:
        """Serialise writers of one user (across threads and processes), hand out a private copy
        of the committed state, and commit the ChangeSet the block fills in."""
        db = self._db(user, create=create)
        lock_path = self.user_dir(user) / "write.lock"
        with lock_path.open("a") as lock_file:
            fcntl.flock(lock_file, fcntl.LOCK_EX)
            try:
                state = db.load(user)
                changes = ChangeSet()
                yield db, state, changes
                self._commit(user, db, state, changes)
            finally:
                fcntl.flock(lock_file, fcntl.LOCK_UN)

    def _commit(self, user: str, db: UserDB, state: UserState, ch: ChangeSet) -> None:
        removed_nodes: dict[str, list[int]] = {}
        for tid in sorted(ch.trees):
            if tid in state.trees:
                changed, removed = state.trees[tid].tree.take_changes()
                ch.nodes |= {(tid, n.id) for n in changed}
                ch.deleted_nodes |= {(tid, n) for n in removed}
                removed_nodes[tid] = removed
                for n in removed:
                    state.nodes.pop((tid, n), None)
        old = self._snapshots.get(user)
        removed_rowids = _removed_tree_rowids(old, ch)
        base_version = state.version
        t = time.perf_counter()
        db.commit(state, ch, expected_version=base_version)
        self.last_commit = {"commit": round(time.perf_counter() - t, 4)}
        t = time.perf_counter()
        if old is not None and old.index.version == base_version:
            index = old.index.copy()  # the published snapshot's index stays untouched
            for tid in removed_rowids:
                removed_nodes[tid] = [n for (t, n) in old.index.node_key.values() if t == tid]
            index.apply(state, ch, removed_nodes, removed_rowids)
        else:
            index = ForestIndex.build(state, state.dim)
        index.save(self.user_dir(user) / "index")
        self._snapshots[user] = Snapshot(state, index)
        self.last_commit["index"] = round(time.perf_counter() - t, 4)

    # ---- write path -------------------------------------------------------------------------------

    def ingest_sessions(self, user: str, sessions: Sequence[Mapping[str, Any] | Session]) -> IngestReport:
        """Ingest several sessions as one atomic operation; all cells are extracted in parallel waves."""
        check_id(user, "user id")
        if not isinstance(sessions, (list, tuple)):
            raise InputError(f"expected a list of sessions, got {type(sessions).__name__}")
        typed = all(isinstance(s, Session) for s in sessions)
        parsed = list(sessions) if typed else parse_sessions(sessions)
        if not parsed:
            raise InputError("no sessions to ingest")
        start = len(self.log)
        with self._writer(user) as (_, state, changes):
            changes.operation = {"kind": "ingest", "sessions": [s.session_id for s in parsed]}
            report = ingest_sessions(state, parsed, self.config, self.scheduler, self.embedder, changes)
        report.version = self._snapshots[user].state.version
        report.llm_calls = len(self.log) - start
        report.timings.update(self.last_commit)
        return report

    def ingest_session(self, user: str, session_id: str, turns: list[Mapping[str, Any]],
                       timestamp: Any = None) -> IngestReport:
        session = parse_session({"session_id": session_id, "timestamp": timestamp or
                                 (turns[0].get("timestamp") if turns and isinstance(turns[0], Mapping) else None),
                                 "turns": turns})
        return self.ingest_sessions(user, [session])


    # ---- lifecycle ----------------------------------------------------------------------------------

    def delete_session(self, user: str, session_id: str) -> dict[str, Any]:
        """Remove a session and everything derived only from it; refresh only invalidated paths."""
        with self._writer(user, create=False) as (_, state, ch):
            ch.operation = {"kind": "delete_session", "session": session_id}
            report = delete_session(state, session_id, self.config, ch)
            report["refresh"] = asdict(self._refresh(state, ch, "delete"))
        return report

    def correct_session(self, user: str, session: Mapping[str, Any]) -> dict[str, Any]:
        """Replace a stored session's turns: delete and re-ingest in one transaction."""
        parsed = parse_session(session)
        with self._writer(user, create=False) as (_, state, ch):
            ch.operation = {"kind": "correct_session", "session": parsed.session_id}
            report = delete_session(state, parsed.session_id, self.config, ch)
            report["ingest"] = ingest_sessions(state, [parsed], self.config, self.scheduler, self.embedder,
                                               ch).to_dict()
        return report

    def merge(self, sources: Sequence[str], target: str, source_store: str | Path | None = None) -> dict[str, Any]:
        """Merge the forests of `sources` (users of this store, or of `source_store`) into `target`."""
        origin = MemForest(source_store, self.config, embedder=self.embedder) if source_store else self
        states = [origin.snapshot(u).state for u in sources]
        if not source_store and target in sources:
            raise InputError("the merge target must not be one of its sources")
        reports = []
        with self._writer(target) as (_, state, ch):
            ch.operation = {"kind": "merge", "sources": list(sources)}
            tags = {"op": "merge", "user": target}
            for src in states:
                reports.append(merge_into(state, src, self.config, self.scheduler, ch, tags))
            refreshed = self._refresh(state, ch, "merge")
        return {"target": target, "sources": reports, "refresh": asdict(refreshed)}

    def refresh(self, user: str) -> IngestReport:
        """Redo what degraded mode left undone: failed extractions and extractive fallback summaries."""
        if self.scheduler is None:
            raise InputError("refresh needs a chat model")
        with self._writer(user, create=False) as (_, state, ch):
            ch.operation = {"kind": "refresh"}
            report = refresh_pending(state, self.config, self.scheduler, self.embedder, ch)
        return report

    def check(self, user: str) -> dict[str, Any]:
        """Structural invariants, placements and index rows against store rows."""
        db = self._db(user, create=False)
        state = db.load(user)
        return check_state(state, self.user_dir(user) / "index")

    def _refresh(self, state: UserState, ch: ChangeSet, op: str) -> RefreshStats:
        return refresh(state, set(ch.trees), self.scheduler, self.embedder, self.config.tree, ch,
                       self.config.degraded_ok, {"op": op, "user": state.user})

    # ---- read path -------------------------------------------------------------------------------

    def query(self, user: str, question: str, date: Any = None, mode: str | None = None,
              answer: bool = True) -> QueryResult:
        """Answer `question` from `user`'s last committed memory, with evidence and a trace.
        `date` is the reference date (default: the latest stored session's date)."""
        if not isinstance(question, str) or not question.strip():
            raise InputError("the question is empty")
        cfg = replace(self.config.query, mode=mode or self.config.query.mode)
        if cfg.mode not in QUERY_MODES:
            raise InputError(f"unknown query mode {cfg.mode!r} ({', '.join(QUERY_MODES)})")
        snap = self.snapshot(user)
        if (snap.state.embedder, snap.state.dim) != (self.embedder.name, self.embedder.dim):
            raise StoreError(f"user {user!r} was built with embedder {snap.state.embedder} ({snap.state.dim}-d); "
                             f"this configuration uses {self.embedder.name} ({self.embedder.dim}-d)")
        if not snap.state.sessions:
            raise StoreError(f"the memory of user {user!r} is empty")
        ref = parse_time(date, "query date") if date not in (None, "") else max(s.time for s in snap.state.sessions.values())
        tags = {"op": "query", "user": user, "query": next(self._query_ids)}
        needs_llm = answer or cfg.mode in LLM_QUERY_MODES
        return run_query(snap, question, iso_minute(ref), cfg, self.embedder,
                         self.scheduler if needs_llm else None, self.log, answer, tags)


def _removed_tree_rowids(old: Snapshot | None, ch: ChangeSet) -> dict[str, int]:
    if old is None:
        return {}
    return {t: old.state.trees[t].rowid for t in ch.deleted_trees if t in old.state.trees}
