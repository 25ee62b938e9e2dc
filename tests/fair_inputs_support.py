"""What the equal-input tests share: the tiny dataset files as each test reads them, the served
endpoints every adapter is built with, and drivers that run a system over the files with its library
stubbed at its API."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from library_stubs import Recorder, install

from baselines.base import Endpoints, Retrieval, Session, Turn
from benchmarks.datasets import load_dataset

FIXTURES = Path(__file__).parent / "fixtures"
KINDS = ["locomo", "longmemeval"]
# The LoCoMo file as it is (speaker_a Nadia opens), the same file with speaker_a and speaker_b swapped
# (speaker_b opens, as in 6 of the 10 real conversations), and the LongMemEval file.
ALL_KINDS = ["locomo", "locomo_b_first", "longmemeval"]


def sessions_of(kind: str) -> list[Session]:
    if kind == "locomo":
        data = load_dataset("locomo", path=FIXTURES / "locomo_tiny.json", limit=1)
    else:
        data = load_dataset("longmemeval_s", path=FIXTURES / "longmemeval_tiny.json", limit=1)
    return list(data.instances[0].sessions)


def turns_of(sessions: Sequence[Session]) -> list[Turn]:
    return [t for s in sessions for t in s.turns if t.content.strip()]


def endpoints() -> Endpoints:
    return Endpoints("http://127.0.0.1:9/v1", "chat", "embed", 64, 8192)


def instance_of(kind: str, tmp_path: Path) -> Any:
    if kind == "longmemeval":
        return load_dataset("longmemeval_s", path=FIXTURES / "longmemeval_tiny.json", limit=1).instances[0]
    samples = json.loads((FIXTURES / "locomo_tiny.json").read_text())
    if kind == "locomo_b_first":
        conv = samples[0]["conversation"]
        conv.update(speaker_a=conv["speaker_b"], speaker_b=conv["speaker_a"])
    path = tmp_path / f"{kind}.json"
    path.write_text(json.dumps(samples))
    return load_dataset("locomo", path=path, limit=1).instances[0]


def dataset_sessions(kind: str, tmp_path: Path) -> list[Session]:
    sessions = list(instance_of(kind, tmp_path).sessions)
    if kind == "locomo_b_first":
        assert sessions[0].speakers == ("Tomas", "Nadia") and sessions[0].turns[0].speaker == "Nadia"
    return sessions


def session_of_text(sessions: Sequence[Session]) -> dict[str, Session]:
    """Each turn's text -> its session (the tiny files' turn texts are all different)."""
    out = {t.content: s for s in sessions for t in s.turns if t.content.strip()}
    assert len(out) == len(turns_of(sessions))
    return out


def first_speaker(sessions: Sequence[Session]) -> str:
    return sessions[0].speakers[0] if sessions[0].speakers else "user"


class QueryEmbedder:
    name, dim = "recording", 2

    def embed(self, texts: Sequence[str], kind: str = "passage") -> np.ndarray:
        return np.ones((len(texts), 2), dtype=np.float32) / np.sqrt(2)

    def close(self) -> None:
        pass


def run_memoryos(sessions: list[Session], tmp_path: Path, when: datetime | None) -> tuple[Any, Any]:
    from baselines.memoryos import MemoryOSSystem

    system = MemoryOSSystem(endpoints())
    system.embedder = QueryEmbedder()
    system.reset("conv", tmp_path / "memoryos")
    mos = system.mos
    found: list[dict[str, Any]] = []
    search = mos.retriever.retrieve_context

    def recorded(**kwargs: Any) -> dict[str, Any]:
        found.append(search(**kwargs))
        return found[-1]

    mos.retriever.retrieve_context = recorded
    system.ingest(sessions)
    system.retrieve("Where does Nadia sail?", when)
    system.close()
    return mos, found[0]


def drive(system: Any, sessions: Sequence[Session], store: Path, question: str | None = None,
          when: datetime | None = None) -> Retrieval | None:
    """Reset `system` into `store`, ingest `sessions`, ask `question` at `when` if given, and close it
    whatever happens: the retrieval (None without a question)."""
    try:
        system.reset("conv", store)
        system.ingest(sessions)
        return system.retrieve(question, when) if question is not None else None
    finally:
        system.close()


def run_library(system_class: Any, kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                question: str | None = None, when: datetime | None = None
                ) -> tuple[Recorder, list[Session], Retrieval | None]:
    """Build `system_class` (an adapter over the stubbed libraries of library_stubs) on the `kind`
    file, ask `question` at `when` if given, close it: what reached the libraries, the sessions, and
    the retrieval (None without a question)."""
    recorder = Recorder()
    install(monkeypatch, recorder)
    sessions = sessions_of(kind)
    return recorder, sessions, drive(system_class(endpoints()), sessions, tmp_path, question, when)
