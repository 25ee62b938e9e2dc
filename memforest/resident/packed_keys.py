"""Keys kept as arrays, as a cache file holds them: looked up and compared without a Python object
per key, so an open maps a million ids instead of making them.

`PackedKeys` is a sequence of strings stored as one UTF-8 blob and the byte end of each, plus a
lookup table: the CRC-32 of every key in ascending order (`hashes`) and the position of each
(`order`). A key's position is found by a binary search of its CRC-32 and a comparison with the
keys of that CRC-32 (collisions are found, never trusted): about 2 µs, against a dict's 0.05 µs,
for a table nothing has to build. Two key sets are compared by their sorted CRC-32s
(`same_hashes`): an O(n) pass over arrays that tells different sets apart except for a collision of
whole multisets."""

from __future__ import annotations

import bisect
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, overload

import numpy as np

from memforest.resident.cow import _MISSING
from memforest.resident.prefetch import is_mapped, will_need, will_need_rows

ARRAYS = ("blob", "ends", "hashes", "order")  # the suffixes of `PackedKeys.arrays`


def crc32s(keys: Iterable[str], n: int) -> np.ndarray:
    """The CRC-32 of the UTF-8 bytes of each of the `n` keys, in order."""
    return np.fromiter(map(zlib.crc32, map(str.encode, keys)), np.uint32, n)


class PackedKeys(Sequence[str]):
    __slots__ = ("_blob", "_ends", "_sorted", "_order", "_arrays", "_n", "_private")

    def __init__(self, blob: np.ndarray, ends: np.ndarray, hashes: np.ndarray, order: np.ndarray) -> None:
        """Keys over arrays as `arrays` gives them (views of a map: nothing is read before it is
        needed); arrays that do not fit together are a ValueError."""
        n = len(ends)
        if len(hashes) != n or len(order) != n or ends.ndim != 1 or blob.dtype != np.uint8:
            raise ValueError("packed keys: array lengths disagree")
        if n and int(ends[-1]) != len(blob):
            raise ValueError("packed keys: the ends do not match the blob")
        self._arrays = {"blob": blob, "ends": ends, "hashes": hashes, "order": order}
        self._blob, self._ends = np.ascontiguousarray(blob).data, np.ascontiguousarray(ends, np.int64).data
        self._sorted = np.ascontiguousarray(hashes, np.uint32).data
        self._order = np.ascontiguousarray(order, np.int64).data
        self._n = n
        self._private = False  # the arrays a lookup reads are copies in memory (`_in_memory`)

    @classmethod
    def pack(cls, keys: Sequence[str]) -> PackedKeys:
        encoded = [k.encode() for k in keys]
        ends = np.cumsum(np.fromiter(map(len, encoded), np.int64, len(encoded)))
        hashes = np.fromiter(map(zlib.crc32, encoded), np.uint32, len(encoded))
        order = np.argsort(hashes, kind="stable").astype(np.int64)
        return cls(np.frombuffer(b"".join(encoded), np.uint8), ends, hashes[order], order)

    @classmethod
    def of_arrays(cls, arrays: Mapping[str, np.ndarray], prefix: str) -> PackedKeys:
        """The keys `arrays(prefix)` wrote (a KeyError for an array missing)."""
        return cls(*(arrays[f"{prefix}_{name}"] for name in ARRAYS))

    def arrays(self, prefix: str) -> dict[str, np.ndarray]:
        return {f"{prefix}_{name}": array for name, array in self._arrays.items()}

    def will_need(self) -> None:
        """Ask for the pages of every array at once, where they are a map's: a lookup touches a page
        of each (a binary search several of `hashes`), a fault apiece on a map read for random access
        (`memforest.resident.prefetch`)."""
        for array in self._arrays.values():
            will_need(array, [(0, len(array))])

    @property
    def hashes(self) -> np.ndarray:
        """The CRC-32 of every key, ascending."""
        return self._arrays["hashes"]

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> list[str]: ...

    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            return [self._key(j) for j in range(*i.indices(self._n))]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(i)
        return self._key(i)

    def _key(self, i: int) -> str:
        return str(self._blob[self._ends[i - 1] if i else 0: self._ends[i]], "utf-8")

    def keys_at(self, positions: np.ndarray) -> list[str]:
        """The keys at `positions` (each in range). Where the arrays are a map's, the pages of their
        ends and then of their bytes that are not in memory are asked for at once first (a query's
        top documents: a page fault apiece otherwise, in the order they are decoded)."""
        at = np.asarray(positions, np.int64)
        ends = self._arrays["ends"]
        will_need_rows(ends, np.concatenate([at, at[at > 0] - 1]))
        highs = np.asarray(ends[at], np.int64)
        lows = np.where(at > 0, ends[np.maximum(at - 1, 0)], 0).astype(np.int64)
        spans = highs > lows  # (an empty key has no bytes: the first and last byte of the others)
        will_need_rows(self._arrays["blob"], np.concatenate([lows[spans], highs[spans] - 1]))
        blob = self._blob
        return [str(blob[lo:hi], "utf-8") for lo, hi in zip(lows.tolist(), highs.tolist())]

    def __iter__(self) -> Iterator[str]:
        blob = bytes(self._blob)
        text = blob.decode()
        bounds = [0, *self._ends.tolist()]
        if len(text) == len(blob):  # (one byte per character: the byte ends are the character ends)
            return (text[a:b] for a, b in zip(bounds[:-1], bounds[1:]))
        return (blob[a:b].decode() for a, b in zip(bounds[:-1], bounds[1:]))

    def _in_memory(self) -> None:
        """Keep private copies of the hashes, the order and the ends where they are a map's (20 bytes a
        key): a lookup then faults the page of its key's bytes alone when the map's pages are not in
        memory, not 3-4 pages one after another (hashes, order, ends, bytes: 0.9 major faults a lookup
        instead of 3.6 at 10^4 sessions with the store's pages dropped, 0.1-0.2 ms instead of 0.2-0.6
        ms, measured; an ingest made some 280 lookups, profiled)."""
        arrays = self._arrays
        if any(is_mapped(arrays[name]) for name in ("hashes", "order", "ends")):
            self._sorted = np.array(arrays["hashes"], np.uint32).data
            self._order = np.array(arrays["order"], np.int64).data
            self._ends = np.array(arrays["ends"], np.int64).data
        self._private = True

    def position(self, key: object) -> int:
        """Where `key` is (-1 when it is not a key)."""
        if not isinstance(key, str):
            return -1
        if not self._private:  # (two threads may both copy: equal arrays)
            self._in_memory()
        code = zlib.crc32(key.encode())
        hashes, order = self._sorted, self._order
        i = bisect.bisect_left(hashes, code)
        while i < self._n and hashes[i] == code:
            at = order[i]
            if self._key(at) == key:
                return at
            i += 1
        return -1

    def __contains__(self, key: object) -> bool:
        return self.position(key) >= 0

    def same_hashes(self, groups: Sequence[PackedKeys | tuple[Iterable[str], int]]) -> bool:
        """Whether the keys of `groups` (each packed, or keys and how many), all together, have these
        keys' CRC-32s, each as often (a packed group's are not computed again)."""
        sizes = [len(g) if isinstance(g, PackedKeys) else g[1] for g in groups]
        if sum(sizes) != self._n:
            return False
        parts = [g.hashes if isinstance(g, PackedKeys) else crc32s(*g) for g in groups]
        together = np.sort(np.concatenate(parts)) if parts else np.zeros(0, np.uint32)
        return bool(np.array_equal(together, self.hashes))

    def has_duplicates(self) -> bool:
        """Whether a key is here twice (only keys of one CRC-32 are compared)."""
        hashes = self.hashes
        same = np.flatnonzero(hashes[1:] == hashes[:-1]) if self._n > 1 else np.zeros(0, np.int64)
        order = self._order
        runs: dict[int, set[str]] = {}
        for i in same.tolist():
            held = runs.setdefault(int(hashes[i]), {self._key(order[i])})
            key = self._key(order[i + 1])
            if key in held:
                return True
            held.add(key)
        return False


class KeyPlaces:
    """key -> its position in `PackedKeys` or `IntKeys` (plus `high`), found when first asked for: the
    `Loaded` (`memforest.resident.lazy_map`) of a map whose keys a cache holds packed."""

    def __init__(self, keys: PackedKeys | IntKeys, high: int = 0) -> None:
        self.made: dict[Any, int] = {}
        self._keys, self._high = keys, high

    def make(self, key: Any) -> Any:
        at = self._keys.position(key)
        if at < 0:
            return _MISSING
        place = self.made[key] = at | self._high
        return place

    def holds(self, key: Any) -> bool:
        return key in self.made or key in self._keys

    def keys_in_order(self) -> Iterator[Any]:
        return iter(self._keys)

    def packed_keys(self) -> PackedKeys | None:
        return self._keys if isinstance(self._keys, PackedKeys) else None

    def __len__(self) -> int:
        return len(self._keys)


class RowKeys(Sequence[Any]):
    """The key of each row of a table filled from `PackedKeys` or `IntKeys` (row i holding key i),
    and of the rows appended after them: what `VectorTable` keeps as a list, without a list of the
    packed ones."""

    __slots__ = ("_packed", "_tail")

    def __init__(self, packed: Sequence[Any], tail: list[Any] | None = None) -> None:
        self._packed, self._tail = packed, tail if tail is not None else []

    def __len__(self) -> int:
        return len(self._packed) + len(self._tail)

    @overload
    def __getitem__(self, i: int) -> Any: ...

    @overload
    def __getitem__(self, i: slice) -> RowKeys | list[Any]: ...

    def __getitem__(self, i: int | slice) -> Any:
        n = len(self._packed)
        if isinstance(i, slice):
            start, stop, step = i.indices(len(self))
            if start == 0 and step == 1 and stop >= n:  # (a prefix: the packed keys are shared)
                return RowKeys(self._packed, self._tail[: stop - n])
            return [self[j] for j in range(start, stop, step)]
        if i < 0:
            i += len(self)
        return self._packed[i] if i < n else self._tail[i - n]

    def __delitem__(self, i: slice) -> None:
        """Drop the rows from `i.start` on (the only deletion a table makes)."""
        start, stop, step = i.indices(len(self))
        n = len(self._packed)
        if step != 1 or stop != len(self) or start < n:
            raise ValueError("only appended rows are dropped, from one row on")
        del self._tail[start - n:]

    def extend(self, keys: Iterable[Any]) -> None:
        self._tail.extend(keys)

    def __iter__(self) -> Iterator[Any]:
        yield from self._packed
        yield from self._tail


class IntKeys(Sequence[int]):
    """Integer keys kept as one array (a cache's, or a table's fill), read as Python ints; a key's
    position is a binary search of the keys in order (`order`: the argsort of `array`, made when
    first needed unless given)."""

    __slots__ = ("array", "_order", "_sorted")

    def __init__(self, array: np.ndarray, order: np.ndarray | None = None) -> None:
        self.array = np.asarray(array, np.int64)
        self._order: Any = None
        self._sorted: Any = None
        if order is not None:
            self._sort(order)

    def _sort(self, order: np.ndarray) -> None:
        self._order = np.ascontiguousarray(order, np.int64).data  # (read as Python ints)
        self._sorted = np.ascontiguousarray(self.array[order], np.int64).data

    def __len__(self) -> int:
        return len(self.array)

    @overload
    def __getitem__(self, i: int) -> int: ...

    @overload
    def __getitem__(self, i: slice) -> list[int]: ...

    def __getitem__(self, i: int | slice) -> int | list[int]:
        if isinstance(i, slice):
            return self.array[i].tolist()
        return int(self.array[i])

    def __iter__(self) -> Iterator[int]:
        return iter(self.array.tolist())

    def position(self, key: object) -> int:
        """Where `key` is (-1 when it is not a key; the keys are distinct)."""
        if not isinstance(key, (int, np.integer)) or isinstance(key, bool):
            return -1
        if self._sorted is None:
            self._sort(np.argsort(self.array, kind="stable"))
        key = int(key)
        i = bisect.bisect_left(self._sorted, key)
        return self._order[i] if i < len(self.array) and self._sorted[i] == key else -1

    def __contains__(self, key: object) -> bool:
        return self.position(key) >= 0


def int_positions(keys: np.ndarray, saved: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(where each of `saved` is in `keys`, the order that sorts `saved`) when both hold the same
    distinct integers; None otherwise."""
    if len(keys) != len(saved):
        return None
    by_key, by_saved = np.argsort(keys, kind="stable"), np.argsort(saved, kind="stable")
    ordered = saved[by_saved]
    if not np.array_equal(keys[by_key], ordered) or bool((ordered[1:] == ordered[:-1]).any()):
        return None
    at = np.empty(len(saved), np.int64)
    at[by_saved] = by_key
    return at, by_saved
