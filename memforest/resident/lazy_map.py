"""A copy-on-write map over the records of a loaded version that are made when first reached
(`LazyMap`), for maps whose every value an open would otherwise make: the facts by id and their
normalised texts (`memforest.store.loaded_facts`)."""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable, Iterator
from typing import Any, Protocol, TypeVar

from memforest.resident.cow import _MISSING, FOLD_AT, CowMap
from memforest.resident.packed_keys import PackedKeys

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
GONE: Any = object()  # a key a version dropped, in a folded base (`LazyMap.fork`)


class Loaded(Protocol):
    """The records of a loaded version: those made so far (`made`, which only grows, each value as
    the loaded version holds it), and the others made when first asked for."""

    made: dict

    def make(self, key: Any) -> Any:
        """The loaded version's value of `key`, made (and kept in `made`) if need be; `_MISSING`
        when the loaded version has no such key."""

    def holds(self, key: Any) -> bool:
        """Whether the loaded version has `key` (made or not)."""

    def keys_in_order(self) -> Iterable[Any]:
        """Every key of the loaded version, in its order."""

    def __len__(self) -> int: ...


class KeyedLoaded:
    """The part of a `Loaded` that its set of keys gives: a collection (`_keys`: a mapping whose keys,
    or a sequence whose members, are the loaded version's, in their order)."""

    _keys: Collection[Any]

    def __len__(self) -> int:
        return len(self._keys)

    def holds(self, key: Any) -> bool:
        return key in self._keys

    def keys_in_order(self) -> Iterator[Any]:
        return iter(self._keys)

    def packed_keys(self) -> PackedKeys | None:
        """The loaded version's keys when a cache holds them packed (None otherwise)."""
        keys = self._keys
        if isinstance(keys, PackedKeys):
            return keys
        return keys.packed_keys() if isinstance(keys, LazyMap) else None


class LazyMap(CowMap[K, V]):
    """A `CowMap` whose base is what `loaded` has made so far, a key not made yet made when first
    reached. A fold (`fork` past `FOLD_AT` private entries) copies what has been made into a new
    base; a dropped key stays in it as a tombstone, so `loaded` never gives it back."""

    __slots__ = ("_loaded",)

    def __init__(self, loaded: Loaded) -> None:
        super().__init__()
        self._base = loaded.made
        self._loaded = loaded
        self._len = len(loaded)

    def fork(self) -> LazyMap[K, V]:
        out: LazyMap[K, V] = LazyMap.__new__(type(self))
        out._loaded, out._len = self._loaded, self._len
        if len(self._over) + len(self._gone) <= FOLD_AT:
            out._base, out._over, out._gone = self._base, dict(self._over), set(self._gone)
            return out
        made = self._loaded.made
        base = dict(made) if self._base is made else {**made, **self._base}  # what a version set wins
        for key in self._gone:
            base[key] = GONE
        base.update(self._over)
        out._base, out._over, out._gone = base, {}, set()
        return out

    def __getitem__(self, key: K) -> V:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def get(self, key: K, default: Any = None) -> Any:
        value = CowMap.get(self, key, _MISSING)
        if value is _MISSING and key not in self._gone:  # not made yet?
            value = self._loaded.make(key)
        return default if value is _MISSING or value is GONE else value

    def peek(self, key: K) -> Any:
        """The value of `key` when it is made or set (None otherwise): nothing is made."""
        value = CowMap.get(self, key, _MISSING)
        return None if value is _MISSING or value is GONE else value

    def __contains__(self, key: object) -> bool:
        if key in self._over:
            return True
        if key in self._gone:
            return False
        value = self._base.get(key, _MISSING)  # type: ignore[arg-type]
        return value is not GONE if value is not _MISSING else self._loaded.holds(key)

    def __delitem__(self, key: K) -> None:
        if key not in self:
            raise KeyError(key)
        self._over.pop(key, None)
        self._gone.add(key)
        self._len -= 1

    def packed_keys(self) -> PackedKeys | None:
        """The keys as a cache holds them packed, when this map holds exactly the loaded version's
        keys (None otherwise: edited since, or not a cache's)."""
        if self._over or self._gone or self._base is not self._loaded.made:
            return None
        packed = getattr(self._loaded, "packed_keys", None)
        return packed() if packed is not None else None

    def make_all(self) -> None:
        """Have `loaded` make every record it has not made, in one pass when it can."""
        make_all = getattr(self._loaded, "make_all", None)
        if make_all is not None:
            make_all()

    def __iter__(self) -> Iterator[K]:
        if not self._over and not self._gone and self._base is self._loaded.made:  # (as loaded)
            return iter(self._loaded.keys_in_order())
        return self._merged()

    def _merged(self) -> Iterator[K]:
        over, gone, base, loaded = self._over, self._gone, self._base, self._loaded
        for key in loaded.keys_in_order():
            if key not in over and key not in gone and base.get(key) is not GONE:
                yield key
        if base is not loaded.made:  # (a fold's: keys set since the load, and tombstones)
            for key, value in list(base.items()):
                if value is not GONE and key not in over and key not in gone and not loaded.holds(key):
                    yield key
        yield from over
