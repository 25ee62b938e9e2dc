"""The in-memory view of one user's memory, loaded from the store and edited by operations.

Every change an operation makes is recorded in a ChangeSet; the store writes the ChangeSet in one
transaction, so the committed version is the only one a reader ever sees."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from memforest.trees.memtree import MemTree
from memforest.types import Cell, Fact, Session

NodeKey = tuple[str, int]  # (tree id, node id)


@dataclass
class TreeInfo:
    tree_id: str  # "session:<sid>", "entity:user", "entity:<label>", "scene:<n>"
    family: str
    label: str
    rowid: int  # stable integer; FAISS ids of the tree's nodes are (rowid << 32) | node id
    tree: MemTree


@dataclass
class NodeData:
    """Derived artifacts of a node: its text (leaf evidence or interval summary) and embedding."""

    text: str
    mode: str  # leaf | llm | extractive (extractive marks a degraded or generator-free summary)
    embedding: np.ndarray


@dataclass
class EntityStat:
    label: str
    facts: set[str] = field(default_factory=set)
    sessions: dict[str, int] = field(default_factory=dict)  # session id -> facts from it
    tree_id: str | None = None


@dataclass
class Scene:
    """An online cluster of facts. `total` is the sum of its members' embeddings, so adding and
    removing members are exact inverses; `centroid` is its direction."""

    scene_id: str
    domain: str
    total: np.ndarray
    size: int
    t_last: float
    tree_id: str

    @property
    def centroid(self) -> np.ndarray:
        norm = float(np.linalg.norm(self.total))
        return self.total / norm if norm else self.total


@dataclass
class ChangeSet:
    """What one operation changed, by primary key. Deletions win over upserts of the same key."""

    sessions: set[str] = field(default_factory=set)
    deleted_sessions: set[str] = field(default_factory=set)
    facts: set[str] = field(default_factory=set)
    deleted_facts: set[str] = field(default_factory=set)
    trees: set[str] = field(default_factory=set)
    deleted_trees: set[str] = field(default_factory=set)
    nodes: set[NodeKey] = field(default_factory=set)
    deleted_nodes: set[NodeKey] = field(default_factory=set)
    entities: set[str] = field(default_factory=set)
    deleted_entities: set[str] = field(default_factory=set)
    scenes: set[str] = field(default_factory=set)
    deleted_scenes: set[str] = field(default_factory=set)
    pending_cells: bool = False  # rewrite the pending-cell list
    operation: dict = field(default_factory=dict)


@dataclass
class UserState:
    user: str
    version: int = 0
    embedder: str = ""
    dim: int = 0
    sessions: dict[str, Session] = field(default_factory=dict)
    cells: dict[str, Cell] = field(default_factory=dict)
    session_cells: dict[str, list[str]] = field(default_factory=dict)
    facts: dict[str, Fact] = field(default_factory=dict)
    fact_vecs: dict[str, np.ndarray] = field(default_factory=dict)
    trees: dict[str, TreeInfo] = field(default_factory=dict)
    nodes: dict[NodeKey, NodeData] = field(default_factory=dict)
    entities: dict[str, EntityStat] = field(default_factory=dict)
    scenes: dict[str, Scene] = field(default_factory=dict)
    pending_cells: set[str] = field(default_factory=set)  # extraction failed (degraded mode)
    next_tree_rowid: int = 1
    next_scene: int = 1

    def add_tree(self, tree_id: str, family: str, label: str, fanout: int) -> TreeInfo:
        info = TreeInfo(tree_id, family, label, self.next_tree_rowid, MemTree(tree_id, fanout))
        self.next_tree_rowid += 1
        self.trees[tree_id] = info
        return info

    def trees_holding(self, item: str) -> list[str]:
        return [tid for tid, info in self.trees.items() if item in info.tree]
