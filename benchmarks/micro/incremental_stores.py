"""The base stores of the incremental suite (`incremental`): one user's stream of LongMemEval-format
sessions ingested with the scripted model and the hashing embedder, each model call timed
(`ModelClock`), built once per parameters under results/bench/ (in a child process when missing) and
left with the caches a process that queried them leaves."""

from __future__ import annotations

import contextlib
import multiprocessing
import random
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.datasets.longmemeval import format_date, parse_date
from benchmarks.datasets.synthetic_haystack import filler_session
from benchmarks.datasets.synthetic_text import TOPIC_NAMES
from benchmarks.micro.profile_responder import ProfileResponder
from memforest.api import MemForest
from memforest.config import MemForestConfig, with_host_policy
from memforest.index import lexical_cache, partition_cache, tree_rows_cache
from memforest.index.lexical_cache import FILE_NAME as LEXICAL_CACHE
from memforest.index.partition_cache import FILE_NAME as PARTITIONS_CACHE
from memforest.index.tree_rows_cache import FILE_NAME as TREE_ROWS_CACHE
from memforest.llm.base import ChatRequest, EmbedKind
from memforest.llm.testing import HashEmbedder, Responder, ScriptedChatModel, rule_responder
from memforest.resident.cache_file import CHECKSUM, VERIFIED, cache_dir, stamp_if_whole
from memforest.store.schema import SCHEMA_VERSION

USER = "bench"
# the cache formats, their checksum and the schema a base store was last opened with (a store of an
# older schema is migrated by its first open: done on the base store, once, not in each measured copy's)
CACHE_FORMATS = " ".join([*(f"{m.KIND}:{m.FORMAT}" for m in (lexical_cache, partition_cache,
                                                               tree_rows_cache)),
                          f"checksum:{CHECKSUM}", f"schema:{SCHEMA_VERSION}"])
START = datetime(2021, 1, 4, 9, 0)
HOURS_APART = 19  # between sessions, up to DAILY_UNTIL of them
# Past this many sessions they come an hour apart: 10^5 sessions about a day apart would run past the
# year 2199 that session dates may name (the stream before it is unchanged)
DAILY_UNTIL = 80_000


def session_hours(i: int) -> int:
    """Hours from START to the i-th session of the stream (before its minutes)."""
    return HOURS_APART * i if i < DAILY_UNTIL else HOURS_APART * DAILY_UNTIL + (i - DAILY_UNTIL)


def longmemeval_sessions(n: int, offset: int, turns: int, seed: int) -> list[dict[str, Any]]:
    """Sessions as a LongMemEval haystack holds them (ids, dates `2023/05/20 (Sat) 02:21`, turns),
    converted to MemForest sessions; realistic turn lengths, about one session a day (an hour apart
    past `DAILY_UNTIL`)."""
    out = []
    for i in range(offset, offset + n):
        rng = random.Random(seed * 1_000_003 + i)
        date = format_date(START + timedelta(hours=session_hours(i), minutes=rng.randint(0, 59)))
        turns_raw = filler_session(rng, rng.choice(TOPIC_NAMES), turns)
        out.append({"session_id": f"s{i:06d}", "timestamp": parse_date(date).isoformat(),
                    "turns": [{"role": t["role"], "content": t["content"]} for t in turns_raw]})
    return out


class ModelClock:
    """Seconds spent inside model calls (the embedder's and the chat model's), summed over threads:
    the scripted model and the hashing embedder are cheap but not free, and the per-operation cost
    the suite compares across sizes is the memory's own, model calls excluded."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._lock = threading.Lock()

    def add(self, seconds: float) -> None:
        with self._lock:
            self.seconds += seconds


class _TimedEmbedder(HashEmbedder):
    def __init__(self, dim: int, clock: ModelClock) -> None:
        super().__init__(dim)
        self.clock = clock

    def embed(self, texts: Sequence[str], kind: EmbedKind = "passage") -> np.ndarray:
        t = time.perf_counter()
        try:
            return super().embed(texts, kind)
        finally:
            self.clock.add(time.perf_counter() - t)


def _timed(responder: Responder, clock: ModelClock) -> Responder:
    def answer(request: ChatRequest) -> str | dict[str, Any] | Exception:
        t = time.perf_counter()
        try:
            return responder(request)
        finally:
            clock.add(time.perf_counter() - t)
    return answer


EXTRACTORS: dict[str, tuple[str, Callable[[], Responder]]] = {
    # name -> (base-store prefix, responder): `profile` is a real memory's proportions; `rule` extracts
    # the synthetic text's stock sentences (a few thousand facts, some said thousands of times)
    "profile": ("incremental_profile", ProfileResponder),
    "rule": ("incremental_base", lambda: rule_responder),
}


def open_forest(path: Path, clock: ModelClock | None = None, extractor: str = "profile",
                huge_pages: bool = True, lazy_trees: bool = True) -> MemForest:
    """The memory at `path` on the scripted model of `extractor` and the hashing embedder, both timed
    by `clock`, with the host policy (the measuring process owns its process)."""
    cfg = with_host_policy(MemForestConfig(huge_pages=huge_pages, lazy_trees=lazy_trees))  # owns its process
    clock = clock or ModelClock()
    return MemForest(path, cfg, llm=ScriptedChatModel(_timed(EXTRACTORS[extractor][1](), clock)),
                     embedder=_TimedEmbedder(cfg.embedder.dim, clock))


REOPEN_EVERY = 10_000  # sessions a base-store build ingests before it closes and reopens the store
QUESTION = "What did I say about my plans for the weekend?"  # the query a measured store answers


def base_store(root: Path, size: int, turns: int, seed: int, batch: int, extractor: str = "profile") -> Path:
    """A store holding `size` sessions (built in batches of `batch` sessions per call), cached; an
    interrupted build goes on from the sessions it committed. The build reopens the store every
    `REOPEN_EVERY` sessions, so the trees its writes read do not all stay resident (a 10^5 build)."""
    path = _store_path(root, size, turns, seed, extractor)
    while not (path / "done").exists():
        with open_forest(path, extractor=extractor) as forest:
            start = len(forest.snapshot(USER).state.sessions) if USER in forest.users() else 0
            stop = min(size, start + REOPEN_EVERY)
            for lo in range(start, stop, batch):
                forest.ingest_sessions(USER, longmemeval_sessions(min(batch, stop - lo), lo, turns, seed))
        if stop >= size:
            (path / "done").write_text(str(size))
    if not _caches_current(path):
        with open_forest(path, extractor=extractor) as forest:  # the caches a process that queried leaves
            forest.query(USER, QUESTION, answer=False)
        (path / "cache_formats").write_text(CACHE_FORMATS)
    return path


def _store_path(root: Path, size: int, turns: int, seed: int, extractor: str) -> Path:
    return root / f"{EXTRACTORS[extractor][0]}_n{size}_t{turns}_s{seed}"


def _caches_current(path: Path) -> bool:
    """Whether the base store at `path` holds its caches in the current formats (its `cache_formats`
    marker names them, and the schema)."""
    caches = cache_dir(path / "users" / USER / "memory.sqlite")
    marker = path / "cache_formats"
    return (all((caches / name).exists() for name in (LEXICAL_CACHE, TREE_ROWS_CACHE, PARTITIONS_CACHE))
            and marker.exists() and marker.read_text() == CACHE_FORMATS)


def base_store_apart(root: Path, size: int, turns: int, seed: int, batch: int,
                     extractor: str = "profile") -> Path:
    """`base_store`, built (or brought up to date) in a child process when it is not ready, so the
    measuring process's heap holds only what its measured opens make: a build's freed heap, reused
    by a later open in the same process, would hide most of that open's growth from the resident
    figures."""
    path = _store_path(root, size, turns, seed, extractor)
    if not ((path / "done").exists() and _caches_current(path)):
        child = multiprocessing.get_context("spawn").Process(
            target=base_store, args=(root, size, turns, seed, batch, extractor))
        child.start()
        child.join()
        if child.exitcode != 0:
            raise SystemExit(f"building the base store of {size} sessions failed "
                             f"(exit code {child.exitcode})")
    return base_store(root, size, turns, seed, batch, extractor)


def copy_base(base: Path, work: Path) -> None:
    """`base` copied to `work` as one consistent store: its write-ahead log checkpointed into the
    database first (refused while another process holds it open), then every file but the log and
    its index, so no file can change or vanish under the copy. The copied cache files are read whole
    once and stamped (`cache_file.stamp_if_whole`), as a first open of the copy would: a measured
    open then finds the store as a process that wrote it left it."""
    db = base / "users" / USER / "memory.sqlite"
    if db.exists():
        with contextlib.closing(sqlite3.connect(db)) as con:
            busy, _, _ = con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if busy:
            raise SystemExit(f"the base store {base} is open in another process: close it and run again")
    shutil.rmtree(work, ignore_errors=True)
    need = sum(f.stat().st_size for f in base.rglob("*")
               if f.is_file() and not f.name.endswith(("-wal", "-shm")))
    free = shutil.disk_usage(next(p for p in (work, *work.parents) if p.exists())).free
    if need > free:  # refused before the copy fills the disk (a 10^5 store takes about 30 GB)
        raise SystemExit(f"copying the base store {base} needs {need / 2**30:.1f} GiB and "
                         f"{free / 2**30:.1f} GiB is free under {work}: free space there, or measure "
                         "the base store itself (--consume-base)")
    shutil.copytree(base, work, ignore=shutil.ignore_patterns("*-wal", "*-shm", f"*{VERIFIED}"))
    for path in sorted(work.rglob("cache/*.cache")):  # as the copy's first open would: not measured
        stamp_if_whole(path)
