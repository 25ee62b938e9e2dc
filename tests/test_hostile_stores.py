"""Damaged stores, foreign embedders, full disks and held locks: one clear line, nothing lost, and
exit 0 exactly when the operation committed."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import RESIDENCE

from memforest.cli import main
from memforest.errors import StoreError
from memforest.store.db import UserDB
from memforest.store.lock import write_lock

FAKE = ["-o", "llm.backend=scripted", "-o", "embedder.backend=hash", "-o", "embedder.dim=64"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line_failure(code: int, err: str, *words: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert code != 0 and len(lines) == 1 and lines[0].startswith("memforest: error: "), (code, err)
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    data = tmp_path / "sessions.json"
    data.write_text(json.dumps(RESIDENCE[:3]))
    more = tmp_path / "more.json"
    more.write_text(json.dumps(RESIDENCE[3:]))
    args = ["--store", str(tmp_path / "st"), "--user", "u", *FAKE]
    assert run(capsys, "ingest", *args, str(data))[0] == 0
    db = tmp_path / "st" / "users" / "u" / "memory.sqlite"
    return {"args": args, "db": db, "more": str(more), "tmp": tmp_path}


def fingerprint(db: Path) -> tuple[int, list[tuple[Any, ...]]]:
    con = sqlite3.connect(db)
    try:
        version = int(con.execute("SELECT value FROM meta WHERE key='version'").fetchone()[0])
        return version, sorted(con.execute("SELECT session_id, turns FROM sessions").fetchall())
    finally:
        con.close()


# ---------------------------------------------------------------- embedder identity


@pytest.mark.parametrize("command", ["delete-session", "correct-session", "refresh", "ingest", "merge"])
def test_a_write_with_another_embedder_is_refused_before_anything_changes(
        store: dict[str, Any], capsys: pytest.CaptureFixture[str], command: str) -> None:
    before = fingerprint(store["db"])
    other = [*store["args"][:4], "-o", "llm.backend=scripted", "-o", "embedder.backend=hash",
             "-o", "embedder.dim=32"]
    fix = store["tmp"] / "fix.json"
    fix.write_text(json.dumps(RESIDENCE[0]))
    argv = {"delete-session": [command, *other, "boston"], "correct-session": [command, *other, str(fix)],
            "refresh": [command, *other], "ingest": [command, *other, store["more"]],
            "merge": [command, "--store", store["args"][1], "--from", "u", "--to", "v", *other[4:]]}[command]
    code, _, err = run(capsys, *argv)
    one_line_failure(code, err, "embedder", "64-d", "32-d")
    assert code == 2 and fingerprint(store["db"]) == before
    assert run(capsys, "check", *store["args"])[0] == 0
    assert not (store["db"].parent.parent / "v" / "memory.sqlite").exists()


# ---------------------------------------------------------------- exit 0 iff committed


def test_a_failure_after_the_commit_does_not_fail_the_committed_ingest(
        store: dict[str, Any], capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from memforest.versions import publish

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("no memory left for the new indexes")

    monkeypatch.setattr(publish, "next_snapshot", broken)
    code, out, err = run(capsys, "ingest", *store["args"], store["more"])
    assert code == 0 and "Traceback" not in err and "committed, but" in caplog.text
    assert fingerprint(store["db"])[0] == 2 and json.loads(out)["sessions"] == 2
    monkeypatch.undo()
    code, _, err = run(capsys, "ingest", *store["args"], store["more"])  # a retry finds them stored
    one_line_failure(code, err, "already")
    code, out, _ = run(capsys, "ask", *store["args"], "--no-answer", "--json", "guitar teacher")
    assert code == 0 and json.loads(out)["evidence"]


def test_a_full_disk_shows_the_real_error_and_writes_nothing(
        store: dict[str, Any], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    connect = UserDB.connect

    def full(self: UserDB) -> Any:
        with connect(self) as con:
            pages = con.execute("PRAGMA page_count").fetchone()[0]
            con.execute(f"PRAGMA max_page_count={pages}")  # no room to grow: SQLITE_FULL
            yield con

    monkeypatch.setattr(UserDB, "connect", __import__("contextlib").contextmanager(full))
    before = fingerprint(store["db"])
    code, _, err = run(capsys, "ingest", *store["args"], store["more"])
    line = one_line_failure(code, err, "disk is full", str(store["db"]))
    assert "cannot rollback" not in line and fingerprint(store["db"]) == before


# ---------------------------------------------------------------- damaged databases


def _truncate(db: Path) -> None:
    db.write_bytes(db.read_bytes()[: 4096 + 100])


def _flip_pages(db: Path) -> None:
    data = bytearray(db.read_bytes())
    for i in range(4096 + 8, len(data), 97):  # every b-tree page after the first, headers included
        data[i] ^= 0xFF
    db.write_bytes(bytes(data))


def _sql(statement: str) -> Any:
    def damage(db: Path) -> None:
        con = sqlite3.connect(db)
        con.execute(statement)
        con.commit()
        con.close()
    return damage


DAMAGE = {
    "zero bytes": lambda db: db.write_bytes(b""),
    "truncated": _truncate,
    "flipped bytes": _flip_pages,
    "header": lambda db: db.write_bytes(b"\x00" * 16 + db.read_bytes()[16:]),
    "dropped table": _sql("DROP TABLE scenes"),
    "deleted node rows": _sql("DELETE FROM nodes WHERE level = 0 AND rowid % 2 = 0"),
    "deleted meta": _sql("DELETE FROM meta WHERE key = 'dim'"),
    "newer schema": _sql("UPDATE meta SET value = '99' WHERE key = 'schema_version'"),
}


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_a_damaged_database_is_reported_with_its_path_and_never_recreated(
        store: dict[str, Any], capsys: pytest.CaptureFixture[str], kind: str) -> None:
    db = store["db"]
    con = sqlite3.connect(db)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    DAMAGE[kind](db)
    damaged = db.read_bytes()
    code, out, err = run(capsys, "check", *store["args"])
    assert code == 1 and "Traceback" not in err, err
    report = json.loads(out)
    assert not report["ok"] and report["problems"] and report["path"] == str(db)
    assert any(str(db) in p or kind == "deleted node rows" for p in report["problems"]), report
    for argv in (["ingest", *store["args"], store["more"]], ["delete-session", *store["args"], "boston"],
                 ["ask", *store["args"], "--no-answer", "where do I live"], ["show", *store["args"]]):
        code, _, err = run(capsys, *argv)
        one_line_failure(code, err)
        assert code == 2, err
    assert db.read_bytes() == damaged  # never re-created, never repaired by a write


def test_a_newer_schema_is_refused_by_every_command(store: dict[str, Any],
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from memforest.store.schema import SCHEMA_VERSION

    _sql(f"UPDATE meta SET value = '{SCHEMA_VERSION + 1}' WHERE key = 'schema_version'")(store["db"])
    for argv in (["ingest", *store["args"], store["more"]], ["show", *store["args"]],
                 ["ask", *store["args"], "--no-answer", "where"], ["refresh", *store["args"]]):
        one_line_failure(*run(capsys, *argv)[::2], "newer")


def test_damaged_resident_index_vectors_are_found_by_check_and_rebuilt(store: dict[str, Any]) -> None:
    from memforest.api import MemForest
    from memforest.config import MemForestConfig
    from memforest.llm.testing import HashEmbedder

    forest = MemForest(store["db"].parents[2], MemForestConfig(), embedder=HashEmbedder(64), generate=False)
    table = forest.snapshot("u").index.cells
    some = next(iter(table.keys()))
    table.vector(some)[:] = 0  # the resident vectors no longer match the store
    report = forest.check("u")
    assert report["ok"] and report["index_rebuilt"] and any("checksum" in c for c in report["cache"]), report
    assert forest.check("u")["cache"] == []
    assert forest.query("u", "where do I live", answer=False).evidence


# ---------------------------------------------------------------- the write lock


def test_the_write_lock_wait_times_out_naming_the_lock_and_the_user(
        store: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    lock = store["db"].parent / "write.lock"
    held, release = threading.Event(), threading.Event()

    def hung_writer() -> None:
        with write_lock(lock, "u", 1.0):
            held.set()
            release.wait(30)

    thread = threading.Thread(target=hung_writer)
    thread.start()
    held.wait(5)
    try:
        t = time.monotonic()
        code, _, err = run(capsys, "ingest", *store["args"], "-o", "limits.lock_wait_s=0.3", store["more"])
        waited = time.monotonic() - t
    finally:
        release.set()
        thread.join()
    one_line_failure(code, err, str(lock), "'u'", "limits.lock_wait_s")
    assert waited < 10 and fingerprint(store["db"])[0] == 1
    assert run(capsys, "ingest", *store["args"], store["more"])[0] == 0  # released: the next writer goes


def test_the_lock_is_taken_once_free() -> None:
    with pytest.raises(StoreError, match="write lock"):
        import tempfile

        with tempfile.TemporaryDirectory() as d, write_lock(Path(d) / "l", "a", 0), \
                write_lock(Path(d) / "l", "a", 0.05):
            pass


# ---------------------------------------------------------------- a rejected first write


@pytest.mark.parametrize("case", ["surrogate", "model cannot be built", "model fails"])
def test_a_rejected_first_ingest_leaves_nothing_behind(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       case: str) -> None:
    data = tmp_path / "s.json"
    content = "caf\udce9" if case == "surrogate" else "I live in Lisbon."
    data.write_text(json.dumps([{**RESIDENCE[0], "turns": [{"role": "user", "content": content}]}]))
    extra = {"model cannot be built": ["-o", "llm.responder=no_such_module:nothing"],
             "model fails": ["-o", "llm.responder=tests.test_hostile_stores:failing_responder",
                             "-o", "llm.max_retries=0"]}.get(case, [])
    code, _, err = run(capsys, "ingest", "--store", str(tmp_path / "st"), "--user", "new", *FAKE, *extra,
                       str(data))
    one_line_failure(code, err)
    users = tmp_path / "st" / "users"
    assert not users.exists() or not any(users.iterdir()), list(users.rglob("*"))


def failing_responder(request: Any) -> Exception:
    return RuntimeError("the model server went away")


def test_damaged_resident_row_meta_is_found_by_check_and_rebuilt(store: dict[str, Any]) -> None:
    from memforest.api import MemForest
    from memforest.config import MemForestConfig
    from memforest.llm.testing import HashEmbedder

    forest = MemForest(store["db"].parents[2], MemForestConfig(), embedder=HashEmbedder(64), generate=False)
    table = forest.snapshot("u").index.facts
    table.meta(next(iter(table.keys())))[:] = (0.0, -1)  # ranking would read a wrong time and session
    report = forest.check("u")
    assert report["ok"] and report["index_rebuilt"] and any("time or session" in c
                                                            for c in report["cache"]), report
    assert forest.check("u")["cache"] == []
