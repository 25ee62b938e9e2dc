"""The one protocol every compared memory system implements. The harness, never the system,
answers questions and judges answers; systems only build memory and retrieve evidence."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class Turn:
    """One message as a memory system receives it. `speaker` names the person for multi-party data
    (LoCoMo), else None. No gold labels: which turns answer a question stays with the question."""

    role: str
    content: str
    timestamp: datetime | None
    turn_id: str
    speaker: str | None = None


@dataclass(frozen=True)
class Session:
    """`speakers`: the conversation's named speakers in the dataset's order (LoCoMo: speaker_a, then
    speaker_b), the same on every session of a conversation; empty for user/assistant data."""

    session_id: str
    timestamp: datetime
    turns: tuple[Turn, ...]
    speakers: tuple[str, ...] = ()


@dataclass(frozen=True)
class Endpoints:
    """What a library baseline talks to: one OpenAI-compatible base URL serving chat completions and
    embeddings (the harness's logging proxy), the model names to ask for, and the context length the
    backbone is served with. `json_schema`: whether the chat endpoint enforces `response_format`
    `json_schema` (vLLM, the harness's own servers); llama.cpp's server refuses it."""

    base_url: str
    chat_model: str
    embed_model: str
    embed_dim: int
    context_tokens: int
    api_key: str = "local"
    json_schema: bool = True


# Retrieval recall@k is scored up to k = 10 distinct sessions, LongMemEval's way: a ranking of units
# read as its first k distinct sessions. A system that can rank past what it serves goes on until its
# ranking names this many sessions (`Retrieval.beyond`), so that a budget of 10 units holding fewer
# sessions is not scored as a shorter ranking.
RANKING_SESSIONS = 10


class SystemUnavailable(RuntimeError):
    """The system cannot run here (missing package or checkout); the harness reports it as skipped."""


@dataclass
class EvidenceItem:
    """One retrieved unit, with its provenance in dataset ids when the system exposes it. `section`: the
    part of the system's own context it belongs to (a speaker's memories, a profile, facts or entities),
    which the system's `render` lays out; `rank`: its place in the system's ranking (0 first) when that
    differs from its place in the list (a context laid out by section, not by rank)."""

    text: str
    time: str | None = None
    session_ids: list[str] = field(default_factory=list)
    turn_ids: list[str] = field(default_factory=list)
    score: float | None = None
    section: str | None = None
    rank: int | None = None


@dataclass
class InputKept:
    """What a system holds of the turns it was given, counted after its build: `kept` of `given` turns
    reached its store as `stored` of its own units (`unit`: pages, memories, episodes, documents...;
    None when the system does not say), and the turns it lost, by reason. `upstream`: the losses are the
    system's own behaviour as its authors run it, matched on purpose (their pairing, their filters)."""

    given: int
    kept: int
    unit: str = "turns"
    stored: int | None = None
    lost: dict[str, int] = field(default_factory=dict)
    upstream: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.kept <= self.given or sum(self.lost.values()) != self.given - self.kept:
            raise ValueError(f"input kept {self.kept} of {self.given} turns, lost {self.lost}: the counts "
                             f"disagree")

    @classmethod
    def everything(cls, sessions: Sequence[Session], unit: str = "turns",
                   stored: int | None = None) -> InputKept:
        """Every turn of `sessions` kept."""
        given = sum(len(s.turns) for s in sessions)
        return cls(given, given, unit, stored)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Retrieval:
    context: str  # what goes into the answer prompt
    evidence: list[EvidenceItem]
    latency: dict[str, float] = field(default_factory=dict)
    trace: dict[str, Any] = field(default_factory=dict)
    ranked: bool = True  # False: the evidence is everything kept, in time order (no recall@k is reported)
    # the system's ranking past the served evidence, in rank order, until it names RANKING_SESSIONS
    # sessions: provenance for recall only, never in the context
    beyond: list[EvidenceItem] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@runtime_checkable
class MemorySystem(Protocol):
    """A system may also offer `attach(instance_id, workdir, sessions)`: open the memory that an earlier
    `reset` + `ingest` left under `workdir`, so that a resumed run skips its build (the harness looks
    for the method and rebuilds when there is none), and `render(items)`: its own context for a subset
    of its evidence items (in their list order, sections and headers as its retrieval lays them out),
    which the token budget uses after cutting the items in rank order (default `render_evidence`)."""

    name: str

    def reset(self, instance_id: str, workdir: Path) -> None:
        """Start a fresh, empty memory for one instance; state lives under `workdir`."""

    def ingest(self, sessions: Sequence[Session]) -> dict[str, Any]:
        """Write all sessions (time-ordered) into memory; return build statistics, with `input`: what
        the system holds of the turns it was given (`InputKept.to_dict()`)."""

    def retrieve(self, question: str, when: datetime | None) -> Retrieval:
        """Evidence for `question` asked at reference time `when`."""

    def close(self) -> None:
        """Release models, servers and files."""


def render_evidence(items: Sequence[EvidenceItem]) -> str:
    return "\n".join(f"[{e.time}] {' '.join(e.text.split())}" if e.time else " ".join(e.text.split())
                     for e in items)


def ranked_past(order: Sequence[int], session_of: Sequence[str], served: int,
                sessions: int = RANKING_SESSIONS) -> list[int]:
    """The entries of `order` (a full ranking of indices) past its first `served`, taken in order until
    the ranking names `sessions` distinct sessions (`session_of[i]`: the session of index i)."""
    named = {session_of[i] for i in order[:served]}
    out: list[int] = []
    for i in order[served:]:
        if len(named) >= sessions:
            break
        out.append(i)
        named.add(session_of[i])
    return out
