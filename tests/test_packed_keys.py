"""Keys kept packed, as a cache file holds them (`memforest.resident.packed_keys`): found by their
CRC-32 and then compared (a shared CRC-32 is never taken for a match), iterated and indexed as the
list they were packed from; and a vector table filled from them answers as one filled from a list."""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Sequence

import numpy as np
import pytest

from memforest.resident.lazy_map import LazyMap
from memforest.resident.packed_keys import (
    IntKeys,
    KeyPlaces,
    PackedKeys,
    RowKeys,
    crc32s,
    int_positions,
)
from memforest.resident.vector_table import VectorTable


def _colliding() -> tuple[str, str]:
    """Two short keys of one CRC-32 (found by search, not assumed)."""
    seen: dict[int, str] = {}
    for i in range(400_000):  # (random-looking keys: a pair shares a CRC-32 after ~80,000 on average)
        key = hashlib.blake2b(str(i).encode(), digest_size=6).hexdigest()
        code = zlib.crc32(key.encode())
        if code in seen:
            return seen[code], key
        seen[code] = key
    raise AssertionError("no collision among the keys searched")


def test_each_key_is_found_where_it_was_packed_and_others_are_not() -> None:
    keys = [f"fact-{i:04d}" for i in range(300)] + ["día", "日本語の事実", "", "a\u200bb"]
    packed = PackedKeys.pack(keys)
    assert len(packed) == len(keys) and list(packed) == keys and packed[:] == keys
    assert [packed[i] for i in range(len(keys))] == keys and packed[-1] == keys[-1]
    assert [packed.position(k) for k in keys] == list(range(len(keys)))
    for absent in ("fact-9999", "dia", "日本", "ab"):
        assert packed.position(absent) == -1 and absent not in packed
    assert 3 not in packed  # (not a string)
    assert np.array_equal(packed.hashes, np.sort(crc32s(keys, len(keys))))
    with pytest.raises(IndexError):
        packed[len(keys)]


def test_keys_of_one_crc32_are_told_apart() -> None:
    a, b = _colliding()
    assert zlib.crc32(a.encode()) == zlib.crc32(b.encode()) and a != b
    packed = PackedKeys.pack(["x", b, "y"])
    assert packed.position(b) == 1 and packed.position(a) == -1 and a not in packed
    both = PackedKeys.pack([a, "x", b])
    assert both.position(a) == 0 and both.position(b) == 2
    assert not both.has_duplicates()
    assert PackedKeys.pack([a, "x", b, a]).has_duplicates()
    assert PackedKeys.pack(["x", "y", "x"]).has_duplicates() and not PackedKeys.pack([]).has_duplicates()


def test_keys_over_a_map_are_looked_up_through_copies_of_their_hashes_order_and_ends(tmp_path) -> None:
    """Packed keys over a map's pages keep copies of what a lookup reads but the keys' bytes, made by
    the first lookup (a lookup then faults one page, not four, when the map's pages are out)."""
    import mmap

    from memforest.resident.prefetch import is_mapped
    keys = [f"fact-{i:05d}" for i in range(3000)]
    arrays = PackedKeys.pack(keys).arrays("k")
    path = tmp_path / "keys.bin"
    padded = [a.tobytes() + bytes(-a.nbytes % 8) for a in arrays.values()]  # (each array aligned)
    path.write_bytes(b"".join(padded))
    with path.open("rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    views, offset = {}, 0
    for (name, a), raw in zip(arrays.items(), padded):
        views[name] = np.ndarray(a.shape, a.dtype, buffer=mapped, offset=offset)  # (as a cache maps them)
        offset += len(raw)
    packed = PackedKeys.of_arrays(views, "k")
    def read(packed: PackedKeys) -> list[bool]:  # (whether each of what a lookup reads is the map's)
        return [is_mapped(m.obj) for m in (packed._sorted, packed._order, packed._ends)]  # type: ignore[arg-type]

    assert read(packed) == [True] * 3  # (nothing read yet)
    assert [packed.position(k) for k in keys[::7]] == list(range(0, 3000, 7)) and packed.position("x") == -1
    assert read(packed) == [False] * 3
    assert is_mapped(packed._blob.obj) and packed[5] == keys[5] and list(packed) == keys  # type: ignore[arg-type]


def test_packed_keys_round_trip_through_their_arrays_and_refuse_arrays_that_disagree() -> None:
    packed = PackedKeys.pack(["a", "bb", "ccc"])
    arrays = packed.arrays("docs")
    assert sorted(arrays) == ["docs_blob", "docs_ends", "docs_hashes", "docs_order"]
    again = PackedKeys.of_arrays(arrays, "docs")
    assert list(again) == ["a", "bb", "ccc"] and again.position("bb") == 1
    with pytest.raises(ValueError, match="ends"):
        PackedKeys.of_arrays({**arrays, "docs_ends": np.array([1, 3, 7])}, "docs")
    with pytest.raises(ValueError, match="lengths"):
        PackedKeys.of_arrays({**arrays, "docs_order": np.array([0, 1])}, "docs")
    with pytest.raises(KeyError):
        PackedKeys.of_arrays({k: v for k, v in arrays.items() if k != "docs_hashes"}, "docs")


def test_a_key_set_is_compared_by_its_crc32s() -> None:
    packed = PackedKeys.pack(["c1", "c2", "f1"])
    assert packed.same_hashes([(["f1", "c2"], 2), (iter(["c1"]), 1)])
    assert not packed.same_hashes([(["c1", "c2"], 2), (["f2"], 1)])
    assert not packed.same_hashes([(["c1", "c2"], 2)])
    assert not packed.same_hashes([(["c1", "c2", "f1", "f1"], 4)])
    assert packed.same_hashes([(["c2"], 1), PackedKeys.pack(["f1", "c1"])])  # (its CRC-32s as they are)
    assert not packed.same_hashes([(["c2"], 1), PackedKeys.pack(["f2", "c1"])])


def test_key_places_are_a_lazy_maps_records() -> None:
    packed = PackedKeys.pack(["a", "b", "c"])
    places: LazyMap[str, int] = LazyMap(KeyPlaces(packed, 7 << 32))
    assert len(places) == 3 and places._base == {}
    assert places["b"] == (7 << 32) | 1 and places.get("z") is None and "z" not in places
    assert list(places) == ["a", "b", "c"]
    fork = places.fork()
    del fork["a"]
    fork["d"] = 9
    assert sorted(fork.items()) == [("b", (7 << 32) | 1), ("c", (7 << 32) | 2), ("d", 9)]
    assert sorted(places) == ["a", "b", "c"] and "a" in places


def test_row_keys_share_the_packed_rows_and_append_after_them() -> None:
    rows = RowKeys(PackedKeys.pack(["a", "b"]))
    rows.extend(["c", 4])
    assert len(rows) == 4 and list(rows) == ["a", "b", "c", 4] and rows[2] == "c" and rows[-1] == 4
    prefix = rows[:3]
    assert isinstance(prefix, RowKeys) and list(prefix) == ["a", "b", "c"]
    assert rows[1:3] == ["b", "c"]
    del rows[3:]
    assert list(rows) == ["a", "b", "c"] and list(prefix) == ["a", "b", "c"]
    with pytest.raises(ValueError):
        del rows[1:]


def _found(table: VectorTable, query: np.ndarray) -> list[tuple[str, float]]:
    keys, scores = table.search(query, 12)
    return list(zip(keys.tolist(), scores.tolist()))


def _filled(n: int, rng: np.random.Generator) -> tuple[list[VectorTable], np.ndarray]:
    """Two tables filled from one table's saved partitions and rows: by a list of its keys, and by
    the same keys packed (as a cache holds them)."""
    keys = [f"f{i:03d}" for i in range(n)]
    vecs = rng.normal(size=(n, 8)).astype(np.float32)
    source = VectorTable(8, exact_rows=16)
    source.upsert(keys, vecs)
    saved = source.saved_partitions(rows=True)
    assert saved is not None and saved.vecs is not None
    ids = [str(k) for k in saved.keys]
    tables = []
    for packed in (False, True):
        these: Sequence[str] = PackedKeys.pack(ids) if packed else list(ids)
        table = VectorTable(8, exact_rows=16)
        assert table.fill(these, vecs, None, type(saved)(saved.centroids, these, saved.bounds,
                                                         saved.vecs.copy(), saved.meta))
        tables.append(table)
    return tables, vecs


def test_a_table_filled_from_packed_keys_answers_and_changes_as_one_filled_from_a_list() -> None:
    rng = np.random.default_rng(1)
    tables, vecs = _filled(120, rng)
    packed = tables[1]
    assert "f007" in packed and "nope" not in packed and len(packed) == 120
    assert np.array_equal(packed.vector("f007"), vecs[7])
    new = rng.normal(size=(3, 8)).astype(np.float32)
    forks = []
    for table in tables:
        fork = table.fork()
        fork.remove(["f001", "f050"])
        fork.upsert(["f003", "n1", "n2"], new)
        forks.append(fork)
    query = rng.normal(size=8).astype(np.float32)
    for a, b in ((tables[0], tables[1]), (forks[0], forks[1])):
        assert _found(a, query) == _found(b, query)
        assert sorted(map(str, a.keys())) == sorted(map(str, b.keys())) and len(a) == len(b)
    assert "f001" in tables[1] and "f001" not in forks[1] and "n2" in forks[1]
    assert np.array_equal(forks[1].vector("f003"), new[0])
    assert np.array_equal(tables[1].vector("f003"), vecs[3])
    saved_again = forks[1].saved_partitions(rows=True)
    assert saved_again is not None and sorted(map(str, saved_again.keys)) == sorted(map(str, forks[0].keys()))


def test_integer_keys_are_placed_by_a_binary_search_and_matched_as_sets() -> None:
    keys = IntKeys(np.array([(5 << 32) | 3, 7, (1 << 40) | 2, 0]))
    assert list(keys) == [(5 << 32) | 3, 7, (1 << 40) | 2, 0] and keys[1] == 7 and type(keys[1]) is int
    places: LazyMap[int, int] = LazyMap(KeyPlaces(keys))
    assert places[(1 << 40) | 2] == 2 and places.get(8) is None and 0 in places and "7" not in places
    assert True not in places and list(places) == list(keys)
    found = int_positions(np.array([0, 7, (5 << 32) | 3, (1 << 40) | 2]), keys.array)
    assert found is not None and found[0].tolist() == [2, 1, 3, 0]
    assert int_positions(np.array([0, 7, 7, 1]), keys.array) is None
    assert int_positions(np.array([0, 7, 9, (1 << 40) | 2]), keys.array) is None
    assert int_positions(np.array([0, 7]), keys.array) is None
    assert int_positions(np.array([1, 1]), np.array([1, 1])) is None  # (each key once)
