"""A write that finds no room (a full device, a file-size limit, a quota) is reported as such, with
nothing written, never as damage; an intact store near a full disk checks as intact. A store on a
read-only file system (SQLite cannot open its log's index) is read from its database file."""

from __future__ import annotations

import errno
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import make_sessions

from memforest.api import MemForest
from memforest.check import damaged
from memforest.config import MemForestConfig
from memforest.errors import StoreError
from memforest.llm.testing import HashEmbedder, ScriptedChatModel
from memforest.store import connection, space
from memforest.store.db import UserDB


def _forest(root: Path) -> MemForest:
    cfg = MemForestConfig(release_check_s=0)
    return MemForest(root, cfg, llm=ScriptedChatModel(), embedder=HashEmbedder())


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "store"
    with _forest(path) as forest:
        forest.ingest_sessions("u", make_sessions(3, 4))
    return path


def _refuse_commit(monkeypatch: pytest.MonkeyPatch, message: str) -> None:
    def fail(*_: Any) -> None:
        raise sqlite3.OperationalError(message)
    monkeypatch.setattr("memforest.store.db.write_changes", fail)


@pytest.mark.parametrize("message", ["database or disk is full", "disk I/O error"])
def test_a_commit_finding_no_room_says_so_and_writes_nothing(root: Path, monkeypatch: pytest.MonkeyPatch,
                                                             message: str) -> None:
    monkeypatch.setattr(space.os, "statvfs", lambda _: SimpleNamespace(f_bavail=7, f_frsize=4096))
    _refuse_commit(monkeypatch, message)
    with _forest(root) as forest:
        with pytest.raises(StoreError) as raised:
            forest.ingest_sessions("u", make_sessions(5, 4)[3:])
        text = str(raised.value)
        assert "no space left" in text and "nothing was written" in text and "damaged" not in text
        assert "\n" not in text
        monkeypatch.undo()
        assert forest.snapshot("u").version == 1
        report = forest.check("u")
        assert report["ok"] and not report["problems"]


def test_an_io_error_with_room_left_is_still_damage(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _refuse_commit(monkeypatch, "disk I/O error")
    with _forest(root) as forest, pytest.raises(StoreError, match="damaged"):
        forest.ingest_sessions("u", make_sessions(5, 4)[3:])


def test_a_failure_of_a_full_device_outside_sqlite_is_no_space_not_damage(root: Path) -> None:
    db = UserDB(root / "users" / "u" / "memory.sqlite")
    for number in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        found = damaged(OSError(number, os.strerror(number)), "u", db)
        assert isinstance(found, StoreError) and "no space left" in str(found)


CHILD = textwrap.dedent("""
    import resource, signal, sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[2])
    from conftest import make_sessions
    from memforest.api import MemForest
    from memforest.config import MemForestConfig
    from memforest.errors import StoreError
    from memforest.llm.testing import HashEmbedder, ScriptedChatModel

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # this process only: writes past the limit fail
    root = Path(sys.argv[1])
    db = root / "users" / "u" / "memory.sqlite"
    limit = db.stat().st_size + 8192
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    forest = MemForest(root, MemForestConfig(release_check_s=0), llm=ScriptedChatModel(),
                       embedder=HashEmbedder())
    try:
        forest.ingest_sessions("u", make_sessions(40, 8)[3:])
        print("written")
    except StoreError as e:
        print("refused:", e)
    print("check:", forest.check("u")["ok"])
""")


def test_a_file_size_limit_refuses_a_write_in_one_line_and_the_store_stays_intact(root: Path) -> None:
    done = subprocess.run([sys.executable, "-c", CHILD, str(root), str(Path(__file__).parent)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("refused:") and "no space left" in lines[0] and "file-size limit" in lines[0]
    assert "damaged" not in lines[0] and "nothing was written" in lines[0]
    assert lines[1] == "check: True"
    with _forest(root) as forest:
        assert forest.snapshot("u").version == 1 and forest.check("u")["ok"]
        assert forest.ingest_sessions("u", make_sessions(5, 4)[3:]).version == 2


def test_a_store_sqlite_cannot_open_for_its_log_index_is_read_from_its_database(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a read-only file system SQLite cannot make the log's index: "unable to open database file"
    at the first statement. With no commit left in the log, the database file is read as it is."""
    assert not (root / "users" / "u" / "memory.sqlite-wal").exists()
    real = sqlite3.connect

    class Refusing(sqlite3.Connection):
        def execute(self, *args: Any, **kwargs: Any) -> sqlite3.Cursor:
            raise sqlite3.OperationalError("unable to open database file")

    def connect(database: Any, *args: Any, **kwargs: Any) -> sqlite3.Connection:
        if "immutable=1" not in str(database):
            kwargs["factory"] = Refusing
        return real(database, *args, **kwargs)

    monkeypatch.setattr(connection, "sqlite3", SimpleNamespace(connect=connect, Error=sqlite3.Error))
    with _forest(root) as forest:
        assert forest.snapshot("u").version == 1
        assert forest.query("u", "topic 0 Boston", answer=False).evidence
        assert forest.check("u")["ok"]
