"""What a query returns: the answer, the evidence, and a trace of how it was found."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Evidence:
    kind: str  # fact | cell
    id: str
    text: str
    time: str  # ISO date of the evidence's temporal anchor
    score: float
    tree_id: str
    via: str  # browse | temporal:before | temporal:after | expansion | flat | root
    session_ids: list[str] = field(default_factory=list)


@dataclass
class RecalledTree:
    tree_id: str
    family: str
    score: float
    root_sim: float | None
    fact_sim: float | None


@dataclass
class QueryResult:
    question: str
    answer: str | None
    evidence: list[Evidence]
    trace: dict[str, Any]
    # units the ranking holds past the served evidence, in rank order (`QueryConfig.rank_sessions`)
    ranked_beyond: list[Evidence] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
