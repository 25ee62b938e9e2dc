"""A memory held open for a long time while another process writes: the write-ahead log stays
bounded, because no version this process holds keeps a snapshot of the store open that nothing
needs (`memforest.store.versions`), and a version a caller keeps still reads its own data.

Every step here is driven by the test (the writer answers each command once it has returned, and
checkpoints inside its commits; the reader's background check is off): no thread's timing counts."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from store_worker import session
from test_resident_versions import fingerprint

from memforest.api import MemForest
from memforest.config import MemForestConfig
from memforest.llm.testing import HashEmbedder, ScriptedChatModel

TESTS = Path(__file__).parent
WAL_BOUND = 8 * 2**20  # bytes: ~17 of these commits' frames; held open, 100 commits grow it past 30 MB
BATCHES, BATCH = 20, 5


def _forest(root: Path) -> MemForest:
    cfg = MemForestConfig(release_check_s=0, warm_tree_leaves=0)
    return MemForest(root, cfg, llm=ScriptedChatModel(), embedder=HashEmbedder())


class Writer:
    """`log_worker.py` in a process of its own, one command at a time."""

    def __init__(self, root: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, str(TESTS / "log_worker.py"), str(root), "u"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=TESTS)

    def __call__(self, command: str) -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().split()
        assert answer[:1] == ["ok"], f"the writer failed on {command!r}"
        return int(answer[1])

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        assert self.proc.wait(timeout=60) == 0


def _wal(root: Path) -> int:
    wal = root / "users" / "u" / "memory.sqlite-wal"
    return wal.stat().st_size if wal.exists() else 0


def _unbackfilled(root: Path) -> int:
    """Frames of the log a checkpoint cannot copy into the database (some snapshot holds them)."""
    con = sqlite3.connect(root / "users" / "u" / "memory.sqlite", timeout=0)
    try:
        _, log, done = con.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    finally:
        con.close()
    return max(0, log - done)


def _built(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    with _forest(root) as forest:
        forest.ingest_sessions("u", [session(i) for i in range(5)])
    return root


@pytest.mark.parametrize("reader", ["idle", "busy"])
def test_a_long_lived_reader_keeps_the_log_bounded_while_another_process_writes(
        tmp_path: Path, reader: str) -> None:
    root = _built(tmp_path)
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    with _forest(root) as forest:
        kept = forest.snapshot("u")  # a version a caller keeps through every commit below
        before = forest.query("u", "Lisbon item1x0", answer=False).evidence
        writer = Writer(root)
        try:
            sizes, held_back = [], []
            for batch in range(BATCHES):
                version = writer(f"ingest {100 + batch * BATCH} {BATCH}")
                if reader == "busy":  # an operation finds the newer version itself
                    forest.query("u", f"Lisbon item{100 + batch}x0", answer=False)
                    assert forest.snapshot("u").version == version
                else:  # idle: what the background check does
                    forest.release_superseded()
                sizes.append(_wal(root))
                held_back.append(_unbackfilled(root))
            writer("delete w0101")
            final = writer("correct w0102")
        finally:
            writer.close()
        assert max(sizes) <= WAL_BOUND, sizes
        # no snapshot of the reader held a frame back, but the kept version's until the release after
        # the one that found it superseded (it read in what it had not read meanwhile)
        assert held_back[0] > 0 and not any(held_back[1:]), held_back
        with _forest(copy) as eager:  # the kept version, as the store held it then
            assert fingerprint(kept) == fingerprint(eager.snapshot("u"))
            assert eager.query("u", "Lisbon item1x0", answer=False).evidence == before
        result = forest.query("u", "Porto corrected w0102", answer=False)
        assert forest.snapshot("u").version == final
        with _forest(root) as fresh:
            assert fresh.query("u", "Porto corrected w0102", answer=False).evidence == result.evidence


def test_an_idle_memory_ends_its_snapshot_after_each_operation(tmp_path: Path) -> None:
    """After an operation, a memory no caller keeps a version of holds no snapshot of the store:
    another process's commits can be checkpointed whole; the next operation reads the new version."""
    root = _built(tmp_path)
    with _forest(root) as forest:
        forest.query("u", "Lisbon item1x0", answer=False)
        with _forest(root) as other:  # another process, as far as `forest` knows
            other.ingest_sessions("u", [session(50)])
            assert _unbackfilled(root) == 0
        hit = forest.query("u", "Lisbon item50x0", answer=False)
        assert any("item50x0" in e.text for e in hit.evidence)


def test_a_kept_version_reads_what_it_had_not_read_after_another_process_commits(tmp_path: Path) -> None:
    """A version a caller keeps holds its snapshot until the memory finds the store moved past it;
    then it reads in what it would still read, and its snapshot ends at the next release."""
    root = _built(tmp_path)
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    with _forest(root) as forest:
        kept = forest.snapshot("u")
        source = kept.state.tree_source
        with _forest(root) as other:
            other.ingest_sessions("u", [session(60)])
            other.delete_session("u", "w0001")
        assert _unbackfilled(root) > 0  # the kept version's snapshot holds the new frames back
        assert forest.release_superseded() == 0 and source.drained and not source.closed
        assert forest.release_superseded() == 1 and source.closed
        assert _unbackfilled(root) == 0
        with _forest(copy) as eager:
            assert fingerprint(kept) == fingerprint(eager.snapshot("u"))
