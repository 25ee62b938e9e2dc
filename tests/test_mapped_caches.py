"""Cache files changed in place under a running process (truncated, zeroed, bytes flipped, another
file copied over them): the memory never crashes (each probe runs in its own process, so a SIGBUS
is a negative return code) and answers as a fresh open reading the database does; a file renamed
over a mapped one (as our writers do) leaves the map as it was."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cache_probe import DAMAGE

from memforest.resident import cache_file
from memforest.resident.cache_file import MappedFiles, read_arrays, write_arrays

PROBE = Path(__file__).with_name("cache_probe.py")
FILES = ["lexical.cache", "partitions.cache", "trees.cache"]


def _probe(*args: str) -> str:
    done = subprocess.run([sys.executable, str(PROBE), *args], capture_output=True, text=True, timeout=300,
                          cwd=PROBE.parent)
    assert done.returncode == 0, f"probe {args[2:]} ended with {done.returncode}: {done.stderr[-2000:]}"
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[object]]:
    """A store with its three cache files, and the answers of a fresh open reading only the database."""
    root = tmp_path_factory.mktemp("mapped")
    _probe("build", str(root / "store"))
    assert sorted(p.name for p in (root / "store/users/u/cache").iterdir()) == FILES
    shutil.copytree(root / "store", root / "fresh")
    shutil.rmtree(root / "fresh/users/u/cache")
    return root / "store", json.loads(_probe("answers", str(root / "fresh")))


def _damaged(built: tuple[Path, list[object]], tmp_path: Path, name: str, damage: str,
             *mode: str) -> dict[str, object]:
    store, expected = built
    shutil.copytree(store, tmp_path / "store")
    found = json.loads(_probe("damage", str(tmp_path / "store"), name, damage, *mode))
    assert found["before"] == expected
    assert found["after"] == expected
    return found


@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize("name", FILES)
def test_a_mapped_cache_changed_in_place_is_never_touched(built, tmp_path, name, damage) -> None:
    found = _damaged(built, tmp_path, name, damage, "mapped")
    assert found["mapped"] == 3  # each stays mapped: the tree rows' items are looked up in their map
    assert found["reloaded"] == (damage != "renamed over")


@pytest.mark.parametrize("damage", ["truncate half", "zero in place", "cp another cache over"])
@pytest.mark.parametrize("name", FILES)
def test_a_small_cache_is_read_into_memory_and_unaffected(built, tmp_path, name, damage) -> None:
    found = _damaged(built, tmp_path, name, damage)
    assert found["mapped"] == 0 and not found["reloaded"]


def test_a_rewrite_of_ours_leaves_a_mapped_file_as_it_was(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(cache_file, "READ_BELOW", 0)
    path = tmp_path / "x.cache"
    write_arrays(path, "kind", 1, "1:0", {"a": np.arange(5000, dtype=np.int64)})
    watch = MappedFiles()
    found = read_arrays(path, "kind", 1, "1:0", watch=watch)
    assert isinstance(found, dict) and len(watch) == 1
    write_arrays(path, "kind", 1, "2:0", {"a": np.zeros(10, np.int64)})  # beside it, renamed over it
    assert np.array_equal(found["a"], np.arange(5000)) and watch.changed() == []
    with open(path, "r+b") as f:  # in place, as another program might
        f.truncate(100)
    assert watch.changed() == []  # (a new file: the mapped one is untouched)
    os.truncate(tmp_path / "x.cache", 0)
    del found
    assert len(watch) == 0  # the map freed: nothing left to watch, its descriptor closed


def test_a_file_truncated_in_place_is_reported_once(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(cache_file, "READ_BELOW", 0)
    path = tmp_path / "x.cache"
    write_arrays(path, "kind", 1, "1:0", {"a": np.arange(5000, dtype=np.int64)})
    watch = MappedFiles()
    found = read_arrays(path, "kind", 1, "1:0", watch=watch)
    assert isinstance(found, dict) and watch.changed() == []
    os.truncate(path, 64)
    assert watch.changed() == ["x.cache: truncated to 64 bytes"]
    assert watch.changed() == []


def test_a_fifo_at_a_cache_path_is_rebuilt_not_waited_on(built, tmp_path) -> None:
    """A FIFO (any file that is not a regular one) at each cache path is never opened for reading:
    the memory answers from the store and writes regular cache files in their place."""
    store, expected = built
    shutil.copytree(store, tmp_path / "store")
    folder = tmp_path / "store/users/u/cache"
    for name in FILES:
        (folder / name).unlink()
        os.mkfifo(folder / name)
    assert json.loads(_probe("answers", str(tmp_path / "store"))) == expected
    assert all((folder / name).is_file() for name in FILES if name != "trees.cache")
    assert cache_file.read_arrays(folder / "x", "kind", 1, "1:0") == cache_file.CacheMiss("x: missing")
    os.mkfifo(folder / "fifo.cache")
    fifo = cache_file.read_arrays(folder / "fifo.cache", "k", 1, "1:0")
    assert isinstance(fifo, cache_file.CacheMiss) and "not a regular file" in fifo.reason


def _counting_sums(monkeypatch) -> list[int]:
    calls: list[int] = []
    whole = cache_file._file_sum

    def counted(fd: int, start: int, size: int) -> str | None:
        calls.append(size)
        return whole(fd, start, size)
    monkeypatch.setattr(cache_file, "_file_sum", counted)
    return calls


def test_a_mapped_file_is_read_whole_for_its_checksum_only_without_a_stamp(tmp_path, monkeypatch) -> None:
    """The writer stamps a file it maps; a reader takes the stamp for the checksum, `verify` reads the
    file whole anyway, and a reader that had to read it whole stamps it for the next."""
    monkeypatch.setattr(cache_file, "READ_BELOW", 0)
    calls = _counting_sums(monkeypatch)
    path, stamp = tmp_path / "x.cache", tmp_path / f"x.cache{cache_file.VERIFIED}"
    write_arrays(path, "kind", 1, "1:0", {"a": np.arange(5000, dtype=np.int64)})
    assert stamp.is_file()
    found = read_arrays(path, "kind", 1, "1:0")
    assert isinstance(found, dict) and np.array_equal(found["a"], np.arange(5000)) and calls == []
    assert isinstance(read_arrays(path, "kind", 1, "1:0", verify=True), dict) and len(calls) == 1
    stamp.unlink()
    assert isinstance(read_arrays(path, "kind", 1, "1:0"), dict) and len(calls) == 2
    assert stamp.is_file()
    assert isinstance(read_arrays(path, "kind", 1, "1:0"), dict) and len(calls) == 2


@pytest.mark.parametrize("change", ["flipped in place", "copied over, times kept", "stamp of another file"])
def test_a_file_changed_since_its_stamp_is_read_whole(tmp_path, monkeypatch, change) -> None:
    monkeypatch.setattr(cache_file, "READ_BELOW", 0)
    calls = _counting_sums(monkeypatch)
    path = tmp_path / "x.cache"
    write_arrays(path, "kind", 1, "1:0", {"a": np.arange(5000, dtype=np.int64)})
    if change == "flipped in place":
        with open(path, "r+b") as f:
            f.seek(-8, os.SEEK_END)
            f.write(b"\xff" * 8)
    elif change == "copied over, times kept":  # another inode, the same bytes and modification time
        shutil.copy2(path, tmp_path / "copy")
        os.replace(tmp_path / "copy", path)
    else:
        write_arrays(tmp_path / "y.cache", "kind", 1, "1:0", {"a": np.arange(5000, dtype=np.int64)})
        os.replace(tmp_path / f"y.cache{cache_file.VERIFIED}", tmp_path / f"x.cache{cache_file.VERIFIED}")
    found = read_arrays(path, "kind", 1, "1:0")
    assert len(calls) == 1
    if change == "flipped in place":
        assert found == cache_file.CacheMiss("x.cache: content checksum mismatch")
    else:
        assert isinstance(found, dict) and np.array_equal(found["a"], np.arange(5000))


def test_a_copied_file_is_stamped_by_a_whole_read_and_a_damaged_one_is_not(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(cache_file, "READ_BELOW", 0)
    path = tmp_path / "x.cache"
    write_arrays(path, "kind", 1, "1:0", {"a": np.arange(5000, dtype=np.int64)})
    shutil.copy2(path, tmp_path / "y.cache")  # (a copy: another file, not the stamp's)
    calls = _counting_sums(monkeypatch)
    assert cache_file.stamp_if_whole(tmp_path / "y.cache") and len(calls) == 1
    assert isinstance(read_arrays(tmp_path / "y.cache", "kind", 1, "1:0"), dict) and len(calls) == 1
    with open(path, "r+b") as f:
        f.seek(-8, os.SEEK_END)
        f.write(b"\xff" * 8)
    assert not cache_file.stamp_if_whole(path)
    assert read_arrays(path, "kind", 1, "1:0") == cache_file.CacheMiss("x.cache: content checksum mismatch")
