"""Equal inputs: every runnable system, on a tiny LoCoMo-format and a tiny LongMemEval-format file, gets
each turn's text exactly once (per store, for Mem0's per-speaker stores), its speaker attached once,
questions embedded in the query form, and no gold label. What reaches each library is recorded by
stand-ins of the libraries (tests/library_stubs.py), by the real Mem0 2.x worker over a stand-in of
mem0ai 2.x, and by a stub worker for the systems driven in their own environments."""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import fields
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from library_stubs import TODAY, Recorder, install

from baselines.base import Endpoints, Session, Turn
from baselines.flat_rag import FlatRAGSystem
from baselines.flat_sessions import FlatSessionsSystem
from baselines.full_context import FullContextSystem
from baselines.worker import WorkerSystem
from benchmarks.datasets import load_dataset
from memforest.llm.base import EmbedKind
from memforest.llm.testing import HashEmbedder

FIXTURES = Path(__file__).parent / "fixtures"
QUERY = {"input_type": "query"}
GOLD_KEYS = ("has_answer", "answer_session_ids", "evidence", "adversarial_answer")


def sessions_of(kind: str) -> list[Session]:
    if kind == "locomo":
        data = load_dataset("locomo", path=FIXTURES / "locomo_tiny.json", limit=1)
    else:
        data = load_dataset("longmemeval_s", path=FIXTURES / "longmemeval_tiny.json", limit=1)
    return list(data.instances[0].sessions)


def turns_of(sessions: Sequence[Session]) -> list[Turn]:
    return [t for s in sessions for t in s.turns if t.content.strip()]


def named(turn: Turn) -> str:
    return f"{turn.speaker}: {turn.content}" if turn.speaker else turn.content


def one_line(turn: Turn) -> str:
    return f"{turn.speaker or turn.role}: {' '.join(turn.content.split())}"


def assert_each_turn_once(received: Sequence[str], expected: Sequence[str], turns: Sequence[Turn]) -> None:
    """`received` (what reached the library, one entry per message) is exactly `expected` (one per turn):
    each turn's text once, and a named speaker at most once in its message."""
    assert Counter(received) == Counter(expected)
    for turn, text in zip(turns, expected):
        assert sum(r.count(turn.content.strip()) for r in received) >= 1
        if turn.speaker:
            assert text.count(f"{turn.speaker}: ") == 1
            assert not turn.content.startswith(f"{turn.speaker}:")  # the loader leaves the speaker out


def assert_no_gold(payload: Any) -> None:
    text = json.dumps(payload, default=str)
    for key in GOLD_KEYS:
        assert f'"{key}"' not in text


KINDS = ["locomo", "longmemeval"]


def test_turns_carry_no_gold_field() -> None:
    assert {f.name for f in fields(Turn)} == {"role", "content", "timestamp", "turn_id", "speaker"}
    assert {f.name for f in fields(Session)} == {"session_id", "timestamp", "turns", "speakers"}


@pytest.mark.parametrize("kind", KINDS)
def test_locomo_speaker_is_a_field_not_in_the_text(kind: str) -> None:
    turns = turns_of(sessions_of(kind))
    assert all((t.speaker is not None) == (kind == "locomo") for t in turns)
    assert not any(t.speaker and t.content.startswith(f"{t.speaker}:") for t in turns)


class RecordingEmbedder(HashEmbedder):
    def __init__(self) -> None:
        super().__init__(dim=64)
        self.calls: list[tuple[EmbedKind, list[str]]] = []

    def embed(self, texts: Sequence[str], kind: EmbedKind = "passage") -> np.ndarray:
        self.calls.append((kind, list(texts)))
        return super().embed(texts, kind)


@pytest.mark.parametrize("kind", KINDS)
def test_flat_rag_and_full_context(kind: str, tmp_path: Path) -> None:
    sessions = sessions_of(kind)
    turns = turns_of(sessions)
    embedder = RecordingEmbedder()
    rag = FlatRAGSystem(embedder, top_k=3)
    rag.reset("i", tmp_path)
    rag.ingest(sessions)
    rag.retrieve("Where?", None)
    passages = [t for k, texts in embedder.calls if k == "passage" for t in texts]
    assert_each_turn_once(passages, [one_line(t) for t in turns], turns)
    assert [k for k, _ in embedder.calls] == ["passage", "query"]
    full = FullContextSystem(8192, 256)
    full.reset("i", tmp_path)
    full.ingest(sessions)
    lines = [line for line in full.retrieve("Where?", None).context.splitlines()
             if line and not line.startswith("[")]
    assert_each_turn_once(lines, [one_line(t) for t in turns], turns)


@pytest.mark.parametrize("kind", KINDS)
def test_flat_sessions_ranks_mempalace_documents_and_reads_both_roles(kind: str, tmp_path: Path) -> None:
    """MemPalace's raw-mode documents (LongMemEval: user turns; LoCoMo: `Name said, "text"`) are
    embedded; the answer model reads every turn of a ranked session once, its speaker once."""
    sessions = sessions_of(kind)
    turns = turns_of(sessions)
    embedder = RecordingEmbedder()
    system = FlatSessionsSystem(embedder, top_k=len(sessions))
    system.reset("i", tmp_path)
    system.ingest(sessions)
    result = system.retrieve("Where?", None)
    passages = "\n".join(t for k, texts in embedder.calls if k == "passage" for t in texts).splitlines()
    indexed = [t for t in turns if t.speaker or t.role == "user"]
    assert Counter(passages) == Counter(f'{t.speaker} said, "{t.content}"' if t.speaker else t.content
                                        for t in indexed)
    assert [k for k, _ in embedder.calls] == ["passage", "query"]
    lines = [line for e in result.evidence for line in e.text.splitlines()]
    assert_each_turn_once(lines, [one_line(t) for t in turns], turns)
    assert any(t.role == "assistant" for t in turns) == (kind == "longmemeval")


@pytest.mark.parametrize("kind", KINDS)
def test_memforest_gets_each_turn_once(kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import baselines.memforest_method.system as adapter

    received: list[Any] = []

    class RecordingForest:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        def ingest_sessions(self, user: str, payload: list[dict[str, Any]]) -> Any:
            received.extend(payload)
            return type("Stats", (), {"to_dict": lambda self: {}})()

    monkeypatch.setattr(adapter, "MemForest", RecordingForest)
    system = adapter.MemForestSystem(None, None, HashEmbedder(), None)  # type: ignore[arg-type]
    sessions = sessions_of(kind)
    system.reset("i", tmp_path)
    system.ingest(sessions)
    turns = turns_of(sessions)
    assert_each_turn_once([t["content"] for s in received for t in s["turns"]], [named(t) for t in turns],
                          turns)
    assert_no_gold(received)


def endpoints() -> Endpoints:
    return Endpoints("http://127.0.0.1:9/v1", "chat", "embed", 64, 8192)


@pytest.mark.parametrize("kind", KINDS)
def test_mem0_gets_each_turn_once_per_store(kind: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from baselines.mem0 import Mem0System

    recorder = Recorder()
    install(monkeypatch, recorder)
    sessions = sessions_of(kind)
    turns = turns_of(sessions)
    system = Mem0System(endpoints())
    system.reset("conv", tmp_path)
    system.ingest(sessions)
    system.retrieve("Where does Nadia sail?", None)
    stores = sorted({a["user_id"] for a in recorder.adds})
    assert len(stores) == (2 if kind == "locomo" else 1)
    for store in stores:
        received = [m["content"] for a in recorder.adds if a["user_id"] == store for m in a["messages"]]
        assert_each_turn_once(received, [named(t) for t in turns], turns)
    assert_no_gold(recorder.adds)
    assert all(TODAY not in a["prompt"] for a in recorder.adds)  # the session's date, never the import day
    questions = [e for e in recorder.embeddings if e["input"] == ["Where does Nadia sail?"]]
    assert len(questions) == len(stores) and all(e.get("extra_body") == QUERY for e in questions)
    # stored text: passages
    assert all("extra_body" not in e for e in recorder.embeddings if e not in questions)


@pytest.mark.parametrize("kind", KINDS)
def test_zep_gets_each_turn_once(kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from baselines.zep_local import ZepLocalSystem

    recorder = Recorder()
    install(monkeypatch, recorder)
    sessions = sessions_of(kind)
    turns = turns_of(sessions)
    system = ZepLocalSystem(endpoints())
    system.reset("conv", tmp_path)
    system.ingest(sessions)
    system.retrieve("Where does Nadia sail?", datetime(2024, 1, 2))
    system.close()
    expected = [f"{t.speaker or t.role}: {t.content}" for t in turns]
    assert_each_turn_once([e["episode_body"] for e in recorder.episodes], expected, turns)
    assert_no_gold(recorder.episodes)
    # LongMemEval questions are searched as Zep's script searches them: behind the question date
    query = "(date: 2024/01/02 (Tue) 00:00) " * (kind == "longmemeval") + "Where does Nadia sail?"
    questions = [e for e in recorder.embeddings if e["input"] == [query]]
    assert len(questions) == 2 and all(e.get("extra_body") == QUERY for e in questions)


@pytest.mark.parametrize("kind", KINDS)
def test_mem0_2_worker_gets_each_turn_once_per_store(kind: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from baselines.mem0 import mem0_additive_system

    log = tmp_path / "mem0.jsonl"
    monkeypatch.setenv("MEM0_STUB_LOG", str(log))
    monkeypatch.setenv("PYTHONPATH", str(FIXTURES / "mem0_v2_stub"))
    system = mem0_additive_system(endpoints(), python=sys.executable, log_path=tmp_path / "worker.log")
    sessions = sessions_of(kind)
    turns = turns_of(sessions)
    try:
        system.reset("conv", tmp_path / "store")
        system.ingest(sessions)
        system.retrieve("Where does Nadia sail?", None)
    finally:
        system.close()
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    adds = [c for c in calls if c["op"] == "add"]
    stores = sorted({a["user_id"] for a in adds})
    assert len(stores) == (2 if kind == "locomo" else 1)
    for store in stores:
        received = [m["content"] for a in adds if a["user_id"] == store for m in a["messages"]]
        assert_each_turn_once(received, [named(t) for t in turns], turns)
    assert_no_gold(adds)
    questions = [c for c in calls if c["op"] == "embed" and c["input"] == ["Where does Nadia sail?"]]
    assert len(questions) == len(stores) and all(c.get("extra_body") == QUERY for c in questions)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("system_name", ["lightmem", "evermemos"])
def test_worker_systems_get_each_turn_once(kind: str, system_name: str, tmp_path: Path) -> None:
    """LightMem and EverMemOS run in environments absent here: a stub worker speaking the same
    protocol records what the harness sends them (the text alone, the speaker as its own field)."""
    system = WorkerSystem(system_name, sys.executable, FIXTURES / "echo_worker.py", {})
    sessions = sessions_of(kind)
    turns = turns_of(sessions)
    try:
        system.reset("conv", tmp_path)
        system.ingest(sessions)
    finally:
        system.close()
    received = json.loads((tmp_path / "memory.json").read_text())
    assert (Counter(t["content"] for t in received if t["content"].strip())
            == Counter(t.content for t in turns))
    assert [t["speaker"] for t in received if t["content"].strip()] == [t.speaker for t in turns]
    assert_no_gold(received)
