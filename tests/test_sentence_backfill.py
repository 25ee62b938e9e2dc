"""The backfill of a store written before cells kept their sentence vectors (schema 3 and older, or rows
lost): it stores exactly the rows a fresh write stores, counts every cell once, does nothing the second
time, survives an interruption (the store opens and answers the same; a rerun completes it), reads a
batch again when an operation commits meanwhile, and refuses another embedder before writing anything."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from test_hybrid_ranking import CountingEmbedder
from test_stored_sentences import QUESTIONS, V3_LAYOUT, _forest, _long_session, _ranked, _rows, _sessions

from memforest.cli import main
from memforest.errors import StoreError
from memforest.llm.base import EmbedKind
from memforest.llm.testing import HashEmbedder
from memforest.store.backfill import BACKFILL_BATCH, BackfillReport, backfill
from memforest.store.db import UserDB
from memforest.store.schema import SCHEMA_VERSION

Rows = dict[str, tuple[int, bytes | None]]
LAYOUTS = {"schema 3": V3_LAYOUT, "rows lost": "DELETE FROM cell_sentences;",
           "half the rows lost": "DELETE FROM cell_sentences WHERE rowid % 2 = 0;"}


def _db(root: Path) -> UserDB:
    return UserDB(root / "users" / "u" / "memory.sqlite")


def _old_store(root: Path, layout: str = "schema 3") -> tuple[Rows, dict[str, list[tuple]]]:
    """A store written by this MemForest, made into one of `layout`; the rows its write stored and the
    ranking of each question with them."""
    mf = _forest(root, final_units=3, rank_sessions=6)
    mf.ingest_sessions("u", _sessions())
    rows, ranked = _rows(mf), {q: _ranked(mf, q, stored=True) for q in QUESTIONS}
    mf.close()
    with sqlite3.connect(_db(root).path) as con:
        con.executescript(LAYOUTS[layout])
    return rows, ranked


def _meta(root: Path, key: str) -> str:
    with sqlite3.connect(_db(root).path) as con:
        return con.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()[0]


def _stored(root: Path) -> Rows:
    with sqlite3.connect(_db(root).path) as con:
        return {cid: (words, blob) for cid, words, blob in con.execute("SELECT * FROM cell_sentences")}


def _assert_rows_equal(rows: Rows, fresh: Rows, dim: int = 256) -> None:
    assert set(rows) == set(fresh)
    for cid, (words, blob) in rows.items():
        assert words == fresh[cid][0]
        other = fresh[cid][1]
        assert (blob is None) == (other is None), cid
        if blob is not None and other is not None:
            got, want = (np.frombuffer(b, np.float32).reshape(-1, dim) for b in (blob, other))
            assert got.shape == want.shape and np.allclose(got, want, atol=1e-6)


class FailingEmbedder(HashEmbedder):
    """The hash embedder, failing at its call number `fail_at` (an embedder stopped midway)."""

    def __init__(self, fail_at: int) -> None:
        super().__init__(256)
        self.calls, self.fail_at = 0, fail_at

    def embed(self, texts: Sequence[str], kind: EmbedKind = "passage") -> np.ndarray:
        self.calls += 1
        if self.calls == self.fail_at:
            raise RuntimeError("embedding server went away")
        return super().embed(texts, kind)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_the_backfill_stores_the_rows_a_fresh_write_stores(tmp_path: Path, layout: str) -> None:
    fresh, ranked = _old_store(tmp_path, layout)
    kept = _stored(tmp_path) if layout != "schema 3" else {}
    report = backfill(_db(tmp_path), "u", HashEmbedder(256), 80, batch=2)
    assert _meta(tmp_path, "schema_version") == str(SCHEMA_VERSION)
    rows = _stored(tmp_path)
    _assert_rows_equal(rows, fresh)
    added = {cid: row for cid, row in fresh.items() if cid not in kept}
    long = [row for row in added.values() if row[1] is not None]
    assert report.examined == len(fresh) and report.present == len(kept) and report.orphaned == 0
    assert report.backfilled == len(long) > 0 and report.short == len(added) - len(long) > 0
    assert report.sentences == sum(len(blob) // (4 * 256) for _, blob in long if blob is not None)
    assert report.batches == len({sorted(fresh).index(cid) // 2 for cid in added}) and report.reread == 0
    assert _meta(tmp_path, "version") == "1"  # the rows change no result: the version stays

    again = backfill(_db(tmp_path), "u", HashEmbedder(256), 80, batch=2)
    assert again == BackfillReport("u", str(_db(tmp_path).path), examined=len(fresh), present=len(fresh))
    assert _stored(tmp_path) == rows

    embedder = CountingEmbedder()
    mf = _forest(tmp_path, embedder, final_units=3, rank_sessions=6)
    for question in QUESTIONS:
        embedder.batches.clear()
        assert _ranked(mf, question, stored=True) == ranked[question]
        assert embedder.batches == [[question]]  # as with a new store: the question alone
    assert mf.check("u")["notes"] == []
    mf.close()


def test_an_interrupted_backfill_leaves_a_store_that_opens_and_a_rerun_completes(tmp_path: Path) -> None:
    fresh, ranked = _old_store(tmp_path)
    with pytest.raises(RuntimeError, match="went away"):
        backfill(_db(tmp_path), "u", FailingEmbedder(fail_at=2), 80, batch=2)
    first = _stored(tmp_path)
    assert first and len(first) < len(fresh)  # the first batch's rows, committed
    _assert_rows_equal(first, {cid: fresh[cid] for cid in first})

    mf = _forest(tmp_path, final_units=3, rank_sessions=6)
    for question in QUESTIONS:
        assert _ranked(mf, question, stored=True) == ranked[question]  # the others embedded at query time
    report = mf.check("u")
    assert report["ok"] and report["problems"] == []
    assert report["notes"] == [f"{len(fresh) - len(first)} of {len(fresh)} cells were stored without their "
                               "sentence vectors (by an older MemForest): queries embed those sentences "
                               "themselves; `memforest migrate` stores them"]
    mf.close()

    rerun = backfill(_db(tmp_path), "u", HashEmbedder(256), 80, batch=2)
    assert rerun.present == len(first) and rerun.examined == len(fresh)
    assert rerun.backfilled + rerun.short == len(fresh) - len(first)
    _assert_rows_equal(_stored(tmp_path), fresh)


def test_a_batch_is_read_again_when_an_operation_commits_meanwhile(tmp_path: Path) -> None:
    fresh, _ = _old_store(tmp_path)
    later = _long_session("later", 20, "music", "I sang in the choir at the reunion.")

    class WriterMeanwhile(HashEmbedder):
        def embed(self, texts: Sequence[str], kind: EmbedKind = "passage") -> np.ndarray:
            if not hasattr(self, "wrote"):
                self.wrote = True
                with _forest(tmp_path) as writer:  # another writer commits while the batch is embedded
                    writer.ingest_sessions("u", [later])
            return super().embed(texts, kind)

    report = backfill(_db(tmp_path), "u", WriterMeanwhile(256), 80)
    assert report.reread == 1 and report.batches == 1
    rows = _stored(tmp_path)
    written = {cid for cid in rows if cid.startswith("later#")}
    assert written and report.present == len(written)  # the writer stored its own cells' rows
    assert report.examined == len(fresh) + len(written) == len(rows)
    _assert_rows_equal({cid: row for cid, row in rows.items() if cid not in written}, fresh)


def test_another_embedder_is_refused_in_one_line_and_nothing_is_written(tmp_path: Path) -> None:
    _old_store(tmp_path)
    for other in (HashEmbedder(256, name="other"), HashEmbedder(128)):
        with pytest.raises(StoreError) as refused:
            backfill(_db(tmp_path), "u", other, 80)
        message = str(refused.value)
        assert "\n" not in message and "was built with embedder 'hash' (256-d)" in message
        assert f"uses '{other.name}' ({other.dim}-d)" in message and "nothing was written" in message
    assert _meta(tmp_path, "schema_version") == "3"  # not even migrated
    with pytest.raises(StoreError, match="no memory for user 'ghost'"):
        backfill(UserDB(tmp_path / "users" / "ghost" / "memory.sqlite"), "ghost", HashEmbedder(256), 80)
    assert not (tmp_path / "users" / "ghost").exists()


def test_memforest_migrate_backfills_and_reports_counts(tmp_path: Path, capsys: pytest.CaptureFixture
                                                       ) -> None:
    fresh, _ = _old_store(tmp_path)
    common = ["--store", str(tmp_path), "--user", "u", "-o", "embedder.backend=hash",
              "-o", "tree.summary_mode=extractive"]
    assert main(["migrate", *common, "-o", "embedder.dim=128"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "was built with embedder 'hash' (256-d)" in err
    assert main(["migrate", *common, "-o", "embedder.dim=256", "--batch", "3"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["examined"] == len(fresh) and report["present"] == 0
    assert report["backfilled"] + report["short"] == len(fresh) and report["batches"] == -(-len(fresh) // 3)
    _assert_rows_equal(_stored(tmp_path), fresh)
    assert main(["migrate", *common, "-o", "embedder.dim=256"]) == 0
    assert json.loads(capsys.readouterr().out)["present"] == len(fresh)
    with pytest.raises(SystemExit) as bad:
        main(["migrate", *common, "--batch", "0"])
    assert bad.value.code == 2 and "at least 1" in capsys.readouterr().err


def test_the_migrate_help_states_the_default_batch(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as shown:
        main(["migrate", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert shown.value.code == 0 and f"(default {BACKFILL_BATCH})" in help_text


def test_a_cell_whose_session_is_missing_is_counted_and_left_alone(tmp_path: Path) -> None:
    fresh, _ = _old_store(tmp_path, "rows lost")
    with sqlite3.connect(_db(tmp_path).path) as con:
        con.execute("DELETE FROM sessions WHERE session_id='near0'")
    orphans = {cid for cid in fresh if cid.startswith("near0#")}
    report = backfill(_db(tmp_path), "u", HashEmbedder(256), 80)
    assert orphans and report.orphaned == len(orphans) and report.examined == len(fresh)
    _assert_rows_equal(_stored(tmp_path), {cid: row for cid, row in fresh.items() if cid not in orphans})
