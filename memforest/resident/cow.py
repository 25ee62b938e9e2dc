"""Copy-on-write maps: a published version never changes; a fork costs O(its own edits), not O(size).

A `CowMap` is a frozen base dict shared by every version plus a small private overlay (upserts) and a
set of keys deleted from the base. `fork()` copies only the overlay; when the overlay outgrows a fixed
bound the fork folds it into a new base (O(size), amortised over many versions)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, MutableMapping, MutableSet
from typing import Any, Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")
FOLD_AT = 4096  # overlay entries at which a fork folds its overlay into a fresh base
_MISSING: Any = object()


class CowMap(MutableMapping[K, V], Generic[K, V]):
    __slots__ = ("_base", "_over", "_gone", "_len")

    def __init__(self, data: Iterable[tuple[K, V]] | dict[K, V] | None = None) -> None:
        self._base: dict[K, V] = dict(data) if data is not None else {}
        self._over: dict[K, V] = {}
        self._gone: set[K] = set()
        self._len = len(self._base)

    @classmethod
    def over(cls, base: dict[K, V]) -> CowMap[K, V]:
        """A map over `base` without copying it; `base` must never change afterwards."""
        out: CowMap[K, V] = cls.__new__(cls)
        out._base, out._over, out._gone, out._len = base, {}, set(), len(base)
        return out

    def fork(self) -> CowMap[K, V]:
        """An independent map with the same contents; editing either leaves the other unchanged."""
        out: CowMap[K, V] = CowMap.__new__(CowMap)
        if len(self._over) + len(self._gone) > FOLD_AT:
            base = self._base.copy()
            for key in self._gone:
                del base[key]
            base.update(self._over)
            out._base, out._over, out._gone = base, {}, set()
        else:
            out._base, out._over, out._gone = self._base, dict(self._over), set(self._gone)
        out._len = self._len
        return out

    def __getitem__(self, key: K) -> V:
        value = self._over.get(key, _MISSING)
        if value is not _MISSING:
            return value
        if key in self._gone:
            raise KeyError(key)
        return self._base[key]

    def get(self, key: K, default: Any = None) -> Any:
        value = self._over.get(key, _MISSING)
        if value is not _MISSING:
            return value
        if key in self._gone:
            return default
        return self._base.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._over or (key in self._base and key not in self._gone)

    def __setitem__(self, key: K, value: V) -> None:
        if key not in self:
            self._len += 1
        self._over[key] = value

    def __delitem__(self, key: K) -> None:
        if key not in self:
            raise KeyError(key)
        self._over.pop(key, None)
        if key in self._base:
            self._gone.add(key)
        self._len -= 1

    def __iter__(self) -> Iterator[K]:
        if not self._over and not self._gone:  # (a loaded version's maps): the base's own iterator
            return iter(self._base)
        return self._merged()

    def items(self) -> Any:
        if not self._over and not self._gone and type(self) is CowMap:  # (a loaded version's maps)
            return self._base.items()  # its own view: one lookup less per entry
        return super().items()

    def values(self) -> Any:
        if not self._over and not self._gone and type(self) is CowMap:
            return self._base.values()
        return super().values()

    def _merged(self) -> Iterator[K]:
        over, gone = self._over, self._gone
        for key in self._base:
            if key not in over and key not in gone:
                yield key
        yield from over

    def __len__(self) -> int:
        return self._len

    def __repr__(self) -> str:
        return f"CowMap({len(self)} entries, {len(self._over)} private)"


class CowSet(MutableSet[K], Generic[K]):
    """A set over a `CowMap`: `fork()` costs O(its private edits), not O(size)."""

    __slots__ = ("_map",)

    def __init__(self, items: Iterable[K] = ()) -> None:
        self._map: CowMap[K, None] = CowMap((k, None) for k in items)

    @classmethod
    def over(cls, members: dict[K, None]) -> CowSet[K]:
        """A set of the keys of `members`, without copying it; `members` must never change afterwards."""
        out: CowSet[K] = cls.__new__(cls)
        out._map = CowMap.over(members)
        return out

    @classmethod
    def _from_iterable(cls, it: Iterable[Any]) -> set[Any]:  # results of &, |, - are plain sets
        return set(it)

    def fork(self) -> CowSet[K]:
        out: CowSet[K] = CowSet.__new__(CowSet)
        out._map = self._map.fork()
        return out

    def add(self, value: K) -> None:
        self._map[value] = None

    def discard(self, value: K) -> None:
        self._map.pop(value, None)

    def __contains__(self, value: object) -> bool:
        return value in self._map

    def __iter__(self) -> Iterator[K]:
        return iter(self._map)

    def __len__(self) -> int:
        return len(self._map)

    def __repr__(self) -> str:
        return f"CowSet({len(self)} members)"
