"""Equal inputs: every runnable system, on a tiny LoCoMo-format and a tiny LongMemEval-format file, gets
each turn's text exactly once (per store, for Mem0's per-speaker stores), its speaker attached once,
questions embedded in the query form, and no gold label; each library that takes times gets the
dataset's session times in its own convention, and each system that takes a question date gets it.
What reaches each library is recorded by stand-ins of the libraries (tests/library_stubs.py, and the
stubs of memoryos-pro and MemPalace/Chroma in tests/fixtures/upstream), by the real Mem0 2.x worker over
a stand-in of mem0ai 2.x, and by the real LightMem and EverMemOS workers driving stub checkouts of their
pinned layouts (tests/fixtures/upstream); the harness side of the worker protocol by a stub worker."""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import fields
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fair_inputs_support import (
    ALL_KINDS,
    FIXTURES,
    KINDS,
    dataset_sessions,
    drive,
    endpoints,
    first_speaker,
    run_library,
    run_memoryos,
    session_of_text,
    sessions_of,
    turns_of,
)
from library_stubs import TODAY
from test_baseline_protocols import UPSTREAM, records

from baselines.base import Session, Turn
from baselines.flat_rag import FlatRAGSystem
from baselines.flat_sessions import FlatSessionsSystem
from baselines.full_context import FullContextSystem
from baselines.worker import WorkerSystem
from memforest.llm.base import EmbedKind
from memforest.llm.testing import HashEmbedder

QUERY = {"input_type": "query"}
GOLD_KEYS = ("has_answer", "answer_session_ids", "evidence", "adversarial_answer")


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
            turns = sum(len(s["turns"]) for s in payload)
            return type("Stats", (), {"to_dict": lambda self: {"turns": turns, "turns_dropped": 0}})()

        def snapshot(self, user: str) -> Any:  # one cell per stored turn
            cells = {i: None for i, _ in enumerate(t for s in received for t in s["turns"])}
            return type("Snapshot", (), {"state": type("State", (), {"cells": cells})()})()

    monkeypatch.setattr(adapter, "MemForest", RecordingForest)
    system = adapter.MemForestSystem(None, None, HashEmbedder(), None)  # type: ignore[arg-type]
    sessions = sessions_of(kind)
    system.reset("i", tmp_path)
    system.ingest(sessions)
    turns = turns_of(sessions)
    assert_each_turn_once([t["content"] for s in received for t in s["turns"]], [named(t) for t in turns],
                          turns)
    assert_no_gold(received)


@pytest.mark.parametrize("kind", KINDS)
def test_mem0_gets_each_turn_once_per_store(kind: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from baselines.mem0 import Mem0System

    recorder, sessions, _ = run_library(Mem0System, kind, tmp_path, monkeypatch, "Where does Nadia sail?")
    turns = turns_of(sessions)
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

    recorder, sessions, _ = run_library(ZepLocalSystem, kind, tmp_path, monkeypatch, "Where does Nadia sail?",
                                     datetime(2024, 1, 2))
    turns = turns_of(sessions)
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
    drive(system, sessions, tmp_path / "store", "Where does Nadia sail?")
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
    drive(system, sessions, tmp_path)
    received = json.loads((tmp_path / "memory.json").read_text())
    assert (Counter(t["content"] for t in received if t["content"].strip())
            == Counter(t.content for t in turns))
    assert [t["speaker"] for t in received if t["content"].strip()] == [t.speaker for t in turns]
    assert_no_gold(received)


# ---------------------------------------------------------------- MemoryOS and MemPalace (stubs at their API)
# The LoCoMo file as it is (speaker_a Nadia opens), the same file with speaker_a and speaker_b swapped
# (speaker_b opens, as in 6 of the 10 real conversations), and the LongMemEval file.

@pytest.mark.parametrize("kind", ALL_KINDS)
def test_memoryos_gets_each_turn_once_in_speaker_order(kind: str, tmp_path: Path,
                                                       memoryos_stub: None) -> None:
    """Pages: speaker_a's (or the user's) turns as `user_input`, the other speaker's as `agent_response`
    (a side's turns in a row joined by a newline), the text alone, in the dataset's order, each turn once;
    no page one-sided (memoryos-pro drops those), so only turns the authors' pairing loses too are
    missing (tests/test_memoryos_input.py)."""
    from test_memoryos_input import authors_keep

    sessions = dataset_sessions(kind, tmp_path)
    mos, _ = run_memoryos(sessions, tmp_path, None)
    assert all(p["user_input"] and p["agent_response"] for p in mos.added)
    sides = [(side, text) for p in mos.added for side in ("user_input", "agent_response")
             for text in p[side].split("\n")]
    ordered = [t for s in sorted(sessions, key=lambda s: s.timestamp) for t in s.turns if t.content.strip()]
    sent = {text for _, text in sides}
    kept = [t for t in ordered if t.content in sent]
    assert [text for _, text in sides] == [t.content for t in kept]
    opener = first_speaker(sessions)
    assert [side for side, _ in sides] == [
        "user_input" if (t.speaker or t.role) == opener else "agent_response" for t in kept]
    assert authors_keep(sessions, opener) <= {t.turn_id for t in kept}
    assert_no_gold(mos.added)


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_mempalace_gets_each_turn_once_in_speaker_order(kind: str, tmp_path: Path,
                                                        mempalace_stub: None) -> None:
    """Indexed documents as MemPalace's raw mode writes them (LoCoMo: every turn `Name said, "text"` in
    the session's order; LongMemEval: the user turns); the answer model reads every turn once."""
    from baselines.mempalace import MemPalaceSystem

    sessions = dataset_sessions(kind, tmp_path)
    turns = turns_of(sessions)
    system = MemPalaceSystem(endpoints())
    system.reset("conv", tmp_path / "palace")
    collection = system.collection
    system.ingest(sessions)
    result = system.retrieve("Where does Nadia sail?", None)
    system.close()
    documents = [row[1] for row in collection.rows]
    assert documents == ["\n".join(f'{t.speaker} said, "{t.content}"' if t.speaker else t.content
                                   for t in s.turns if t.content.strip() and (t.speaker or t.role == "user"))
                         for s in sessions]
    assert len(result.evidence) == len(sessions)
    lines = [line for e in result.evidence for line in e.text.splitlines()]
    assert_each_turn_once(lines, [one_line(t) for t in turns], turns)
    assert_no_gold([row[:3] for row in collection.rows])


# ---------------------------------------------------------------- LightMem and EverMemOS: the real workers
# driving the stub checkouts (tests/fixtures/upstream), which record what reaches the library.


def run_real_worker(system_name: str, sessions: list[Session], tmp_path: Path,
                    monkeypatch: pytest.MonkeyPatch, when: datetime | None = None) -> list[dict[str, Any]]:
    record = tmp_path / "record.jsonl"
    monkeypatch.setenv("UPSTREAM_STUB_RECORD", str(record))
    if system_name == "lightmem":
        from baselines.lightmem import lightmem_system

        system = lightmem_system(endpoints(), python=sys.executable, checkout=str(UPSTREAM / "lightmem"),
                                 llmlingua_model_path="/m/llmlingua2", log_path=tmp_path / "worker.log")
    else:
        from baselines.evermemos import evermemos_system

        system = evermemos_system(endpoints(), python=sys.executable, checkout=str(UPSTREAM / "evermemos"),
                                  use_reranker=False, log_path=tmp_path / "worker.log")
    drive(system, sessions, tmp_path / "w", "Where does Nadia sail?", when)
    return records(record)


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_lightmem_worker_passes_each_turn_once_with_its_speaker_and_time(
        kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every turn reaches `add_memory` once, in order: LoCoMo as a user message with `speaker_name` and
    `speaker_id` (speaker_a as `Session.speakers` names it, whoever opens), LongMemEval in its role; every
    message (an empty partner too) stamped with its session's time, as the file gives it."""
    sessions = dataset_sessions(kind, tmp_path)
    turns = turns_of(sessions)
    events = run_real_worker("lightmem", sessions, tmp_path, monkeypatch)
    adds = [e for e in events if e["event"] == "add_memory"]
    sent = [m for a in adds for m in a["messages"] if m["content"]]
    assert [m["content"] for m in sent] == [t.content for t in turns]
    if kind == "longmemeval":
        assert [m["role"] for m in sent] == [t.role for t in turns]
        assert all("speaker_name" not in m for a in adds for m in a["messages"])
    else:
        speaker_a = sessions[0].speakers[0]
        assert all(m["role"] == "user" for m in sent)
        assert [m["speaker_name"] for m in sent] == [t.speaker for t in turns]
        assert [m["speaker_id"] for m in sent] == ["speaker_a" if t.speaker == speaker_a else "speaker_b"
                                                   for t in turns]
    session = session_of_text(sessions)
    for a in adds:  # a turn and its partner (a reply, or empty) per add, both at their session's time
        times = {session[m["content"]].timestamp.isoformat() for m in a["messages"] if m["content"]}
        assert len(times) == 1 and {m["time_stamp"] for m in a["messages"]} == times
    assert_no_gold(adds)


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_evermemos_worker_passes_each_turn_once_with_its_sender_and_time(
        kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every turn reaches `EverCoreAdapter.add` once: LoCoMo with `sender_name` the speaker and the
    conversation's speaker_a/speaker_b as `Session.speakers` gives them; LongMemEval as `user_<id>` /
    `assistant_<id>`. Times: the session's time, then 30 s per message within it (upstream's loader; the
    tiny files' sessions are far enough apart that the 90% squeeze never applies)."""
    sessions = dataset_sessions(kind, tmp_path)
    turns = turns_of(sessions)
    events = run_real_worker("evermemos", sessions, tmp_path, monkeypatch)
    added = next(e for e in events if e["event"] == "add")
    messages = added["messages"]
    by_id = {t.turn_id: (s, i, t) for s in sessions for i, t in enumerate(s.turns)}
    assert Counter(m["metadata"]["dia_id"] for m in messages) == Counter(t.turn_id for t in turns)
    for m in messages:
        session, index, turn = by_id[m["metadata"]["dia_id"]]
        assert m["metadata"]["session"] == session.session_id and m["content"] == turn.content
        assert m["sender_name"] == (turn.speaker or f"{turn.role}_conv")
        assert datetime.fromisoformat(m["timestamp"]) == session.timestamp + timedelta(seconds=30 * index)
    starts = sorted(s.timestamp for s in sessions)
    assert all((b - a).total_seconds() * 0.9 > 30 * 10 for a, b in zip(starts, starts[1:]))
    if kind == "longmemeval":
        assert added["metadata"] == {"speaker_a": "user_conv", "speaker_b": "assistant_conv"}
    else:
        assert added["metadata"] == dict(zip(("speaker_a", "speaker_b"), sessions[0].speakers))
    assert_no_gold(messages)
