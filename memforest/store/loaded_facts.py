"""The facts of a version loaded from the store, made when first reached: by id (`LoadedFacts`)
and by normalised text (`LoadedNorms`), each the base of a `memforest.resident.lazy_map.LazyMap`.

An open of a large memory would otherwise read every fact's id, normalised text and event start and
make a record of each (and a map of the normalised texts, for exact duplicates). Which ids the
loaded version holds is its fact table's keys (from the partitions cache); a fact is made from its
row, through the version's read snapshot (`memforest.store.tree_source.StoreTreeSource`), the first
time something reaches it, and a normalised text is looked up in the store (`facts_by_norm`).

The snapshot moves to each version this process commits (`memforest.store.read_snapshot`); the
loaded version must keep reading its own facts. Before a commit changes or drops facts, `remember`
makes each (as the loaded version holds it), looks up its normalised text, and marks it changed: a
changed fact is never read from the store again, nor found there by its text; a fact the loaded
version does not hold (a later one) is never taken for one of its own."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from memforest.resident.cow import _MISSING
from memforest.resident.lazy_map import KeyedLoaded
from memforest.types import Fact

if TYPE_CHECKING:  # (the source reads through the store: only named here)
    from memforest.store.tree_source import StoreTreeSource


class LoadedFacts(KeyedLoaded):
    """fact id -> `Fact` of the loaded version, made when first asked for (`Fact.unread`: its norm
    and event start read now, the rest when first needed). `keys` (id -> row of the loaded fact
    table) is the version's set of ids, and their order."""

    def __init__(self, keys: Mapping[Any, int], source: StoreTreeSource) -> None:
        self.made: dict[str, Fact] = {}
        self._keys = keys
        self._source = source
        self.changed: set[str] = set()  # ids a commit of this process changed or dropped (`remember`)
        self.norms = LoadedNorms(self)

    def make(self, fact_id: Any) -> Any:
        fact = self.made.get(fact_id)
        if fact is not None:
            return fact
        if fact_id not in self._keys:
            return _MISSING
        norm, event_start = self._source.read("fact_key", fact_id)
        return self.made.setdefault(fact_id, Fact.unread(fact_id, norm, event_start, self._source))

    def make_all(self) -> None:
        """Make every fact not made yet, in one pass over the store's rows (for what reads them all)."""
        if len(self.made) >= len(self._keys):
            return
        made, keys, source = self.made, self._keys, self._source
        for fact_id, norm, event_start in source.fact_keys():
            if fact_id in keys and fact_id not in made:  # (a changed fact was made before it changed)
                made.setdefault(fact_id, Fact.unread(fact_id, norm, event_start, source))

    def remember(self, fact_ids: Iterable[str]) -> None:
        """Before a commit changes or drops `fact_ids`: make those the loaded version holds, look up
        their normalised texts, and mark them changed (the module's notes)."""
        for fact_id in fact_ids:
            if fact_id in self._keys and fact_id not in self.changed:
                fact = self.make(fact_id)
                self.norms.make(fact.norm)
                self.changed.add(fact_id)


class LoadedNorms:
    """normalised text -> id of the fact of the loaded version that has it, looked up in the store
    when first asked for (`LoadedFacts`' notes); of two facts with one text, the later id (as a map
    built in id order keeps). Its length is the facts' count: an exact duplicate is merged into the
    fact it repeats, so each text is one fact's."""

    def __init__(self, facts: LoadedFacts) -> None:
        self.made: dict[str, str] = {}
        self._absent: set[str] = set()
        self._facts = facts
        self._lock = threading.Lock()
        self._complete = False  # every text of the loaded version is in `made` (`make_all`)

    def __len__(self) -> int:
        return len(self._facts)

    def holds(self, norm: Any) -> bool:
        return self.make(norm) is not _MISSING

    def keys_in_order(self) -> Iterator[str]:
        self.make_all()
        return iter(list(self.made))

    def make_all(self) -> None:
        """Make every fact, and so every text, of the loaded version (one pass over the store's rows):
        nothing is looked up in the store again."""
        facts = self._facts
        facts.make_all()
        texts: dict[str, str] = {}
        for fact_id in sorted(facts.keys_in_order()):  # (in id order: the later id of a text wins)
            if fact_id not in facts.changed:  # (a changed fact's text was looked up as it changed)
                texts[facts.made[fact_id].norm] = fact_id
        with self._lock:
            for norm, fact_id in texts.items():
                self.made.setdefault(norm, fact_id)
            self._complete = True

    def make(self, norm: Any) -> Any:
        found = self.made.get(norm)
        if found is not None:
            return found
        if not isinstance(norm, str) or norm in self._absent or self._complete:
            return _MISSING
        facts = self._facts
        ids = [f for f in facts._source.facts_with_norm(norm) if facts.holds(f) and f not in facts.changed]
        with self._lock:
            if ids:
                return self.made.setdefault(norm, max(ids))
            self._absent.add(norm)
            return _MISSING
