"""A published version of one user's memory: its state, vector indexes and lexical index.

Nothing in a published snapshot changes after publication; the next version shares what did not
change with it (copy-on-write), so readers keep using it while a writer prepares the next."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator

import numpy as np

from memforest.index.forest_index import ForestIndex
from memforest.index.lexical_versions import VersionedLexical
from memforest.resident.ondemand import NodeKey
from memforest.state import ChangeSet, UserState


class Snapshot:
    def __init__(self, state: UserState, index: ForestIndex, lexical: VersionedLexical | None = None) -> None:
        self.state = state
        self.index = index
        self._lexical = lexical
        self._lexical_source: Callable[[UserState], VersionedLexical] | None = None
        self._lock = threading.Lock()

    def use_lexical_source(self, source: Callable[[UserState], VersionedLexical]) -> None:
        """Where the lexical index comes from when it is first needed (a cache beside the store)
        instead of being built from the state; set before the snapshot is published."""
        self._lexical_source = source

    def built_lexical(self) -> VersionedLexical | None:
        """The lexical index if it has been built or read (None otherwise)."""
        return self._lexical

    @property
    def version(self) -> int:
        return self.state.version

    def iter_fact_trees(self, fact_id: str) -> Iterator[str]:
        """`fact_trees(fact_id)` one at a time, without listing every session the fact was said in."""
        yield from self.state.trees_holding(fact_id)
        fact = self.state.facts.get(fact_id)
        if fact is not None:
            yield from (f"session:{s}" for s in fact.sorted_sessions)

    def fact_trees(self, fact_id: str, limit: int | None = None, also: Iterable[str] = ()) -> list[str]:
        """Ids of the trees holding a leaf for a fact, and of the session trees it was said in (in id
        order; with `limit`, the first `limit` of those and any of `also`)."""
        fact = self.state.facts.get(fact_id)
        if fact is None or limit is None:
            return list(self.iter_fact_trees(fact_id))
        sessions = fact.sorted_sessions[:limit]
        said = [f"session:{s}" for s in sessions]
        if len(fact.sorted_sessions) > limit:
            first = set(said)
            said += [t for t in also if t not in first and t.startswith("session:")
                     and t.removeprefix("session:") in fact.sessions]
        return [*self.state.trees_holding(fact_id), *said]

    @property
    def lexical(self) -> VersionedLexical:
        """BM25 over every cell's full text and every fact; built on the first query of a loaded
        version, then carried to each next version for the documents it changes."""
        with self._lock:
            if self._lexical is None and self._lexical_source is not None:
                self._lexical = self._lexical_source(self.state)
            elif self._lexical is None:
                self.state.read_facts()
                self._lexical = VersionedLexical(_documents(self.state, self.state.cells, self.state.facts))
            return self._lexical

    def next_lexical(self, state: UserState, ch: ChangeSet) -> VersionedLexical | None:
        """The lexical index of `state` (the version after this one, changed by `ch`), when this
        version's is built; else None (built on first use)."""
        if self._lexical is None:
            return None
        old = self.state
        gone = {c for s in ch.deleted_sessions | ch.sessions for c in old.session_cells.get(s, ())}
        gone |= {f for f in ch.deleted_facts | ch.facts if f in old.facts and f not in state.facts}
        cells = [c for s in sorted(ch.sessions) for c in state.session_cells.get(s, ())]
        facts = [f for f in sorted(ch.facts) if f in state.facts and f not in old.facts]
        return self._lexical.next_version(sorted(gone), _documents(state, cells, facts))

    def embedding(self, key: NodeKey) -> np.ndarray:
        return self.state.nodes[key].embedding


def _documents(state: UserState, cells: Iterable[str], facts: Iterable[str]) -> list[tuple[str, str]]:
    docs = [(c, state.cells[c].text) for c in cells]
    return docs + [(f, state.facts[f].text) for f in facts]
