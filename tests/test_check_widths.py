"""Vectors whose width disagrees with the store's recorded dimension: `memforest check` reports each
table with counts (never a crash), and opening the store for use is a one-line StoreError."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from conftest import RESIDENCE

from memforest.api import MemForest
from memforest.cli import main
from memforest.config import MemForestConfig
from memforest.errors import StoreError
from memforest.llm.testing import HashEmbedder, ScriptedChatModel

DIM = 64
FAKE = ["-o", "llm.backend=scripted", "-o", "embedder.backend=hash", "-o", f"embedder.dim={DIM}"]


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A store of user `u` (three sessions, facts and scenes), its write-ahead log checkpointed."""
    root = tmp_path / "st"
    with MemForest(root, MemForestConfig(), llm=ScriptedChatModel(), embedder=HashEmbedder(DIM)) as forest:
        forest.ingest_sessions("u", RESIDENCE[:3])
    db = root / "users" / "u" / "memory.sqlite"
    con = sqlite3.connect(db)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    return root


def sql(root: Path, *statements: str) -> None:
    con = sqlite3.connect(root / "users" / "u" / "memory.sqlite")
    for statement in statements:
        con.execute(statement)
    con.commit()
    con.close()


def count(root: Path, table: str) -> int:
    con = sqlite3.connect(root / "users" / "u" / "memory.sqlite")
    try:
        return int(con.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
    finally:
        con.close()


DAMAGE: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {  # statements, words the first finding holds
    "meta dim "
    "wider": (("UPDATE meta SET value='256' WHERE key='dim'",), ("facts.embedding", "not 256-d", "64-d")),
    "meta dim 0": (("UPDATE meta SET value='0' WHERE key='dim'",), ("meta dim is '0'",)),
    "fact vectors narrower": (("UPDATE facts SET embedding = substr(embedding, 1, 128)",),
                              ("facts.embedding", "not 64-d", "32-d")),
    "some node vectors": (("UPDATE nodes SET embedding = substr(embedding, 1, 102) WHERE rowid % 2 = 0",),
                          ("nodes.embedding", "102 bytes")),
    "scene vectors wider": (("UPDATE scenes SET total = zeroblob(512)",), ("scenes.total", "128-d")),
}


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_check_reports_vector_widths_by_table_with_counts(store: Path, capsys: pytest.CaptureFixture[str],
                                                          kind: str) -> None:
    statements, words = DAMAGE[kind]
    sql(store, *statements)
    code = main(["check", "--store", str(store), "--user", "u", *FAKE])
    out, err = capsys.readouterr()
    assert code == 1 and not err.strip(), err
    report = json.loads(out)
    assert not report["ok"] and report["problems"], report
    first = report["problems"][0]
    for word in words:
        assert word in first, report["problems"]
    assert all("is damaged" in p for p in report["problems"])


def test_every_table_is_counted(store: Path) -> None:
    sql(store, "UPDATE meta SET value='256' WHERE key='dim'")
    report = MemForest(store, MemForestConfig(), embedder=HashEmbedder(DIM), generate=False).check("u")
    facts, nodes, scenes = count(store, "facts"), count(store, "nodes"), count(store, "scenes")
    assert facts and nodes and scenes
    assert report["problems"] == [
        f"{store / 'users' / 'u' / 'memory.sqlite'} is damaged: {n} of {n} vectors in {table} are not 256-d "
        "(the store's meta dim), e.g. one of 64-d; restore it from a backup"
        for table, n in (("facts.embedding", facts), ("nodes.embedding", nodes), ("scenes.total", scenes))]


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_opening_a_store_of_wrong_widths_is_one_line(store: Path, capsys: pytest.CaptureFixture[str],
                                                     kind: str) -> None:
    sql(store, *DAMAGE[kind][0])
    damaged = (store / "users" / "u" / "memory.sqlite").read_bytes()
    more = store.parent / "more.json"
    more.write_text(json.dumps(RESIDENCE[3:]))
    args = ["--store", str(store), "--user", "u", *FAKE]
    for argv in (["ask", *args, "--no-answer", "where do I live?"], ["show", *args],
                 ["ingest", *args, str(more)], ["delete-session", *args, "pizza"]):
        code = main(argv)
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.strip()]
        if kind == "some node vectors" and argv[0] == "ask" and code == 0:
            continue  # a query reads the vectors of the nodes it reaches only, none of them damaged here
        assert (code == 2 and len(lines) == 1 and "internal error" not in err
                and "Traceback" not in err), (argv, err)
        assert "is damaged" in err or "embedder" in err, err
    assert (store / "users" / "u" / "memory.sqlite").read_bytes() == damaged


def test_the_library_raises_a_store_error_naming_the_table(store: Path) -> None:
    sql(store, "UPDATE facts SET embedding = substr(embedding, 1, 128)")
    forest: Any = MemForest(store, MemForestConfig(), llm=ScriptedChatModel(), embedder=HashEmbedder(DIM))
    with forest:
        with pytest.raises(StoreError, match=r"facts\.embedding are not 64-d") as e:
            forest.query("u", "where do I live?", answer=False)
        assert "\n" not in str(e.value)
        with pytest.raises(StoreError, match=r"facts\.embedding"):
            forest.ingest_sessions("u", RESIDENCE[3:])
