"""Mem0 keeps every turn it is given, and says so: each build's `input` (baselines.base.InputKept)
counts the turns that reached an add of every store, the turns lost by reason (empty, or carried by an
add that raised) and the memories the stores hold at the end, listed through the library; its
per-speaker sections follow the conversation's speaker order (speaker_a first) whoever speaks first;
and its evidence carries each memory's section and rank, so that `render` lays out any subset of it as
the context is laid out. Checked through the real mem0ai 1.x where it is installed (on a scripted
backbone served over HTTP), through the 1.x stand-in of tests/library_stubs.py, and through the real
Mem0 2.x worker over its stand-in (tests/fixtures/mem0_v2_stub) with both evaluation protocols."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from library_stubs import Recorder, install

from baselines.base import Endpoints, EvidenceItem, Retrieval, Session
from benchmarks.datasets import load_dataset

FIXTURES = Path(__file__).parent / "fixtures"
A, B = "Ines", "Odo"  # speaker_a, speaker_b: speaker_b speaks first
QUESTION = "What instrument is Odo learning?"


def said(speaker: str, dia: str, text: str) -> dict[str, str]:
    return {"speaker": speaker, "dia_id": dia, "text": text}


def conversation(tmp_path: Path) -> list[Session]:
    """A LoCoMo-format conversation read by the dataset loader: speaker_b opens each session, speaker_a
    replies twice in a row and the last turn goes unanswered."""
    sample = {"sample_id": "conv-x", "qa": [{"question": QUESTION, "answer": "cello", "evidence": ["D1:1"],
                                             "category": 4}],
              "conversation": {
                  "speaker_a": A, "speaker_b": B,
                  "session_1_date_time": "9:00 am on 3 March, 2023",
                  "session_1": [said(B, "D1:1", "I started learning the cello this week."),
                                said(A, "D1:2", "That is wonderful news."),
                                said(A, "D1:3", "My aunt played the cello in Porto.")],
                  "session_2_date_time": "6:30 pm on 9 April, 2023",
                  "session_2": [said(B, "D2:1", "I bought a bow made of pernambuco."),
                                said(A, "D2:2", "Did it cost a lot?"),
                                said(B, "D2:3", "Less than my first lesson, oddly.")]}}
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([sample]))
    sessions = list(load_dataset("locomo", path=path).instances[0].sessions)
    assert sessions[0].speakers == (A, B) and sessions[0].turns[0].speaker == B
    return sessions


TURNS = ["D1:1", "D1:2", "D1:3", "D2:1", "D2:2", "D2:3"]


def with_empty_turn(sessions: list[Session]) -> list[Session]:
    """The conversation with a turn of whitespace at the end of its first session (never sent)."""
    first = sessions[0]
    blank = replace(first.turns[0], content=" \n", turn_id="D1:4")
    return [replace(first, turns=(*first.turns, blank)), *sessions[1:]]


def endpoints(url: str = "http://127.0.0.1:9/v1") -> Endpoints:
    return Endpoints(url, "scripted", "hash", 64, 8192)


def assert_sections_in_speaker_order(system: Any, result: Retrieval) -> None:
    """The context is the system's own rendering of its evidence, speaker_a's section first; a subset
    holding speaker_b's memories only keeps both headers in that order."""
    headers = [f"Memories of {A}", f"Memories of {B}"]
    assert result.context == system.render(result.evidence)
    assert [line for line in result.context.splitlines() if line.startswith("Memories of")] == [
        f"{h}:" for h in headers]
    assert {e.section for e in result.evidence} == set(headers)
    assert sorted(e.rank for e in result.evidence if e.rank is not None) == list(range(len(result.evidence)))
    b_only = [e for e in result.evidence if e.section == headers[1]][:1]
    cut = system.render(b_only).split("\n\n")
    assert [part.splitlines()[0] for part in cut] == [f"{h}:" for h in headers]
    assert cut[0] == f"{headers[0]}:\n(none)"


# ---------------------------------------------------------------- mem0ai 1.x, the real library


def mem0_1x_responder() -> Callable[[Any], Any]:
    """Replies to Mem0 1.x's two calls per add: the extraction (a system prompt, then the messages as
    `role: content` lines) gets one fact per message, the ADD/UPDATE/DELETE call adds each of them."""
    facts: list[str] = []

    def respond(request: Any) -> Any:
        if request.messages[0]["role"] == "system":
            body = request.messages[-1]["content"].split("Input:\n", 1)[-1]
            facts[:] = [line.split(": ", 1)[1] for line in body.splitlines() if ": " in line]
            return {"facts": list(facts)}
        return {"memory": [{"id": str(i), "text": fact, "event": "ADD"} for i, fact in enumerate(facts)]}

    return respond


@pytest.fixture
def served() -> Iterator[str]:
    from benchmarks.serving.stack import ServingStack
    from memforest.llm.calllog import CallLog
    from memforest.llm.testing import HashEmbedder, ScriptedChatModel

    with ServingStack(CallLog(), "mem0", llm_model="scripted", chat=ScriptedChatModel(mem0_1x_responder()),
                      embedder=HashEmbedder(64)) as stack:
        yield stack.base_url


@pytest.mark.skipif(importlib.util.find_spec("mem0") is None, reason="mem0ai is not installed")
def test_mem0_1x_keeps_every_turn_of_a_speaker_b_first_conversation(tmp_path: Path, served: str) -> None:
    from baselines.mem0 import Mem0System

    system = Mem0System(endpoints(served))
    try:
        system.reset("conv-x", tmp_path / "store")
        stats = system.ingest(conversation(tmp_path))
        stores = [f"conv-x__{A}", f"conv-x__{B}"]
        # 3 non-empty turns per session, 2 per add: 2 adds per session and store
        assert stats["adds_per_store"] == dict.fromkeys(stores, 4) and stats["failed_adds"] == 0
        # every turn reached an add of each store, as one memory there
        assert stats["input"] == {"given": 6, "kept": 6, "unit": "memories", "stored": 12, "lost": {},
                                  "upstream": False}
        for store in stores:
            memories = system.memory.get_all(user_id=store, limit=100)["results"]
            assert sorted({t for m in memories for t in m["metadata"]["turn_ids"]}) == TURNS
        # each add extracted facts, so Mem0 1.x made its update call after each extraction
        assert stats["events"] == {"ADD": 12}
        assert (stats["chat_calls"], stats["update_calls"], stats["failed_update_calls"]) == (16, 8, 0)
        result = system.retrieve(QUESTION, None)
        assert len(result.evidence) == 12
        assert_sections_in_speaker_order(system, result)
    finally:
        system.close()


# ---------------------------------------------------------------- mem0ai 1.x, the stand-in


def test_mem0_1x_counts_the_turns_of_an_add_that_raised(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from baselines.mem0 import Mem0System

    recorder = Recorder(mem0_fail_on="cello this week")
    install(monkeypatch, recorder)
    system = Mem0System(endpoints())
    system.reset("conv-x", tmp_path / "store")
    stats = system.ingest(with_empty_turn(conversation(tmp_path)))
    # D1:1 and D1:2 share the add that raised, in both stores
    assert stats["failed_adds"] == 2 and stats["first_add_error"] == "ValueError: unusable model output"
    assert stats["input"] == {"given": 7, "kept": 4, "unit": "memories", "stored": 6,
                              "lost": {"empty text": 1, "failed add": 2}, "upstream": False}
    assert [a["user_id"] for a in recorder.adds[:2]] == [f"conv-x__{A}"] * 2  # speaker_a's store first
    assert_sections_in_speaker_order(system, system.retrieve(QUESTION, None))
    system.close()


def test_mem0_1x_single_store_makes_speaker_a_the_user(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from baselines.mem0 import Mem0System

    recorder = Recorder()
    install(monkeypatch, recorder)
    system = Mem0System(endpoints(), speaker_stores=False, batch_turns=1)
    system.reset("conv-x", tmp_path / "store")
    stats = system.ingest(conversation(tmp_path))
    assert {a["user_id"] for a in recorder.adds} == {"conv-x"} and stats["adds"] == 6
    assert all(m["role"] == ("user" if m["content"].startswith(f"{A}: ") else "assistant")
               for a in recorder.adds for m in a["messages"])
    assert stats["input"]["kept"] == 6 and stats["input"]["stored"] == 6
    result = system.retrieve(QUESTION, None)
    assert "Memories of" not in result.context and result.context == system.render(result.evidence)
    assert {e.section for e in result.evidence} == {None}
    system.close()


# ---------------------------------------------------------------- Mem0 2.x, the real worker


def worker_calls(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


@pytest.fixture
def stub_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    log = tmp_path / "mem0.jsonl"
    monkeypatch.setenv("MEM0_STUB_LOG", str(log))
    monkeypatch.setenv("PYTHONPATH", str(FIXTURES / "mem0_v2_stub"))
    return log


def run_worker(protocol: str, sessions: Sequence[Session], tmp_path: Path) -> tuple[Any, dict[str, Any],
                                                                                   Retrieval]:
    from baselines.mem0 import mem0_additive_system

    system = mem0_additive_system(endpoints(), python=sys.executable, protocol=protocol,
                                  log_path=tmp_path / "worker.log")
    system.reset("conv", tmp_path / "store")
    stats = system.ingest(sessions)
    return system, stats, system.retrieve(QUESTION, None)


def test_mem0_2_keeps_every_turn_and_counts_an_add_that_raised(tmp_path: Path, stub_log: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEM0_STUB_FAIL", "cello this week")
    system, stats, result = run_worker("mem0_1x_budgets", with_empty_turn(conversation(tmp_path)), tmp_path)
    try:
        adds = [c for c in worker_calls(stub_log) if c["op"] == "add"]
        assert [a["user_id"] for a in adds[:2]] == [f"conv__{A}"] * 2  # speaker_a's store first
        for store in (A, B):
            sent = [t for a in adds if a["user_id"] == f"conv__{store}" for t in a["metadata"]["turn_ids"]]
            assert sorted(sent) == TURNS  # every non-empty turn reached an add of each store
        assert stats["adds"] == 8 and stats["failed_adds"] == 2 and stats["memories_added"] == 6
        assert stats["input"] == {"given": 7, "kept": 4, "unit": "memories", "stored": 6,
                                  "lost": {"empty text": 1, "failed add": 2}, "upstream": False}
        assert (stats["chat_calls"], stats["update_calls"]) == (8, 0)  # 2.x: extraction only
        assert_sections_in_speaker_order(system, result)
    finally:
        system.close()


def test_mem0_2_memory_benchmarks_layout_on_locomo(tmp_path: Path, stub_log: Path) -> None:
    """memory-benchmarks' LoCoMo runner: one store per conversation, speaker_a the user, one turn
    `Name: text` per add, no instructions, top-k 200 (threshold: the library's default)."""
    system, stats, result = run_worker("memory_benchmarks", conversation(tmp_path), tmp_path)
    try:
        calls = worker_calls(stub_log)
        adds = [c for c in calls if c["op"] == "add"]
        assert {a["user_id"] for a in adds} == {"conv"} and [len(a["messages"]) for a in adds] == [1] * 6
        assert [m["content"].split(": ", 1)[0] for a in adds for m in a["messages"]] == [B, A, A, B, A, B]
        assert all(m["role"] == ("user" if m["content"].startswith(f"{A}: ") else "assistant")
                   for a in adds for m in a["messages"])
        assert all(a["prompt"]["instructions"] is None for a in adds)
        assert [(c["filters"]["user_id"], c["top_k"], c["threshold"]) for c in calls
                if c["op"] == "search"] == [("conv", 200, 0.1)]
        assert stats["input"] == {"given": 6, "kept": 6, "unit": "memories", "stored": 6, "lost": {},
                                  "upstream": False}
        assert result.context == system.render(result.evidence) and "Memories of" not in result.context
        assert len(result.context.splitlines()) == 6 and {e.section for e in result.evidence} == {None}
    finally:
        system.close()


def test_mem0_2_memory_benchmarks_layout_on_longmemeval(tmp_path: Path, stub_log: Path) -> None:
    """memory-benchmarks' LongMemEval runner: one store per question, the dataset's roles, two messages
    per add, top-k 200."""
    data = load_dataset("longmemeval_s", path=FIXTURES / "longmemeval_tiny.json", limit=1)
    sessions = list(data.instances[0].sessions)
    turns = [t for s in sessions for t in s.turns if t.content.strip()]
    system, stats, _ = run_worker("memory_benchmarks", sessions, tmp_path)
    try:
        calls = worker_calls(stub_log)
        adds = [c for c in calls if c["op"] == "add"]
        assert {a["user_id"] for a in adds} == {"conv"} and max(len(a["messages"]) for a in adds) == 2
        assert [m["role"] for a in adds for m in a["messages"]] == [
            "assistant" if t.role == "assistant" else "user" for t in turns]
        assert [c["top_k"] for c in calls if c["op"] == "search"] == [200]
        given = sum(len(s.turns) for s in sessions)
        assert stats["input"]["given"] == given and stats["input"]["kept"] == len(turns)
    finally:
        system.close()


def test_an_evidence_subset_renders_as_the_context_lays_it_out() -> None:
    from baselines.mem0.additive import Mem0AdditiveSystem

    system = Mem0AdditiveSystem.__new__(Mem0AdditiveSystem)  # render needs no worker
    system.sections = (f"Memories of {A}", f"Memories of {B}")
    items = [EvidenceItem("Odo plays cello", "2023-03-03 09:00", section=f"Memories of {B}", rank=0),
             EvidenceItem("Ines has an aunt", None, section=f"Memories of {A}", rank=1)]
    assert system.render(items) == (f"Memories of {A}:\nInes has an aunt\n\n"
                                    f"Memories of {B}:\n[2023-03-03 09:00] Odo plays cello")
