"""Resident copy-on-write versions: published snapshots never change, other processes' commits are
seen, readers never wait for a writer, and the versioned vector tables behave as indexes."""

from __future__ import annotations

import gc
import sqlite3
import threading
import time
import weakref

import numpy as np
import pytest
from conftest import make_sessions

from memforest.resident.cow import CowMap, CowSet
from memforest.resident.hugepages import (
    HugePageReport,
    Mapping,
    advise_heap,
    advise_heap_later,
    private_anonymous,
    thp_mode,
)
from memforest.resident.vector_table import VectorTable
from memforest.store.rows import STRUCTURE
from memforest.store.schema import SCHEMA_VERSION


def fingerprint(snap) -> dict:
    st = snap.state
    return {
        "version": st.version,
        "facts": {f: (x.text, tuple(x.occurrences)) for f, x in st.facts.items()},
        "entities": {k: (sorted(e.facts), dict(e.sessions), e.tree_id) for k, e in st.entities.items()},
        "scenes": {k: (s.size, s.t_last, s.total.tobytes()) for k, s in st.scenes.items()},
        "trees": {t: sorted((n.id, n.parent, tuple(n.children), n.count, n.key_lo, n.key_hi, n.prev, n.next)
                            for n in i.tree.nodes.values()) for t, i in st.trees.items()},
        "nodes": {k: (d.text, d.embedding.tobytes()) for k, d in st.nodes.items()},
        "sessions": {s: (x.time, tuple(x.turns)) for s, x in st.sessions.items()},
        "cells": dict(st.cells), "placements": dict(st.placements),
        "index": sorted(snap.index.cell_key.items()), "cell_uid": sorted(snap.index.cell_uid.items()),
        # what ranking reads of a dense candidate instead of its objects: (time, first session's tree rowid)
        "row_meta": {**{f: tuple(snap.index.facts.meta(f).tolist()) for f in st.facts},
                     **{item: tuple(snap.index.cells.meta(uid).tolist())
                        for uid, (_, _, item) in snap.index.cell_key.items()}},
    }


def test_published_snapshot_never_changes_after_later_writes(scripted_forest) -> None:
    forest = scripted_forest()
    sessions = make_sessions(8, 4)
    forest.ingest_sessions("u", sessions[:5])
    snap = forest.snapshot("u")
    before = fingerprint(snap)
    forest.ingest_sessions("u", [sessions[5]])
    forest.delete_session("u", "s001")
    forest.correct_session("u", {**sessions[6], "session_id": "s002"})
    assert fingerprint(snap) == before
    assert forest.snapshot("u").version == snap.version + 3
    assert forest.check("u")["ok"]


def test_the_resident_version_equals_the_store_as_occurrences_come_and_go(scripted_forest, tmp_path) -> None:
    """A fact said again gets only its new occurrence rows; one losing an occurrence is rewritten."""
    said = "I keep my old bicycle in the hallway near the front door."
    sessions = [{"session_id": f"r{i}", "timestamp": f"2023-03-{i + 1:02d}T10:00",
                 "turns": [{"role": "user", "content": said},
                           {"role": "assistant", "content": f"Noted, entry {i}."}]}
                for i in range(6)]
    forest = scripted_forest(path=tmp_path / "st")
    forest.ingest_sessions("u", sessions[:2])
    for session in sessions[2:5]:
        forest.ingest_sessions("u", [session])
    forest.delete_session("u", "r1")
    forest.correct_session("u",
                           {**sessions[0],
                            "turns": [{"role": "user", "content": "I sold the bicycle last week."}]})
    forest.ingest_sessions("u", [sessions[5]])
    resident = fingerprint(forest.snapshot("u"))
    fresh = fingerprint(scripted_forest(path=tmp_path / "st").snapshot("u"))
    resident.pop("index"), fresh.pop("index")
    assert resident == fresh
    assert max(len(occ) for _, occ in resident["facts"].values()) == 4  # r2, r3, r4, r5
    assert forest.check("u")["ok"]
    with sqlite3.connect(tmp_path / "st" / "users" / "u" / "memory.sqlite") as con:
        rows = con.execute("SELECT fact_id, seq, session_id FROM occurrences "
                           "ORDER BY fact_id, seq").fetchall()
    seqs: dict[str, list[tuple[int, str]]] = {}
    for fid, seq, sid in rows:
        seqs.setdefault(fid, []).append((seq, sid))
    # edited in place: r0 and r1 lost their rows, the others kept their numbers, r5 came after
    assert [(0, "r1"), (1, "r2")] not in seqs.values() and max(seqs.values(), key=len) == [
        (2, "r2"), (3, "r3"), (4, "r4"), (5, "r5")]


def test_write_by_another_process_is_seen(scripted_forest, tmp_path) -> None:
    one = scripted_forest(path=tmp_path / "st")
    two = scripted_forest(path=tmp_path / "st")
    sessions = make_sessions(4, 4)
    one.ingest_sessions("u", sessions[:2])
    assert two.snapshot("u").version == 1
    two.ingest_sessions("u", [sessions[2]])  # commits version 2; `one` still holds version 1
    report = one.ingest_sessions("u", [sessions[3]])  # reloads version 2 before writing
    assert (report.version == 3
            and set(one.snapshot("u").state.sessions) == {s["session_id"] for s in sessions})
    assert one.check("u")["ok"]


def test_a_large_loaded_memory_is_frozen_out_of_the_collector_and_still_freed(scripted_forest, tmp_path,
                                                                             monkeypatch) -> None:
    advised: list[int] = []

    def advise_later(done=None) -> None:
        advised.append(1)

    monkeypatch.setattr("memforest.resident.heap.advise_heap_later", advise_later)
    writer = scripted_forest(path=tmp_path / "st")
    small = scripted_forest(path=tmp_path / "st")  # the default bound: this store is far below it
    large = scripted_forest(path=tmp_path / "st")
    large.config.heap_freeze_nodes, large.config.huge_pages = 1, True  # every store counts as large
    plain = scripted_forest(path=tmp_path / "st")
    plain.config.heap_freeze_nodes, plain.config.huge_pages = 1, False
    sessions = make_sessions(3, 4)
    writer.ingest_sessions("u", sessions[:2])
    gc.unfreeze()
    try:
        small.snapshot("u")
        assert gc.get_freeze_count() == 0 and not advised
        old = weakref.ref(large.snapshot("u").state)
        assert gc.get_freeze_count() > 0 and advised == [1]  # frozen, then backed by huge pages
        plain.snapshot("u")
        assert advised == [1]  # huge_pages off: frozen only
        writer.ingest_sessions("u", [sessions[2]])
        assert large.snapshot("u").version == 2  # reloaded: the frozen version is no longer held...
        assert old() is None  # ...and reference counting alone freed it (no cycle keeps it alive)
    finally:
        gc.unfreeze()


def test_smaps_listing_selects_private_anonymous_writable_mappings() -> None:
    smaps = "\n".join([
        "55d0c0000000-55d0c0400000 rw-p 00000000 00:00 0                          [heap]", "Rss:  4096 kB",
        "7f0000000000-7f0000800000 rw-p 00000000 00:00 0 ", "Size: 8192 kB", "Rss:  2048 kB",
        "7f0000800000-7f0000a00000 rw-s 00000000 00:05 12                         /dev/zero (deleted)",
        "Rss: 8 kB", "7f0000a00000-7f0000c00000 r--p 00000000 08:01 99                         "
                     "/usr/lib/libc.so.6", "Rss: 8 kB",
        "7f0000c00000-7f0000e00000 rw-p 00001000 08:01 99                         /usr/lib/libc.so.6",
        "Rss: 8 kB", "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]",
        "Rss: 132 kB",
    ])
    assert private_anonymous(smaps) == [Mapping(0x55D0C0000000, 0x55D0C0400000, 4096 * 1024),
                                        Mapping(0x7F0000000000, 0x7F0000800000, 2048 * 1024)]


def test_thp_mode_reads_the_bracketed_choice(tmp_path) -> None:
    (tmp_path / "enabled").write_text("always [madvise] never\n")
    assert thp_mode(tmp_path) == "madvise"
    assert thp_mode(tmp_path / "absent") is None


def test_advising_the_heap_reports_what_it_did_and_keeps_memory_intact() -> None:
    block = np.arange(8 << 20, dtype=np.int64)  # 64 MiB, every page written
    report = advise_heap()
    assert 0 <= report.collapsed_bytes <= report.advised_bytes and report.seconds >= 0
    assert report.advised_bytes > 0 or report.reason  # did something, or says why not
    assert int(block[-1]) == (8 << 20) - 1 and int(block.sum()) == (8 << 20) * ((8 << 20) - 1) // 2


def test_operations_can_wait_for_the_background_work_of_a_large_load(scripted_forest, tmp_path) -> None:
    writer = scripted_forest(path=tmp_path / "st")
    writer.ingest_sessions("u", make_sessions(2, 4))
    large = scripted_forest(path=tmp_path / "st")
    # every store counts as large: its heap is collapsed in the background
    large.config.heap_freeze_nodes, large.config.huge_pages = 1, True
    try:
        large.snapshot("u")
        assert large.wait_settled(60)
        assert large.wait_settled(0)  # nothing left running
        assert large.query("u", "Boston", answer=False).evidence
    finally:
        gc.unfreeze()


def test_advising_the_heap_later_reports_from_its_own_thread() -> None:
    reports: list[tuple[HugePageReport, str]] = []
    thread = advise_heap_later(lambda r: reports.append((r, threading.current_thread().name)))
    thread.join(timeout=60)
    assert not thread.is_alive() and thread.daemon
    (report, name), = reports
    assert name == "memforest-huge-pages" and (report.advised_bytes > 0 or report.reason)


def test_stage_timings_cover_the_wall_time(scripted_forest) -> None:
    forest = scripted_forest()
    report = forest.ingest_sessions("u", make_sessions(3, 4))
    stages = {k: v for k, v in report.timings.items() if k != "total"}
    assert {"lock", "load", "commit", "index", "publish"} <= set(stages)
    assert abs(sum(stages.values()) - report.timings["total"]) <= 1e-4  # a partition of the wall time
    for timings in (forest.delete_session("u", "s001")["timings"],
                    forest.correct_session("u", make_sessions(3, 4)[0])["timings"],
                    forest.query("u", "what about Boston", answer=False).trace["latency"]):
        assert abs(sum(v for k, v in timings.items() if k != "total") - timings["total"]) <= 1e-4, timings
    assert {"snapshot", "embed", "recall", "browse", "assemble"} <= set(timings)


def test_reader_during_a_long_write_returns_the_previous_version(scripted_forest) -> None:
    forest = scripted_forest()
    sessions = make_sessions(12, 6)
    forest.ingest_sessions("u", sessions[:10])
    assert forest._llm is not None
    forest._llm.latency_s = 0.05  # every model call of the next write is slow
    writing = threading.Thread(target=forest.ingest_sessions, args=("u", sessions[10:]))
    writing.start()
    time.sleep(0.2)
    assert writing.is_alive()
    t = time.perf_counter()
    result = forest.query("u", "topic about Boston", answer=False)
    waited = time.perf_counter() - t
    still_writing = writing.is_alive()
    writing.join()
    assert still_writing and result.trace["version"] == 1 and waited < 5.0
    assert forest.snapshot("u").version == 2


def test_cow_map_fork_is_independent() -> None:
    base = CowMap({i: i for i in range(10)})
    fork = base.fork()
    fork[3], fork[20] = -3, 20
    del fork[4]
    assert base[3] == 3 and 4 in base and 20 not in base and len(base) == 10
    assert fork[3] == -3 and 4 not in fork and len(fork) == 10 and sorted(fork)[-1] == 20


def test_vector_table_versions_remove_and_search() -> None:
    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(50, 8)).astype(np.float32)
    table = VectorTable(8)
    table.upsert(list(range(50)), vecs)
    old = table
    new = table.fork()
    new.remove([7])
    new.upsert([8], -vecs[8:9])
    ids, _ = old.search(vecs[7], 1)
    assert ids.tolist() == [7]
    ids, _ = new.search(vecs[7], 50)
    assert 7 not in ids.tolist() and len(new) == 49
    ids, _ = new.search(-vecs[8], 1)
    assert ids.tolist() == [8]
    ids, _ = old.search(vecs[8], 1)
    assert ids.tolist() == [8]
    rows = new._n
    new.upsert([9], vecs[9:10])  # the vector it holds: no new row
    assert new._n == rows
    for i in range(3000):  # retired rows are compacted away; results stay exact
        new.upsert([9], vecs[9:10] * (1 + i % 2))
    ids, _ = new.search(vecs[9], 1)
    assert ids.tolist() == [9] and len(new) == 49 and new._n < 3000


# the occurrences before schema 7: a table with row ids, its rows in the order they were written
ROWID_OCCURRENCES = """
CREATE TABLE occurrences_v6 (fact_id TEXT NOT NULL, seq INTEGER NOT NULL, session_id TEXT NOT NULL,
  cell_id TEXT NOT NULL, turn_lo INTEGER NOT NULL, turn_hi INTEGER NOT NULL, source_time REAL NOT NULL,
  event_start REAL, event_end REAL, PRIMARY KEY (fact_id, seq));
INSERT INTO occurrences_v6 SELECT * FROM occurrences ORDER BY session_id, fact_id, seq;
DROP TABLE occurrences; ALTER TABLE occurrences_v6 RENAME TO occurrences;
CREATE INDEX occurrences_by_session ON occurrences(session_id);
"""
# the indexes before schema 5: `cells_by_session`, not `cells_in_order` and `facts_opened` (nor
# schema 6's `facts_by_norm` and `sessions_opened`)
OLD_INDEXES = ROWID_OCCURRENCES + """
DROP INDEX cells_in_order; DROP INDEX facts_by_norm; DROP INDEX sessions_opened;
CREATE INDEX cells_by_session ON cells(session_id);
"""
V1_ENTITIES = OLD_INDEXES + """
ALTER TABLE entities RENAME TO entities_v2;
CREATE TABLE entities (label TEXT PRIMARY KEY, facts TEXT NOT NULL, sessions TEXT NOT NULL, tree_id TEXT);
INSERT INTO entities SELECT e.label,
  (SELECT json_group_array(fact_id) FROM entity_facts f WHERE f.label = e.label),
  (SELECT json_group_object(session_id, facts) FROM entity_sessions s WHERE s.label = e.label), e.tree_id
  FROM entities_v2 e;
DROP TABLE entities_v2; DROP TABLE entity_facts; DROP TABLE entity_sessions;
DROP INDEX nodes_structure; DROP TABLE cell_sentences;
UPDATE meta SET value = '1' WHERE key = 'schema_version';
"""
V2_NODES = OLD_INDEXES + """
DROP INDEX nodes_structure; DROP TABLE cell_sentences;
UPDATE meta SET value = '2' WHERE key = 'schema_version';
"""
V3_SENTENCES = OLD_INDEXES + """
DROP TABLE cell_sentences;
UPDATE meta SET value = '3' WHERE key = 'schema_version';
"""
V4_INDEXES = OLD_INDEXES + """
UPDATE meta SET value = '4' WHERE key = 'schema_version';
"""
V6_OCCURRENCES = ROWID_OCCURRENCES + """
UPDATE meta SET value = '6' WHERE key = 'schema_version';
"""
V5_OPENED = ROWID_OCCURRENCES + """
DROP INDEX facts_by_norm; DROP INDEX sessions_opened;
CREATE INDEX facts_opened ON facts(fact_id, norm, event_start);
UPDATE meta SET value = '5' WHERE key = 'schema_version';
"""


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5, 6])
def test_an_older_store_is_migrated_when_opened_and_reads_the_same(scripted_forest, tmp_path,
                                                                   version: int) -> None:
    """Schema 1 kept an entity's facts and session counts as JSON in its row; schema 2 had no index of
    the nodes' places in their trees; schema 3 had no sentence vectors of cells; schema 4 no indexes of
    what an open reads of cells and facts; schema 5 none of the facts by normalised text, nor of the
    sessions' ids and times; schema 6 kept the occurrences in a table with row ids. Opening such a store
    brings it to this schema in one transaction, and the memory reads as before (its trees' structure,
    cells and facts through the new indexes, each fact's occurrences in one run of rows)."""
    forest = scripted_forest(path=tmp_path / "st")
    forest.ingest_sessions("u", make_sessions(8, 4))
    before = fingerprint(forest.snapshot("u"))
    assert any(e[0] for e in before["entities"].values())
    db = tmp_path / "st" / "users" / "u" / "memory.sqlite"
    with sqlite3.connect(db) as con:
        older = {1: V1_ENTITIES, 2: V2_NODES, 3: V3_SENTENCES, 4: V4_INDEXES, 5: V5_OPENED, 6: V6_OCCURRENCES}
        con.executescript(older[version])
    reopened = scripted_forest(path=tmp_path / "st")
    assert (reopened.check("u")["problems"]
            == [f"{db} has schema version {version}, older than {SCHEMA_VERSION}: any MemForest command "
                 "that opens it for use migrates it"])
    assert fingerprint(reopened.snapshot("u")) == before
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (
            str(SCHEMA_VERSION),)
        plan = con.execute(f"EXPLAIN QUERY PLAN SELECT {STRUCTURE} FROM nodes WHERE tree_id = 'x'").fetchall()
        assert "COVERING INDEX nodes_structure" in str(plan)
        cells = "SELECT cell_id, session_id, idx, turn_lo, turn_hi, time FROM cells ORDER BY session_id, idx"
        assert "COVERING INDEX cells_in_order" in str(con.execute(f"EXPLAIN QUERY PLAN {cells}").fetchall())
        for query, index in (("SELECT fact_id FROM facts WHERE norm = 'x'", "facts_by_norm"),
                             ("SELECT session_id, time FROM sessions", "sessions_opened")):
            assert f"COVERING INDEX {index}" in str(con.execute(f"EXPLAIN QUERY PLAN {query}").fetchall())
        for gone in ("cells_by_session", "facts_opened", "occurrences_v7"):
            assert not con.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (gone,)).fetchall()
        (table,) = con.execute("SELECT sql FROM sqlite_master WHERE name = 'occurrences'").fetchone()
        assert table.endswith("WITHOUT ROWID")
        assert "INDEX occurrences_by_session" in str(con.execute(
            "EXPLAIN QUERY PLAN SELECT fact_id FROM occurrences WHERE session_id = 'x'").fetchall())
    reopened.ingest_sessions("u", make_sessions(9, 4)[8:])
    assert reopened.check("u")["ok"]


def test_cow_set_fork_is_independent() -> None:
    base = CowSet(range(10))
    fork = base.fork()
    fork.add(20)
    fork.discard(3)
    assert 3 in base and 20 not in base and len(base) == 10
    assert 3 not in fork and 20 in fork and len(fork) == 10 and {1, 2, 50} & fork == {1, 2}


def test_a_write_records_only_the_entity_members_it_changed(scripted_forest) -> None:
    """The commit writes an entity's member rows from what the write's copy edited, not all of them."""
    forest = scripted_forest()
    sessions = [{"session_id": f"r{i:02d}", "timestamp": f"2023-04-{i + 1:02d}T09:00", "turns": [
        {"role": "user", "content": f"I met Ravi at the market and we planted {i} rows of beans."},
        {"role": "assistant", "content": "That sounds like a productive morning."}]} for i in range(13)]
    forest.ingest_sessions("u", sessions[:12])
    forest.ingest_sessions("u", sessions[12:])
    ravi = forest.snapshot("u").state.entities["ravi"]
    assert len(ravi.facts) == 13 and len(ravi.sessions) == 13
    assert ravi.edited is not None and [len(ravi.edited[0]), len(ravi.edited[1])] == [1, 1]
    assert forest.check("u")["ok"]


def test_writes_go_to_the_file_at_the_stores_path_after_it_is_replaced(scripted_forest, tmp_path) -> None:
    """A writer's held connection (warm across writes) is dropped when the database at the path is
    another file (a store restored from a copy): the next write lands in that file."""
    import shutil

    forest = scripted_forest(path=tmp_path / "st")
    sessions = make_sessions(4, 4)
    forest.ingest_sessions("u", sessions[:2])
    forest.ingest_sessions("u", [sessions[2]])  # written through the held connection
    db = tmp_path / "st" / "users" / "u" / "memory.sqlite"
    with sqlite3.connect(db) as con:
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    shutil.copy(db, tmp_path / "copy.sqlite")
    (tmp_path / "copy.sqlite").replace(db)  # same contents, another file
    report = forest.ingest_sessions("u", [sessions[3]])
    fresh = scripted_forest(path=tmp_path / "st").snapshot("u")
    assert report.version == fresh.version == 3
    assert set(fresh.state.sessions) == {s["session_id"] for s in sessions}
    assert forest.check("u")["ok"]


def test_rows_the_store_lost_are_written_whole_by_the_next_write_that_changes_them(
        scripted_forest, tmp_path) -> None:
    """Changed nodes, trees and scenes the store holds are updated in place; one whose row is missing
    (a store that does not hold what the resident version says) is inserted instead of silently
    skipped."""
    forest = scripted_forest(path=tmp_path / "st")
    sessions = make_sessions(4, 4)
    forest.ingest_sessions("u", sessions[:3])
    snap = forest.snapshot("u")
    tid = "entity:user"  # the next session's user facts join it: its root is rewritten
    root = snap.state.trees[tid].tree.root
    db = tmp_path / "st" / "users" / "u" / "memory.sqlite"
    with sqlite3.connect(db) as con:
        con.execute("DELETE FROM nodes WHERE tree_id=? AND node_id=?", (tid, root))
        con.execute("DELETE FROM trees WHERE tree_id=?", (tid,))
        con.execute("DELETE FROM scenes")
    forest.ingest_sessions("u", [sessions[3]])
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT count(*) FROM nodes WHERE tree_id=? AND node_id=?",
                           (tid, root)).fetchone() == (1,)
        assert con.execute("SELECT count(*) FROM trees WHERE tree_id=?", (tid,)).fetchone() == (1,)
        assert con.execute("SELECT count(*) FROM scenes").fetchone()[0] >= 2
    resident = fingerprint(forest.snapshot("u"))
    fresh = fingerprint(scripted_forest(path=tmp_path / "st").snapshot("u"))
    resident.pop("index"), fresh.pop("index")
    assert resident == fresh


def test_entity_counts_equal_a_count_from_the_facts_as_sessions_come_go_and_change(scripted_forest) -> None:
    """Counts kept from what each write gained and lost (a session said again, deleted, corrected)
    equal counting every entity's facts over their sessions afresh."""
    from memforest.routing.entities import session_counts

    said = "I met Ravi at the market near the old bridge."
    sessions = [{"session_id": f"r{i:02d}", "timestamp": f"2023-04-{i + 1:02d}T09:00", "turns": [
        {"role": "user",
         "content": said if i % 2 else f"I met Ravi at the market and we planted {i} rows of beans."},
        {"role": "assistant", "content": "That sounds like a productive morning."}]} for i in range(9)]
    forest = scripted_forest()
    forest.ingest_sessions("u", sessions[:4])
    for session in sessions[4:8]:
        forest.ingest_sessions("u", [session])
    forest.delete_session("u", "r03")  # a fact said in r01, r03, r05, r07 loses one session
    forest.delete_session("u", "r04")  # one said only there goes
    forest.correct_session("u", {**sessions[7], "session_id": "r05"})  # said in r05: lost, then gained anew
    forest.correct_session("u", {**sessions[1], "session_id": "r06"})  # r06 now says the repeated one
    forest.correct_session("u", {**sessions[8], "session_id": "r07"})  # r07 no longer does
    state = forest.snapshot("u").state
    ravi = state.entities["ravi"]
    assert max(state.facts[f].sorted_sessions for f in ravi.facts
               if state.facts[f].text.endswith("bridge.")) == (
        "r01", "r05", "r06")
    for label, stat in state.entities.items():
        assert dict(stat.sessions) == session_counts(state, stat), label
    assert forest.check("u")["ok"]


def test_operations_on_a_large_memory_freeze_what_they_leave(tmp_path) -> None:
    """Past `heap_freeze_nodes`, every write and query collects what is not frozen yet and freezes what
    survives (a `collect` stage in its timings); below it, none does."""
    from memforest.api import MemForest
    from memforest.config import MemForestConfig
    from memforest.llm.testing import HashEmbedder, ScriptedChatModel

    try:
        for limit, large in ((10**9, False), (1, True)):
            gc.unfreeze()
            forest = MemForest(tmp_path / str(limit), MemForestConfig(heap_freeze_nodes=limit),
                               llm=ScriptedChatModel(), embedder=HashEmbedder())
            with forest:
                report = forest.ingest_sessions("u", make_sessions(3, 4))
                assert ("collect" in report.timings) is large and (gc.get_freeze_count() > 0) is large
                gc.unfreeze()
                trace = forest.query("u", "what about Boston", answer=False).trace
                assert ("collect" in trace["latency"]) is large and (gc.get_freeze_count() > 0) is large
                assert ("collect" in forest.delete_session("u", "s001")["timings"]) is large
    finally:
        gc.unfreeze()


def test_the_library_leaves_the_garbage_collector_and_pages_alone_unless_the_host_asks(
        scripted_forest, tmp_path, monkeypatch) -> None:
    """A memory embedded in another's process changes nothing process-wide by default; the host's
    policy (`with_host_policy`, as the CLI and the harness take it) turns freezing and page advice on."""
    from memforest.config import HOST_POLICY, MemForestConfig, with_host_policy

    advised: list[int] = []
    monkeypatch.setattr("memforest.resident.heap.advise_heap_later", lambda done=None: advised.append(1))
    assert MemForestConfig().heap_freeze_nodes is None and MemForestConfig().huge_pages is None
    hosted = with_host_policy(MemForestConfig())
    assert (hosted.heap_freeze_nodes, hosted.huge_pages) == (HOST_POLICY["heap_freeze_nodes"], True)
    assert with_host_policy(MemForestConfig(heap_freeze_nodes=0)).heap_freeze_nodes == 0  # the user's choice
    writer = scripted_forest(path=tmp_path / "st")
    writer.ingest_sessions("u", make_sessions(2, 4))
    guest = scripted_forest(path=tmp_path / "st")
    gc.unfreeze()
    try:
        guest.snapshot("u")
        guest.query("u", "what happened?")
        assert gc.get_freeze_count() == 0 and not advised
    finally:
        gc.unfreeze()
