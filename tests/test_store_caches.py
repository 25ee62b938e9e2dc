"""Caches beside the store (the lexical index in query-ready form): written atomically, used only for
the committed version they reflect, and a damaged, stale or older-format cache is detected, never
trusted, and rebuilt with identical results."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
from conftest import make_sessions

from memforest.index import lexical_cache, partition_cache
from memforest.index.lexical_cache import build_lexical, read_lexical, write_lexical
from memforest.index.lexical_versions import VersionedLexical
from memforest.index.partition_cache import read_partitions, write_partitions
from memforest.resident import cache_file
from memforest.resident.cache_file import CacheMiss, read_arrays, write_arrays
from memforest.resident.vector_table import SavedPartitions

QUESTIONS = ["Where did I move to?", "What do I keep near the door in Boston?", "Denver trip plans"]


def _miss(found: object) -> str:
    """Why a cache was refused (failing the test when it was used)."""
    assert isinstance(found, CacheMiss), found
    return found.reason


def _cache_path(forest, user: str = "u"):
    return forest.user_dir(user) / "cache" / lexical_cache.FILE_NAME


def _answers(forest, user: str = "u") -> list[list[tuple[str, str, float]]]:
    out = []
    for q in QUESTIONS:
        result = forest.query(user, q, answer=False)
        out.append([(e.id, e.text, round(e.score, 9)) for e in result.evidence])
    return out


def _stored(scripted_forest, tmp_path):
    """A store of a few sessions, queried once and closed: its lexical cache written."""
    forest = scripted_forest(path=tmp_path / "store")
    forest.ingest_sessions("u", make_sessions(6, 4))
    before = _answers(forest)
    forest.close()
    return before


def _reopened_without_building(scripted_forest, tmp_path, monkeypatch):
    """A new process's view of the store in which building the lexical index fails the test."""
    forest = scripted_forest(path=tmp_path / "store")

    def refuse(state):
        raise AssertionError("the lexical index was rebuilt although the cache serves this version")
    monkeypatch.setattr("memforest.versions.caches.build_lexical", refuse)
    return forest


def test_a_reopened_store_queries_from_the_cache_with_identical_results(scripted_forest, tmp_path,
                                                                          monkeypatch) -> None:
    before = _stored(scripted_forest, tmp_path)
    forest = _reopened_without_building(scripted_forest, tmp_path, monkeypatch)
    assert _cache_path(forest).is_file()
    assert _answers(forest) == before
    assert isinstance(forest.snapshot("u").lexical, VersionedLexical)


def test_writes_leave_the_cache_stale_and_close_rewrites_it(scripted_forest, tmp_path, monkeypatch) -> None:
    _stored(scripted_forest, tmp_path)
    forest = scripted_forest(path=tmp_path / "store")
    _answers(forest)
    path = _cache_path(forest)
    written = path.read_bytes()
    forest.ingest_sessions("u", make_sessions(8, 4)[6:])
    forest.delete_session("u", "s001")
    assert path.read_bytes() == written  # operations never write the cache
    after = _answers(forest)
    forest.close()
    assert path.read_bytes() != written
    reopened = _reopened_without_building(scripted_forest, tmp_path, monkeypatch)
    assert _answers(reopened) == after


def _header(path) -> dict:
    raw = path.read_bytes()
    _, n, _ = struct.unpack_from("<8sII", raw)
    return json.loads(raw[16:16 + n])


def _rewrite_header(path, **changes) -> None:
    """Rewrite the header with `changes`, checksummed correctly: a cache written by another version."""
    raw = path.read_bytes()
    magic, n, _ = struct.unpack_from("<8sII", raw)
    header = json.loads(raw[16:16 + n])
    header.update(changes)
    new = json.dumps(header, separators=(",", ":")).encode()
    assert len(new) <= n
    new += b" " * (n - len(new))
    import zlib
    path.write_bytes(struct.pack("<8sII", magic, n, zlib.crc32(new)) + new + raw[16 + n:])


DAMAGE = {
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]),
    "truncated to nothing": lambda p: p.write_bytes(b""),
    "zeroed": lambda p: p.write_bytes(b"\0" * len(p.read_bytes())),
    "zeroed payload": lambda p: p.write_bytes(p.read_bytes()[:-64] + b"\0" * 64),
    "one flipped byte": lambda p: p.write_bytes(
        (lambda b: b[:-100] + bytes([b[-100] ^ 0xFF]) + b[-99:])(p.read_bytes())),
    "older format": lambda p: _rewrite_header(p, format=lexical_cache.FORMAT - 1),
    "older checksum": lambda p: _rewrite_header(p, checksum="crc32"),
    "another store version": lambda p: _rewrite_header(p, store_version="1:0.0"),
    "garbage": lambda p: p.write_bytes(b"not a cache at all" * 100),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_or_stale_cache_is_detected_and_rebuilt(scripted_forest, tmp_path, damage) -> None:
    before = _stored(scripted_forest, tmp_path)
    forest = scripted_forest(path=tmp_path / "store")
    path = _cache_path(forest)
    DAMAGE[damage](path)
    state = forest.snapshot("u").state
    stamp = forest._resident.caches_of("u", forest._open_db("u", False)).db.stamp(state.version)
    assert isinstance(read_lexical(path, stamp, state), CacheMiss)
    assert _answers(forest) == before  # rebuilt from the store, not read from the damaged file
    assert not isinstance(read_lexical(path, stamp, state), CacheMiss)  # and the cache rewritten


@pytest.mark.parametrize("damage", ["truncated", "zeroed", "older format"])
def test_check_reports_a_damaged_cache_and_rebuilds_it(scripted_forest, tmp_path, monkeypatch,
                                                        damage) -> None:
    before = _stored(scripted_forest, tmp_path)
    forest = scripted_forest(path=tmp_path / "store")
    DAMAGE[damage](_cache_path(forest))
    report = forest.check("u")
    assert report["ok"] and report["caches_rebuilt"]
    assert any("lexical cache" in c for c in report["cache"])
    again = forest.check("u")
    assert again["ok"] and not again["caches_rebuilt"] and again["cache"] == []
    forest.close()
    reopened = _reopened_without_building(scripted_forest, tmp_path, monkeypatch)
    assert _answers(reopened) == before


def _postings_changed(arrays: dict, where: str) -> None:
    """One term's postings made to name no document (or to descend), the file otherwise whole."""
    positions, offsets, n = arrays["positions"].copy(), arrays["offsets"], len(arrays["lengths"])
    term = int(np.argmax(np.diff(offsets)))  # (the term of most postings)
    lo, hi = int(offsets[term]), int(offsets[term + 1])
    if where == "first":
        positions[lo] = -1
    elif where == "last":
        positions[hi - 1] = n
    else:
        positions[lo], positions[hi - 1] = positions[hi - 1], positions[lo]
    arrays["positions"] = positions


@pytest.mark.parametrize("where", ["first", "last", "descending"])
def test_a_cache_whose_postings_name_no_document_is_not_used(scripted_forest, tmp_path, where) -> None:
    """A whole, checksummed lexical cache whose postings of a term begin or end outside the documents
    (or descend) is refused: a term's first and last postings are checked, not all of them."""
    before = _stored(scripted_forest, tmp_path)
    forest = scripted_forest(path=tmp_path / "store")
    path = _cache_path(forest)
    state = forest.snapshot("u").state
    stamp = forest._resident.caches_of("u", forest._open_db("u", False)).db.stamp(state.version)
    found = read_arrays(path, lexical_cache.KIND, lexical_cache.FORMAT, stamp)
    assert isinstance(found, dict) and not isinstance(read_lexical(path, stamp, state), CacheMiss)
    arrays = {k: np.array(v) for k, v in found.items()}
    _postings_changed(arrays, where)
    write_arrays(path, lexical_cache.KIND, lexical_cache.FORMAT, stamp, arrays)
    missed = read_lexical(path, stamp, state)
    assert isinstance(missed, CacheMiss) and "inconsistent arrays" in missed.reason
    assert _answers(forest) == before  # rebuilt from the store


def test_a_cache_of_other_documents_is_not_used(scripted_forest, tmp_path) -> None:
    """A cache whose documents are not the state's (another store's, at the same version) is refused."""
    _stored(scripted_forest, tmp_path)
    forest = scripted_forest(path=tmp_path / "store")
    state = forest.snapshot("u").state
    stamp = forest._resident.caches_of("u", forest._open_db("u", False)).db.stamp(state.version)
    path = tmp_path / "other.cache"
    write_lexical(path, stamp, VersionedLexical([("x1", "something else entirely")]))
    assert "documents" in _miss(read_lexical(path, stamp, state))


def test_the_cached_index_scores_exactly_as_a_fresh_build(scripted_forest, tmp_path) -> None:
    """After versions that remove and replace documents, the compacted, cached index gives every query
    the scores a fresh index of the live documents gives."""
    forest = scripted_forest(path=tmp_path / "store")
    forest.ingest_sessions("u", make_sessions(6, 4))
    snap = forest.snapshot("u")
    _ = snap.lexical
    forest.ingest_sessions("u", make_sessions(9, 4)[6:])
    forest.delete_session("u", "s002")
    forest.correct_session("u", {**make_sessions(9, 4)[8], "session_id": "s003"})
    snap = forest.snapshot("u")
    carried = snap.lexical
    assert len(carried.segments) >= 1
    path = tmp_path / "lexical.cache"
    write_lexical(path, "v", carried)
    cached = read_lexical(path, "v", snap.state)
    assert isinstance(cached, VersionedLexical)
    fresh = build_lexical(snap.state)
    for q in [*QUESTIONS, "Boston Davis Miami Austin", "session hallway bicycle"]:
        want = fresh.scores(q).items()
        assert cached.scores(q).items() == want
        assert carried.scores(q).items() == want
    docs = [d for d, _ in lexical_cache.documents(snap.state)]
    assert np.array_equal(cached.scores("Boston Denver").get_many(docs),
                          fresh.scores("Boston Denver").get_many(docs))


def test_cache_files_round_trip_and_refuse_what_they_do_not_hold(tmp_path) -> None:
    path = tmp_path / "a.cache"
    arrays: dict[str, np.ndarray] = {"f": np.arange(10, dtype=np.float64).reshape(2, 5),
                                     "i": np.arange(7, dtype=np.int32), "empty": np.zeros(0, np.int64),
                                     **cache_file.pack_strings(["ab", "", "ünï", "x"])}
    size = write_arrays(path, "kind", 3, "7:1.5", arrays)
    assert size == path.stat().st_size
    got = read_arrays(path, "kind", 3, "7:1.5")
    assert not isinstance(got, CacheMiss)
    for name, arr in arrays.items():
        assert got[name].dtype == arr.dtype and np.array_equal(got[name], arr)
        assert not got[name].flags.writeable
    assert cache_file.unpack_strings(got["blob"], got["ends"]) == ["ab", "", "ünï", "x"]
    assert "format" in _miss(read_arrays(path, "kind", 4, "7:1.5"))
    assert "other" in _miss(read_arrays(path, "other", 3, "7:1.5"))
    assert "store version" in _miss(read_arrays(path, "kind", 3, "8:1.5"))
    assert "missing" in _miss(read_arrays(tmp_path / "none.cache", "kind", 3, "7:1.5"))
    assert [p.name for p in tmp_path.iterdir()] == ["a.cache"]  # no temporary file left behind


def _table(keys, vecs, exact_rows=40, batch=25):
    from memforest.resident.vector_table import VectorTable

    table = VectorTable(vecs.shape[1], exact_rows=exact_rows)
    for lo in range(0, len(keys), batch):  # grown in batches: partitions trained, then split as they fill
        table.upsert(keys[lo: lo + batch], vecs[lo: lo + batch])
    return table


def test_a_table_filled_with_saved_partitions_searches_as_the_saved_table(monkeypatch) -> None:
    from memforest.resident.vector_table import VectorTable

    monkeypatch.setattr("memforest.resident.vector_table.PARTITION_ROWS", 32)

    rng = np.random.default_rng(3)
    vecs = rng.standard_normal((400, 16)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    keys = [f"k{i}" for i in range(400)]
    saved_table = _table(keys, vecs)
    saved = saved_table.saved_partitions()
    assert saved is not None and sorted(saved.keys) == sorted(keys) and len(saved.bounds) > 2
    order = rng.permutation(400)  # the store gives rows in another order than they came in
    filled = VectorTable(16, exact_rows=40)
    assert filled.fill([keys[i] for i in order], vecs[order], None, saved)
    restored = filled.saved_partitions()
    assert restored is not None and restored.bounds.tolist() == saved.bounds.tolist()
    for q in rng.standard_normal((20, 16)).astype(np.float32):
        for k, probe in ((5, 60), (10, 150)):  # probes of a few partitions: the same rows scored
            got = filled.top(*filled.candidate_scores(q, probe), k)
            want = saved_table.top(*saved_table.candidate_scores(q, probe), k)
            assert [key for key, _ in got] == [key for key, _ in want]
            assert np.allclose([v for _, v in got], [v for _, v in want], atol=1e-5)
    stale = VectorTable(16, exact_rows=40)  # partitions of other keys: trained afresh instead
    assert not stale.fill(keys[:-1] + ["other"], vecs, None, saved)
    assert stale.partitions is not None and len(stale) == 400


def test_a_table_takes_cached_rows_without_their_vectors_and_appends_privately(tmp_path, monkeypatch) -> None:
    """A table filled from a partitions cache with rows searches them in the file's map (the vectors
    it was given are never asked for); new rows go to the map's zero rows, then past them to private
    memory, and neither the file nor an older version changes."""
    from memforest.resident.vector_table import VectorTable, slack_rows

    monkeypatch.setattr("memforest.resident.vector_table.PARTITION_ROWS", 32)
    rng = np.random.default_rng(5)
    vecs = rng.standard_normal((400, 16)).astype(np.float32)
    keys = [f"k{i}" for i in range(400)]
    saved_table = _table(keys, vecs)
    path = tmp_path / "partitions.cache"
    write_partitions(path, "3:1.0", {"facts": saved_table.saved_partitions(rows=True)})
    written = path.read_bytes()
    found = read_partitions(path, "3:1.0")
    assert not isinstance(found, CacheMiss)
    saved = found["facts"]
    assert saved.vecs is not None and saved.vecs.shape == (400 + slack_rows(400), 16)

    def unused():
        raise AssertionError("the vectors were asked for although the cached rows serve")
    order = rng.permutation(400)
    table = VectorTable(16, exact_rows=40)
    assert table.fill([keys[i] for i in order], unused, None, saved)
    assert all(np.array_equal(table.vector(k), vecs[i]) for i, k in enumerate(keys))
    for q in rng.standard_normal((10, 16)).astype(np.float32):
        got = table.top(*table.candidate_scores(q, 60), 5)
        assert [k for k, _ in got] == [k for k, _ in saved_table.top(*saved_table.candidate_scores(q, 60), 5)]
    new = table.fork()
    fresh = rng.standard_normal((3, 16)).astype(np.float32)
    new.upsert(["n0", "n1", keys[0]], fresh)
    assert np.array_equal(new.vectors(["n0", "n1", keys[0]]), fresh)
    assert np.array_equal(table.vector(keys[0]), vecs[0]) and "n0" not in table
    grown = new.fork()
    more = rng.standard_normal((slack_rows(400) + 10, 16)).astype(np.float32)
    grown.upsert([f"m{i}" for i in range(len(more))], more)  # past the zero rows: copied out of the map
    assert np.array_equal(grown.vectors([f"m{i}" for i in range(len(more))]), more)
    assert np.array_equal(grown.vectors(keys[1:]), vecs[1:]) and np.array_equal(grown.vector("n1"), fresh[1])
    assert np.array_equal(new.vector(keys[0]), fresh[2]) and len(new) == 402
    assert path.read_bytes() == written  # the file never changes
    asked = []

    def given():
        asked.append(1)
        return vecs
    other = VectorTable(16, exact_rows=40)  # rows of other keys: the table's own vectors, asked for once
    assert not other.fill(keys[:-1] + ["other"], given, None, saved)
    assert asked == [1] and np.array_equal(other.vector("other"), vecs[-1]) and other.partitions is not None


def _fail(what: str):
    def refuse(*args, **kwargs):
        raise AssertionError(f"{what} although the cache serves this version")
    return refuse


def test_a_reopened_large_store_takes_its_cached_partitions(scripted_forest, tmp_path, monkeypatch) -> None:
    """Past the exact bound (lowered here), a reopened store's tables take the partitions and rows the
    closing process cached (no vector is read from the store or stacked for them); a damaged
    partitions cache is found by check and removed, then written again."""
    monkeypatch.setattr("memforest.resident.vector_table.EXACT_ROWS", 12)
    monkeypatch.setattr("memforest.index.forest_index.ROOTS_EXACT_ROWS", 4)
    forest = scripted_forest(path=tmp_path / "store")
    forest.ingest_sessions("u", make_sessions(8, 4))
    before = _answers(forest)
    forest.close()
    parts_file = forest.user_dir("u") / "cache" / "partitions.cache"
    assert parts_file.is_file()
    assert {a["name"] for a in _header(parts_file)["arrays"]} >= {"facts/vecs", "cells/vecs", "roots/vecs"}

    with monkeypatch.context() as m:
        m.setattr("memforest.resident.vector_table.Partitions.build", _fail("partitions were trained"))
        m.setattr("memforest.store.load._fact_vectors", _fail("fact vectors were read from the store"))
        m.setattr("memforest.index.forest_index._stack", _fail("cell or root vectors were gathered"))
        m.setattr("memforest.store.load._fact_meta", _fail("fact row meta was computed"))
        m.setattr("memforest.index.forest_index.cell_meta", _fail("cell row meta was computed"))
        reopened = scripted_forest(path=tmp_path / "store")
        snap = reopened.snapshot("u")
        assert snap.index.facts.partitions is not None and snap.index.facts is snap.state.fact_table
        assert _answers(reopened) == before
        reopened.close()
    DAMAGE["zeroed"](parts_file)
    checked = scripted_forest(path=tmp_path / "store")
    report = checked.check("u")
    assert report["ok"] and report["caches_rebuilt"] and any("partitions cache" in c for c in report["cache"])
    assert not parts_file.exists()
    assert _answers(checked) == before
    assert parts_file.is_file()  # trained at the load after the check, and cached again


PARTITIONS_DAMAGE = {
    "truncated": DAMAGE["truncated"],
    "zeroed": DAMAGE["zeroed"],
    "one flipped byte": DAMAGE["one flipped byte"],
    "older format": lambda p: _rewrite_header(p, format=partition_cache.FORMAT - 1),
    "another store version": DAMAGE["another store version"],
}


def _other_rows(path, stamp: str, what: str) -> None:
    """Rewrite the partitions cache, checksummed and stamped as before, with one fact's vector, row
    meta or key changed."""
    found = read_partitions(path, stamp)
    assert not isinstance(found, CacheMiss)
    tables = dict(found)
    facts = tables["facts"]
    vecs, meta, keys = np.array(facts.vecs), np.array(facts.meta), list(facts.keys)
    if what == "other vectors":
        vecs[0] = -vecs[0]
    elif what == "other keys":
        keys[0] = "f_of_another_memory"
    else:
        meta[0, 0] += 1.0
    tables["facts"] = SavedPartitions(facts.centroids, keys, facts.bounds, vecs, meta)
    write_partitions(path, stamp, tables)


OTHER_ROWS = {"other vectors": "vectors of facts are not the store's",
              "other row meta": "row meta of facts is not the store's",
              "other keys": "keys of facts are not the store's"}


@pytest.mark.parametrize("damage", [*sorted(PARTITIONS_DAMAGE), *OTHER_ROWS])
def test_a_damaged_partitions_cache_is_not_used_and_check_removes_it(scripted_forest, tmp_path, monkeypatch,
                                                                     damage) -> None:
    """A partitions cache that is truncated, zeroed, of an older format or of another version is not
    used (the tables train their own partitions from the store's vectors); one whose vectors or row
    meta are not the store's (a sound file of this version) is found by check. Either way check
    removes it and the next load writes it again."""
    monkeypatch.setattr("memforest.resident.vector_table.EXACT_ROWS", 12)
    forest = scripted_forest(path=tmp_path / "store")
    forest.ingest_sessions("u", make_sessions(8, 4))
    before = _answers(forest)
    version = forest.snapshot("u").version
    forest.close()
    parts_file = forest.user_dir("u") / "cache" / "partitions.cache"
    stamp = forest._resident.caches_of("u", forest._open_db("u", False)).db.stamp(version)
    if damage in OTHER_ROWS:
        _other_rows(parts_file, stamp, damage)
    else:
        PARTITIONS_DAMAGE[damage](parts_file)
        assert isinstance(read_partitions(parts_file, stamp), CacheMiss)
        reopened = scripted_forest(path=tmp_path / "store")
        assert _answers(reopened) == before  # from the store's vectors
        reopened.close()
        PARTITIONS_DAMAGE[damage](parts_file)  # (the load wrote a sound one)
    checked = scripted_forest(path=tmp_path / "store")
    report = checked.check("u")
    assert report["ok"] and report["caches_rebuilt"]
    assert any("partitions cache" in c for c in report["cache"]), report["cache"]
    if damage in OTHER_ROWS:
        assert any(OTHER_ROWS[damage] in c for c in report["cache"]), report["cache"]
    assert not parts_file.exists()
    assert _answers(checked) == before
    assert not isinstance(read_partitions(parts_file, stamp), CacheMiss)
    assert checked.check("u")["cache"] == []


def test_temporary_files_of_unfinished_writes_are_removed_and_reported(scripted_forest, tmp_path) -> None:
    """A temporary file whose writer died is removed when the memory opens its caches, and `check`
    says so; one a live writer holds (locked) is left alone."""
    import fcntl

    _stored(scripted_forest, tmp_path)
    folder = tmp_path / "store" / "users" / "u" / "cache"
    stale = folder / ".lexical.cache.dead1.tmp"
    stale.write_bytes(b"\0" * 5000)
    live = folder / ".partitions.cache.live1.tmp"
    live.write_bytes(b"\0" * 10)
    with open(live, "rb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        forest = scripted_forest(path=tmp_path / "store")
        report = forest.check("u")
        assert not stale.exists() and live.exists()
    assert report["ok"] and report["caches_rebuilt"]
    assert report["cache"] == ["1 temporary cache file(s) of writes that never finished (5000 bytes)"]
    assert report["done"] == ["removed .lexical.cache.dead1.tmp"]
    assert "temporary files of cache writes" in report["checked"]
    assert forest.check("u")["done"] == ["removed .partitions.cache.live1.tmp"]  # its writer gone now
    again = forest.check("u")
    assert again["cache"] == [] and again["done"] == [] and not again["caches_rebuilt"]


def test_check_says_what_it_checked_and_what_it_rebuilt(scripted_forest, tmp_path) -> None:
    _stored(scripted_forest, tmp_path)
    forest = scripted_forest(path=tmp_path / "store")
    _answers(forest)
    DAMAGE["zeroed"](_cache_path(forest))
    report = forest.check("u")
    assert report["checked"][:2] == ["database file, SQLite integrity and schema",
                                     "stored state: vector widths, tree structure, placements and facts "
                                     f"({report['trees']} trees, {report['facts']} facts)"]
    assert "resident indexes against the store" in report["checked"]
    assert "lexical cache: lexical.cache: not a cache file (bad magic)" in report["checked"]
    assert "partitions cache: absent (written when next needed)" in report["checked"]
    assert report["done"] == ["lexical cache rebuilt from the store"]
    assert "lexical cache: holds the store's committed version" in forest.check("u")["checked"]


def test_a_cache_of_another_store_is_not_taken_for_this_ones(scripted_forest, tmp_path) -> None:
    """Two stores of the same sessions at the same version differ in identity (their first
    operation's time): a cache copied from one to the other is rebuilt, never used."""
    for name in ("a", "b"):
        forest = scripted_forest(path=tmp_path / name)
        forest.ingest_sessions("u", make_sessions(6, 4))
        _answers(forest)
        forest.close()
    a, b = (scripted_forest(path=tmp_path / n) for n in ("a", "b"))
    state = b.snapshot("u").state
    stamps = [f._resident.caches_of("u", f._open_db("u", False)).db.stamp(state.version) for f in (a, b)]
    assert stamps[0] != stamps[1]
    _cache_path(b).write_bytes(_cache_path(a).read_bytes())
    assert "store version" in _miss(read_lexical(_cache_path(b), stamps[1], state))
