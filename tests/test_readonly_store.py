"""A store the caller may read but not write is readable (show, ask, check), and a write to it is
refused in one line, naming it read-only, with nothing written.

The reads run in a child process that really may not write the store: its files and folders are
made read-only, and a child of root (whom file modes do not stop) is started without the capabilities
that override them (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, dropped from its bounding set). The child
first checks that it cannot write the store, else the test is skipped."""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from memforest.api import MemForest
from memforest.config import MemForestConfig
from memforest.llm.testing import HashEmbedder

OPTIONS = ["-o", "llm.backend=scripted", "-o", "embedder.backend=hash", "-o", "embedder.dim=64"]
_PR_CAPBSET_DROP, _CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH = 24, 1, 2

# Runs the command lines of argv[2:] (JSON) on store argv[1] and prints each one's exit code, output and
# error output; "skip" when the store's database can be written after all.
CHILD = r"""
import contextlib, io, json, sys
from pathlib import Path
from memforest.cli import main

store, runs = Path(sys.argv[1]), json.loads(sys.argv[2])
try:
    open(store / "users" / "u" / "memory.sqlite", "ab").close()
except PermissionError:
    pass
else:
    print(json.dumps({"skip": "this process may write the read-only store"}))
    sys.exit(0)
results = []
for argv in runs:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    results.append([code, out.getvalue(), err.getvalue()])
print(json.dumps({"results": results}))
"""


def session(sid: str, place: str, day: int) -> dict[str, Any]:
    return {"session_id": sid, "timestamp": f"2023-05-{day:02d}T10:00", "turns": [
        {"role": "user", "content": f"I moved to {place} last week."},
        {"role": "assistant", "content": f"{place} is lovely."}]}


def forest(store: Path) -> MemForest:
    return MemForest(store, MemForestConfig(), embedder=HashEmbedder(64), generate=False)


def _drop_overrides() -> None:  # in the child, before it runs Python
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def run_without_write_access(store: Path, *runs: list[str]) -> list[tuple[int, str, str]]:
    """Each command line of `runs`, in a child process that may not write the read-only store."""
    argv = [sys.executable, "-c", CHILD, str(store), json.dumps([[*r, *OPTIONS] for r in runs])]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300,
                              preexec_fn=_drop_overrides if os.geteuid() == 0 else None)
    except subprocess.SubprocessError as e:
        if "prctl" in str(e) or "preexec" in str(e):
            pytest.skip(f"cannot start a process without root's file overrides: {e}")
        raise
    assert done.returncode == 0, done.stderr
    reply = json.loads(done.stdout.splitlines()[-1])
    if "skip" in reply:
        pytest.skip(reply["skip"])
    return [tuple(r) for r in reply["results"]]


@contextmanager
def read_only(*paths: Path) -> Iterator[None]:
    """Files and folders (and everything below a folder) without write permission, for the block."""
    every = [p for path in paths for p in ([path, *path.rglob("*")] if path.is_dir() else [path])]
    modes = {p: p.stat().st_mode for p in every}
    try:
        for p in every:
            p.chmod(modes[p] & ~0o222)
        yield
    finally:
        for p in reversed(every):
            p.chmod(modes[p])


def files(store: Path) -> dict[str, str]:
    """Every file of the store by content."""
    return {str(p.relative_to(store)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(store.rglob("*")) if p.is_file()}


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "store"
    with forest(path) as f:
        f.ingest_sessions("u", [session("lisbon", "Lisbon", 1), session("porto", "Porto", 2)])
    return path


READS = (["show", "--store", "{store}", "--user", "u", "--json"],
         ["ask", "where did I move?", "--store", "{store}", "--user", "u", "--no-answer", "--json"],
         ["check", "--store", "{store}", "--user", "u"])


def reads(store: Path) -> list[list[str]]:
    return [[a.replace("{store}", str(store)) for a in argv] for argv in READS]


def assert_read(results: list[tuple[int, str, str]], sessions: set[str]) -> None:
    (show, _, show_err), (ask, answer, ask_err), (check, report, check_err) = results
    assert show == 0, show_err
    assert ask == 0 and json.loads(answer)["evidence"], ask_err
    assert check == 0 and json.loads(report)["ok"], check_err + report
    trees = json.loads(results[0][1])["trees"]
    assert {t["tree_id"] for t in trees if t["family"] == "session"} == {f"session:{s}" for s in sessions}


def assert_refused(result: tuple[int, str, str]) -> None:
    code, _, err = result
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert "read-only" in err and "nothing was written" in err, err


def test_a_read_only_store_is_read_and_never_written(store: Path, tmp_path: Path) -> None:
    """Folder and files read-only, no process holding the store open: no WAL index exists and none
    can be made, so the database is read as the immutable file it is."""
    data = tmp_path / "more.json"
    data.write_text(json.dumps([session("faro", "Faro", 3)]))
    before = files(store)
    assert not any(name.endswith(("-wal", "-shm")) for name in before)
    with read_only(store):
        results = run_without_write_access(
            store, *reads(store), ["ingest", "--store", str(store), "--user", "u", str(data)],
            ["delete-session", "lisbon", "--store", str(store), "--user", "u"],
            ["ingest", "--store", str(store), "--user", "newcomer", str(data)])
    assert_read(results[:3], {"lisbon", "porto"})
    for result in results[3:]:
        assert_refused(result)
    assert files(store) == before


def test_a_read_only_database_in_a_writable_folder_is_read(store: Path, tmp_path: Path) -> None:
    """The write lock is taken, and the write refused before any model is called."""
    data, calls = tmp_path / "more.json", tmp_path / "calls.jsonl"
    data.write_text(json.dumps([session("faro", "Faro", 3)]))
    db = store / "users" / "u" / "memory.sqlite"
    content = db.read_bytes()
    with read_only(db):
        results = run_without_write_access(
            store, *reads(store),
            ["ingest", "--store", str(store), "--user", "u", "--calls", str(calls), str(data)])
    assert_read(results[:3], {"lisbon", "porto"})
    assert_refused(results[3])
    assert str(db) in results[3][2]
    assert not calls.exists() or not calls.read_text().strip()
    assert db.read_bytes() == content


def test_commits_still_in_the_write_ahead_log_are_read(store: Path) -> None:
    """A writer holds the store open (its last commit not yet copied into the database file): a reader
    that may not write reads that commit through the existing WAL index."""
    with forest(store) as writer:
        writer.ingest_sessions("u", [session("faro", "Faro", 3)])
        writer.ingest_sessions("u", [session("braga", "Braga", 4)])  # committed on the held connection
        wal = store / "users" / "u" / "memory.sqlite-wal"
        assert wal.exists() and wal.stat().st_size > 0
        with read_only(store):
            results = run_without_write_access(store, *reads(store))
    assert_read(results, {"lisbon", "porto", "faro", "braga"})


def test_a_log_with_commits_but_no_index_is_refused_not_misread(store: Path, tmp_path: Path) -> None:
    """Without its WAL index, a log's commits could only be ignored: the read is refused instead."""
    copy = tmp_path / "copy"
    with forest(store) as writer:
        writer.ingest_sessions("u", [session("faro", "Faro", 3)])
        writer.ingest_sessions("u", [session("braga", "Braga", 4)])
        shutil.copytree(store, copy, ignore=shutil.ignore_patterns("*-shm"))
    assert (copy / "users" / "u" / "memory.sqlite-wal").stat().st_size > 0
    with read_only(copy):
        [(code, _, err)] = run_without_write_access(copy, reads(copy)[0])
    assert code == 2 and err.count("\n") == 1 and "write-ahead log" in err and "read-only" in err, err
    with forest(copy) as f:  # with write access it is read whole
        assert set(f.snapshot("u").state.sessions) == {"lisbon", "porto", "faro", "braga"}


def test_readers_leave_the_journal_mode_alone(store: Path) -> None:
    """A reader never sets the journal mode: a store in another mode stays in it after reads."""
    db = store / "users" / "u" / "memory.sqlite"
    con = sqlite3.connect(db, isolation_level=None)
    assert con.execute("PRAGMA journal_mode=DELETE").fetchone() == ("delete",)
    con.close()
    with forest(store) as f:
        assert set(f.snapshot("u").state.sessions) == {"lisbon", "porto"}
        assert f.check("u")["ok"]
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    con.close()
