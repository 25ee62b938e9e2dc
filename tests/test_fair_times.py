"""Equal inputs in time: each library that takes times gets the dataset's session times in its own
convention (baselines/README.md, the fidelity table), and each system that takes a question date at query
time gets it. The libraries are stubbed at their API as in test_fair_inputs.py."""

from __future__ import annotations

import json
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from fair_inputs_support import (
    ALL_KINDS,
    FIXTURES,
    KINDS,
    dataset_sessions,
    drive,
    endpoints,
    instance_of,
    run_library,
    run_memoryos,
    session_of_text,
    sessions_of,
    turns_of,
)

from baselines.base import RANKING_SESSIONS, Session
from memforest.llm.testing import HashEmbedder

# ---------------------------------------------------------------- times: each library gets the dataset's
# session times, in its own convention (baselines/README.md, fidelity table). LightMem and EverMemOS are
# checked above, through their workers. flat_rag, flat_sessions and full_context hand no time to a library.


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_memoryos_pages_carry_their_session_time(kind: str, tmp_path: Path, memoryos_stub: None) -> None:
    """`get_timestamp` is the dataset's clock: each page's timestamp is its session's time (a page
    answered in a later session, as upstream pairs it, keeps its opening turn's)."""
    sessions = dataset_sessions(kind, tmp_path)
    session = session_of_text(sessions)
    mos, _ = run_memoryos(sessions, tmp_path, None)
    for page in mos.added:
        opening = page["user_input"].split("\n")[0]
        assert page["timestamp"] == session[opening].timestamp.strftime("%Y-%m-%d %H:%M:%S")
        assert all(session[t].timestamp >= session[opening].timestamp
                   for side in ("user_input", "agent_response") for t in page[side].split("\n"))


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_mempalace_documents_carry_their_session_time(kind: str, tmp_path: Path,
                                                      mempalace_stub: None) -> None:
    from baselines.mempalace import MemPalaceSystem

    sessions = dataset_sessions(kind, tmp_path)
    system = MemPalaceSystem(endpoints())
    system.reset("conv", tmp_path / "palace")
    collection = system.collection
    system.ingest(sessions)
    system.close()
    assert [row[2] for row in collection.rows] == [
        {"session_id": s.session_id, "timestamp": s.timestamp.strftime("%Y-%m-%d %H:%M")} for s in sessions]


@pytest.mark.parametrize("kind", KINDS)
def test_zep_episodes_carry_session_time_plus_a_second_per_message(kind: str, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from baselines.zep_local import ZepLocalSystem

    recorder, sessions, _ = run_library(ZepLocalSystem, kind, tmp_path, monkeypatch)
    expected = [(f"{s.session_id}#{t.turn_id}",
                 s.timestamp.replace(tzinfo=timezone.utc) + timedelta(seconds=i))
                for s in sessions for i, t in enumerate(t for t in s.turns if t.content.strip())]
    assert [(e["name"], e["reference_time"]) for e in recorder.episodes] == expected


@pytest.mark.parametrize("kind", KINDS)
def test_mem0_adds_carry_their_session_date(kind: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Mem0 1.x: the session's date as metadata and as "Today's date" in the extraction prompt."""
    from baselines.mem0 import Mem0System

    recorder, sessions, _ = run_library(Mem0System, kind, tmp_path, monkeypatch)
    by_id = {s.session_id: s for s in sessions}
    for add in recorder.adds:
        when = by_id[add["metadata"]["session_id"]].timestamp
        assert add["metadata"]["session_date"] == when.strftime("%Y-%m-%d %H:%M")
        assert f"Today's date is {when:%Y-%m-%d}" in add["prompt"]
    assert {a["metadata"]["session_id"] for a in recorder.adds} == set(by_id)


@pytest.mark.parametrize("kind", KINDS)
def test_mem0_2_adds_carry_their_session_time(kind: str, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Mem0 2.x: the session's day as the prompt's current and observation date, its time as
    `created_at` and `session_date`."""
    from baselines.mem0 import mem0_additive_system

    log = tmp_path / "mem0.jsonl"
    monkeypatch.setenv("MEM0_STUB_LOG", str(log))
    monkeypatch.setenv("PYTHONPATH", str(FIXTURES / "mem0_v2_stub"))
    sessions = sessions_of(kind)
    by_id = {s.session_id: s for s in sessions}
    system = mem0_additive_system(endpoints(), python=sys.executable, log_path=tmp_path / "worker.log")
    drive(system, sessions, tmp_path / "store")
    adds = [c for c in (json.loads(line) for line in log.read_text().splitlines()) if c["op"] == "add"]
    for add in adds:
        when = by_id[add["metadata"]["session_id"]].timestamp
        assert add["metadata"]["created_at"] == when.isoformat()
        assert add["metadata"]["session_date"] == when.strftime("%Y-%m-%d %H:%M")
        assert add["prompt"]["current_date"] == add["prompt"]["timestamp"] == when.strftime("%Y-%m-%d")
    assert {a["metadata"]["session_id"] for a in adds} == set(by_id)


class RecordingForest:
    """MemForest at its API: records the sessions ingested and the question's date."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.sessions: list[dict[str, Any]] = []
        self.queries: list[dict[str, Any]] = []

    def ingest_sessions(self, user: str, payload: list[dict[str, Any]]) -> Any:
        self.sessions.extend(payload)
        turns = sum(len(s["turns"]) for s in payload)
        return type("Stats", (), {"to_dict": lambda self: {"turns": turns, "turns_dropped": 0}})()

    def query(self, user: str, question: str, *, date: str | None, answer: bool,
              rank_sessions: int = 0) -> Any:
        self.queries.append({"question": question, "date": date, "rank_sessions": rank_sessions})
        return type("Result", (), {"evidence": [], "trace": {}, "ranked_beyond": []})()

    def snapshot(self, user: str) -> Any:  # one cell per stored turn
        cells = dict.fromkeys(range(sum(len(s["turns"]) for s in self.sessions)))
        return type("Snapshot", (), {"state": type("State", (), {"cells": cells})()})()

    def close(self) -> None:
        pass


def run_memforest(kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                  when: datetime | None) -> tuple[list[Session], RecordingForest]:
    import baselines.memforest_method.system as adapter

    monkeypatch.setattr(adapter, "MemForest", RecordingForest)
    system = adapter.MemForestSystem(None, None, HashEmbedder(), None)  # type: ignore[arg-type]
    sessions = dataset_sessions(kind, tmp_path)
    system.reset("conv", tmp_path)
    forest = system.forest
    assert isinstance(forest, RecordingForest)
    system.ingest(sessions)
    system.retrieve("Where does Nadia sail?", when)
    return sessions, forest


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_memforest_sessions_carry_their_time(kind: str, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    sessions, forest = run_memforest(kind, tmp_path, monkeypatch, None)
    assert [(p["session_id"], p["timestamp"]) for p in forest.sessions] == [
        (s.session_id, s.timestamp.isoformat()) for s in sessions]
    assert [t["timestamp"] for p in forest.sessions for t in p["turns"]] == [
        t.timestamp.isoformat() if t.timestamp else None for t in turns_of(sessions)]


# ---------------------------------------------------------------- the question date at query time
# Systems that take it: Zep (LongMemEval: the search query `(date: <question date>) question`, as Zep's
# script; LoCoMo: the question alone, as `zep_locomo_search.py`), MemForest (`query(date=...)`) and
# MemoryOS (`get_timestamp` is the question's time while it retrieves). Systems that take no question
# date at query time, so nothing is asserted for them: Mem0 1.x and 2.x (search by question alone; the
# dates they hold are the sessions'), MemPalace, LightMem, EverMemOS, flat_rag, flat_sessions, full_context.


def question_date(tmp_path: Path) -> datetime:
    when = instance_of("longmemeval", tmp_path).questions[0].question_date
    assert when == datetime(2023, 5, 30, 23, 40)
    return when


def test_zep_searches_behind_the_question_date(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from baselines.zep_local import ZepLocalSystem

    recorder, _, result = run_library(ZepLocalSystem, "longmemeval", tmp_path, monkeypatch,
                                      "Which team do I coach now?", question_date(tmp_path))
    query = "(date: 2023/05/30 (Tue) 23:40) Which team do I coach now?"
    assert result is not None
    assert [s["query"] for s in recorder.searches] == [query, query] and result.trace["query"] == query


def test_memforest_queries_at_the_question_date(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    when = question_date(tmp_path)
    _, forest = run_memforest("longmemeval", tmp_path, monkeypatch, when)
    assert forest.queries == [{"question": "Where does Nadia sail?", "date": "2023-05-30T23:40:00",
                               "rank_sessions": RANKING_SESSIONS}]


def test_memoryos_retrieves_at_the_question_date(tmp_path: Path, memoryos_stub: None) -> None:
    when = question_date(tmp_path)
    _, found = run_memoryos(dataset_sessions("longmemeval", tmp_path), tmp_path, when)
    assert found["retrieved_at"] == "2023-05-30 23:40:00"
