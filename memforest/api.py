"""MemForest: the façade over a store directory holding one SQLite database per user.

Every operation is a short wrapper around one write protocol (`_writer`) or one read of the resident
version; the versions held in memory are kept by `versions.resident_versions`, and an operation's
commit and the publishing of its version by `versions.committer`."""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from memforest.check import check_store, damaged
from memforest.config import LLM_QUERY_MODES, QUERY_MODES, MemForestConfig, QueryConfig
from memforest.errors import InputError, StoreError, configured_key, redact
from memforest.lifecycle import delete_session
from memforest.llm.base import ChatModel, Embedder
from memforest.llm.calllog import CallLog
from memforest.llm.factory import build_chat_model, build_embedder, checked_build
from memforest.llm.retrying import RetryingEmbedder
from memforest.llm.scheduler import Scheduler
from memforest.merge import merge_into
from memforest.refresh import RefreshStats, refresh
from memforest.resident.heap import freeze_if_large
from memforest.retrieval.query import run_query
from memforest.retrieval.results import QueryResult
from memforest.sessions import check_id, parse_session, parse_sessions
from memforest.state import ChangeSet, UserState
from memforest.store.db import UserDB
from memforest.store.folders import make_folder, remove_folder
from memforest.store.lock import write_lock
from memforest.store.versions import leased
from memforest.timeutil import iso_minute, parse_time
from memforest.timing import Clock
from memforest.types import Session
from memforest.versions.committer import Committer
from memforest.versions.resident_versions import ResidentVersions
from memforest.versions.snapshot import Snapshot
from memforest.write import IngestReport, ingest_sessions, refresh_pending

log = logging.getLogger(__name__)


class MemForest:
    """Persistent memory for many users in one directory.

    Models are injected (`llm`, `embedder`) or built from `config`. `llm=None` with
    `config.tree.summary_mode == "extractive"` and `generate=False` gives the generator-free write path.
    A model that fails during an operation fails it with a ModelError (after the retries of
    `config.llm` and `config.embedder`), and the store is left as it was."""

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
        self._embedder = (RetryingEmbedder.around(embedder, self.config.embedder) if embedder is not None
                          else None)
        for key_env in {self.config.llm.api_key_env, self.config.embedder.api_key_env}:
            configured_key(key_env)  # redacted from every message and log
        self.log = call_log if call_log is not None else CallLog()
        self._llm = llm
        self._scheduler: Scheduler | None = None
        self.generate = generate
        self._lock = threading.Lock()  # the models are built once
        self._resident = ResidentVersions(self.config)
        self._committer = Committer(self.config, self._resident)
        self._query_ids = itertools.count(1)

    # ---- models -------------------------------------------------------------------------------

    @property
    def embedder(self) -> Embedder:
        with self._lock:
            if self._embedder is None:
                built = checked_build("embedder", self.config.embedder.backend,
                                      lambda: build_embedder(self.config.embedder))
                self._embedder = RetryingEmbedder.around(built, self.config.embedder)
            return self._embedder

    @property
    def scheduler(self) -> Scheduler | None:
        if not self.generate:
            return None
        with self._lock:
            if self._scheduler is None:
                llm = self._llm or checked_build("chat model", self.config.llm.backend,
                                                 lambda: build_chat_model(self.config.llm))
                self._llm = llm
                c = self.config.llm
                self._scheduler = Scheduler(llm, c.concurrency, self.log, c.max_retries, c.json_retries,
                                            c.backoff_s)
            return self._scheduler

    def close(self) -> None:
        self._committer.close()
        self._resident.close()
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
        return (sorted(p.name for p in base.iterdir() if (p / "memory.sqlite").exists()) if base.exists()
                else [])

    def _open_db(self, user: str, create: bool) -> UserDB:
        """The user's database; an existing one is left for the caller to check (`UserDB.validate`,
        which also reads its version). Without `create`, a missing one is a StoreError. With it, the
        models are built and the new user's folder made; the database itself is created by the writer,
        under the write lock, so that a configuration that cannot build the models leaves nothing behind."""
        directory = self.user_dir(user)
        db = UserDB(directory / "memory.sqlite")
        if db.path.exists():
            return db
        if not create:
            raise StoreError(f"no memory for user {user!r} in {self.root}")
        _ = self.embedder, self.scheduler
        make_folder(directory)
        return db

    def snapshot(self, user: str) -> Snapshot:
        """The last committed version of `user`'s memory: the resident one, reloaded when another
        process committed since. Never waits for a writer of this process. While the snapshot (or
        its state) is referenced it reads its own version, whatever is committed since; a version
        read on demand keeps the store's snapshot open meanwhile (`memforest.store.versions`)."""
        return self._resident.held(user, self._open_db(user, create=False))

    def release_superseded(self) -> int:
        """End the store snapshots of the versions this memory holds that other processes' commits
        have superseded, as far as nothing needs them (a version still referenced reads in what it
        would read first), and checkpoint the log: an idle memory then keeps no commit of another
        process in the log. Operations do this for their user; a background thread calls it every
        `MemForestConfig.release_check_s` seconds. Returns how many snapshots ended."""
        return self._resident.release_superseded()

    def wait_settled(self, timeout: float | None = None) -> bool:
        """Wait for the background work loading a large memory started (its heap's collapse into
        huge pages, during which operations run but read memory more slowly) to finish; returns
        whether it has (False when `timeout` seconds passed first)."""
        return self._resident.wait_settled(timeout)

    @contextmanager
    def _writer(self, user: str, create: bool = True, clock: Clock | None = None, whole: bool = False
                ) -> Iterator[tuple[UserDB, UserState, ChangeSet]]:
        """Serialise writers of one user (across threads and processes), hand out the next version of
        the committed state (copy-on-write; `whole=True`: a private full copy read from the store),
        and commit and publish the ChangeSet the block fills in. The store's schema and embedder are
        checked against this configuration before anything is read or written. A new user's store is
        created under the lock; when the operation fails, it is removed with its folder, so a failed
        first write leaves nothing behind."""
        clock = clock or Clock()
        db = self._open_db(user, create)
        directory = self.user_dir(user)
        try:
            with write_lock(directory / "write.lock", user, self.config.limits.lock_wait_s):
                fresh = False
                try:
                    if create and not db.path.exists():
                        fresh = db.create(self.embedder.name, self.embedder.dim)
                    con = self._committer.held_connection(user, db)
                    if con is not None:  # this writer alone uses it now: its page cache stays warm
                        db = UserDB(db.path, con)
                    clock.lap("lock")
                    version = db.validate(self.embedder.name, self.embedder.dim)
                    base = self._resident.current(user, db, version)
                    state = db.load(user) if whole else base.state.fork()
                    changes = ChangeSet()
                    clock.lap("load")
                    with leased(base.state, f"user {user!r}"):  # its snapshot stays open for the write
                        yield db, state, changes
                        self._committer.commit(user, db, base, state, changes, clock, whole)
                except BaseException as e:
                    if fresh:
                        _discard_new_store(db)
                        self._resident.forget(user)
                    if not db.path.exists():  # under the lock: no writer is creating it meanwhile
                        remove_folder(directory, lock_file=True)
                    diagnosis = damaged(e, user, db)
                    if diagnosis is not e:
                        raise diagnosis from e
                    raise
        except BaseException:
            if create and not db.path.exists():  # the lock was not taken: only empty folders go
                remove_folder(directory, lock_file=False)
            raise

    # ---- write path -------------------------------------------------------------------------------

    def ingest_sessions(self, user: str, sessions: Sequence[Mapping[str, Any] | Session]) -> IngestReport:
        """Ingest several sessions as one atomic operation; all cells are extracted in parallel waves."""
        clock = Clock()
        check_id(user, "user id")
        if not isinstance(sessions, (list, tuple)):
            raise InputError(f"expected a list of sessions, got {type(sessions).__name__}")
        parsed = parse_sessions(sessions, self.config.limits)
        if not parsed:
            raise InputError("no sessions to ingest")
        start = len(self.log)
        clock.lap("parse")
        with self._writer(user, clock=clock) as (_, state, changes):
            changes.operation = {"kind": "ingest", "sessions": [s.session_id for s in parsed]}
            report = ingest_sessions(state, parsed, self.config, self.scheduler, self.embedder, changes)
            clock.merge(report.timings)
        report.version = state.version
        report.llm_calls = len(self.log) - start
        report.timings = clock.total()
        return report

    def ingest_session(self, user: str, session_id: str, turns: list[Mapping[str, Any]],
                       timestamp: Any = None) -> IngestReport:
        session = parse_session({"session_id": session_id, "timestamp": timestamp or
                                 (turns[0].get("timestamp") if turns and isinstance(turns[0], Mapping)
                                  else None),
                                 "turns": turns}, self.config.limits)
        return self.ingest_sessions(user, [session])


    # ---- lifecycle ----------------------------------------------------------------------------------

    def delete_session(self, user: str, session_id: str) -> dict[str, Any]:
        """Remove a session and everything derived only from it; refresh only invalidated paths."""
        clock = Clock()
        with self._writer(user, create=False, clock=clock) as (db, state, ch):
            ch.operation = {"kind": "delete_session", "session": session_id}
            report = delete_session(state, session_id, self.config, ch, db.facts_of_session(session_id))
            clock.lap("delete")
            report["refresh"] = asdict(self._refresh(state, ch, "delete"))
            clock.lap("refresh")
        report["version"], report["timings"] = state.version, clock.total()
        return report

    def correct_session(self, user: str, session: Mapping[str, Any]) -> dict[str, Any]:
        """Replace a stored session's turns: delete and re-ingest in one transaction."""
        clock = Clock()
        parsed = parse_session(session, self.config.limits)
        clock.lap("parse")
        with self._writer(user, create=False, clock=clock) as (db, state, ch):
            ch.operation = {"kind": "correct_session", "session": parsed.session_id}
            report = delete_session(state, parsed.session_id, self.config, ch,
                                    db.facts_of_session(parsed.session_id))
            clock.lap("delete")
            ingest = ingest_sessions(state, [parsed], self.config, self.scheduler, self.embedder, ch)
            clock.merge(ingest.timings)
            report["ingest"] = ingest.to_dict()
        report["version"], report["timings"] = state.version, clock.total()
        return report

    def merge(self, sources: Sequence[str], target: str,
              source_store: str | Path | None = None) -> dict[str, Any]:
        """Merge the forests of `sources` (users of this store, or of `source_store`) into `target`."""
        origin = MemForest(source_store, self.config, embedder=self.embedder) if source_store else self
        states = [origin.snapshot(u).state for u in sources]
        for src in states:
            if (src.embedder, src.dim) != (self.embedder.name, self.embedder.dim):
                raise StoreError(f"source user {src.user!r} was built with embedder "
                                 f"{src.embedder} ({src.dim}-d); this configuration uses "
                                 f"{self.embedder.name} ({self.embedder.dim}-d)")
        if not source_store and target in sources:
            raise InputError("the merge target must not be one of its sources")
        reports = []
        with self._writer(target, whole=True) as (_, state, ch):
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
        with self._writer(user, create=False, whole=True) as (_, state, ch):
            ch.operation = {"kind": "refresh"}
            report = refresh_pending(state, self.config, self.scheduler, self.embedder, ch)
        return report

    def check(self, user: str) -> dict[str, Any]:
        """Every finding about the user's store: SQLite integrity, schema, tree structure, placements,
        vectors, and the resident indexes against the store (damaged ones are rebuilt from SQLite)."""
        path = self.user_dir(user) / "memory.sqlite"
        if not path.exists():
            raise StoreError(f"no memory for user {user!r} in {self.root}")
        resident = self._resident.get(user)
        report = check_store(user, UserDB(path), resident.index if resident else None,
                             self._resident.caches_of(user, UserDB(path)).findings)
        if report["index_rebuilt"]:  # the next reader rebuilds the indexes from the store
            self._resident.forget(user, only=resident)
        return report

    def _refresh(self, state: UserState, ch: ChangeSet, op: str) -> RefreshStats:
        return refresh(state, set(ch.trees), self.scheduler, self.embedder, self.config.tree, ch,
                       self.config.degraded_ok, {"op": op, "user": state.user})

    # ---- read path -------------------------------------------------------------------------------

    def query(self, user: str, question: str, date: Any = None, mode: str | None = None,
              answer: bool = True, rank_sessions: int | None = None) -> QueryResult:
        """Answer `question` from `user`'s last committed memory, with evidence and a trace.
        `date` is the reference date (default: the latest stored session's date); `rank_sessions`
        (default `QueryConfig.rank_sessions`) continues the ranking past the served evidence until it
        names that many sessions (`QueryResult.ranked_beyond`)."""
        clock = Clock()
        if not isinstance(question, str) or not question.strip():
            raise InputError("the question is empty")
        cfg = replace(self.config.query, mode=mode or self.config.query.mode)
        if rank_sessions is not None:
            if isinstance(rank_sessions, bool) or not isinstance(rank_sessions, int) or rank_sessions < 0:
                raise InputError(f"rank_sessions must be a whole number >= 0, not {rank_sessions!r}")
            cfg = replace(cfg, rank_sessions=rank_sessions)
        if cfg.mode not in QUERY_MODES:
            raise InputError(f"unknown query mode {cfg.mode!r} ({', '.join(QUERY_MODES)})")
        snap = self._resident.leased(user, self._open_db(user, create=False))
        try:
            return self._answer(user, snap, question, date, cfg, answer, clock)
        finally:
            if snap.state.tree_source is not None:
                snap.state.tree_source.unlease()

    def _answer(self, user: str, snap: Snapshot, question: str, date: Any, cfg: QueryConfig, answer: bool,
                clock: Clock) -> QueryResult:
        if (snap.state.embedder, snap.state.dim) != (self.embedder.name, self.embedder.dim):
            raise StoreError(f"user {user!r} was built with embedder {snap.state.embedder} "
                             f"({snap.state.dim}-d); this configuration uses {self.embedder.name} "
                             f"({self.embedder.dim}-d)")
        latest = snap.state.latest_session_time()
        if latest is None:
            raise StoreError(f"the memory of user {user!r} is empty")
        ref = parse_time(date, "query date") if date not in (None, "") else latest
        tags = {"op": "query", "user": user, "query": next(self._query_ids)}
        needs_llm = answer or cfg.mode in LLM_QUERY_MODES
        clock.lap("snapshot")  # the store's version checked, the resident version taken
        try:
            result = run_query(snap, question, iso_minute(ref), cfg, self.embedder,
                               self.scheduler if needs_llm else None, self.log, answer, tags,
                               self.config.tree.leaf_words)
        except Exception as e:  # an unexpected failure: a StoreError when the store is found damaged
            diagnosis = damaged(e, user, UserDB(self.user_dir(user) / "memory.sqlite"))
            if diagnosis is not e:
                raise diagnosis from e
            raise
        clock.merge(result.trace["latency"])
        if freeze_if_large(len(snap.state.nodes), self.config.heap_freeze_nodes):
            clock.lap("collect")
        result.trace["latency"] = clock.total()
        return result


def _discard_new_store(db: UserDB) -> None:
    """Remove the database a failed first write created, so a rejected first write leaves nothing."""
    try:
        db.discard_if_empty()
    except (OSError, StoreError) as e:
        log.warning("memforest: warning: could not remove the new empty store %s: %s", db.path,
                    redact(str(e)))
