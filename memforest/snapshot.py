"""A committed version of one user's memory as queries read it: never mutated after publication."""

from __future__ import annotations

from functools import cached_property

import numpy as np

from memforest.index.forest_index import ForestIndex
from memforest.index.lexical import LexicalIndex
from memforest.state import NodeKey, UserState


class Snapshot:
    def __init__(self, state: UserState, index: ForestIndex) -> None:
        self.state = state
        self.index = index

    @property
    def version(self) -> int:
        return self.state.version

    @cached_property
    def fact_trees(self) -> dict[str, list[str]]:
        """Fact id -> ids of the trees holding a leaf for it, and the session trees it was said in."""
        out: dict[str, list[str]] = {}
        for tid, info in self.state.trees.items():
            if info.family == "session":
                continue
            for item in info.tree.placements():
                out.setdefault(item, []).append(tid)
        for fid, fact in self.state.facts.items():
            out.setdefault(fid, []).extend(sorted(f"session:{s}" for s in fact.sessions))
        return out

    @cached_property
    def lexical(self) -> LexicalIndex:
        """BM25 over every cell's full text and every fact, built on the first query of this version."""
        docs = [(c.id, c.text) for c in self.state.cells.values()]
        docs += [(f.id, f.text) for f in self.state.facts.values()]
        return LexicalIndex(docs)

    def embedding(self, key: NodeKey) -> np.ndarray:
        return self.state.nodes[key].embedding
