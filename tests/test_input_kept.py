"""Input conservation: every adapter's build statistics say how many of the turns it was given reached
its system's store (`InputKept` as `input`), and every turn that upstream's own handling keeps is kept
and counted. The data are the awkward cases of the real files: a LoCoMo conversation whose speaker_b
speaks first, with two consecutive turns of one speaker and a last turn nobody answers; a LongMemEval
chat with two consecutive assistant replies, an unanswered last user turn and a session with no user
turn. Zep Local and MemPalace run on their real libraries (graphiti-core on Kuzu, mempalace on Chroma)
against the harness's model server; LightMem and EverMemOS on their real workers over the stub
checkouts of their pinned layouts; the references and MemForest in process."""

from __future__ import annotations

import importlib.util
import math
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from test_baseline_protocols import UPSTREAM, evermemos, lightmem, run_worker

from baselines.base import Endpoints, InputKept, Session, Turn
from baselines.worker import WorkerError, WorkerSystem
from memforest.llm.base import ChatRequest
from memforest.llm.testing import HashEmbedder, ScriptedChatModel

ECHO = Path(__file__).parent / "fixtures" / "echo_worker.py"
UNUSABLE = "UNUSABLE"  # a turn whose extraction the scripted model answers with JSON of the wrong shape


def b_first() -> list[Session]:
    """LoCoMo's shape: speaker_a is Ana, but Bo opens; Bo speaks twice in a row in the first session; Ana's
    last turn gets no answer."""
    pair = ("Ana", "Bo")

    def turns(sid: str, *said: tuple[str, str]) -> tuple[Turn, ...]:
        return tuple(Turn("user", text, None, f"{sid}:{i}", speaker=who)
                     for i, (who, text) in enumerate(said))

    return [Session("c1", datetime(2023, 5, 8, 13, 56), turns(
                "c1", ("Bo", "I got a job in Lisbon."), ("Ana", "Congratulations!"),
                ("Bo", "I start on Monday."), ("Bo", "The office is by the river.")), speakers=pair),
            Session("c2", datetime(2023, 6, 1, 10), turns(
                "c2", ("Ana", "How is Lisbon?"), ("Bo", "Sunny."), ("Ana", "Send photos.")), speakers=pair)]


def chat() -> list[Session]:
    """LongMemEval's shape: two assistant replies in a row, a last user turn nobody answers, and a session
    with no user turn."""
    def turns(sid: str, *said: tuple[str, str]) -> tuple[Turn, ...]:
        return tuple(Turn(role, text, None, f"{sid}:{i}") for i, (role, text) in enumerate(said))

    return [Session("s1", datetime(2023, 3, 1, 9), turns(
                "s1", ("user", "I adopted a grey cat called Miso."), ("assistant", "Miso is a lovely name."),
                ("assistant", "Cats like a routine."), ("user", "She needs a vet."))),
            Session("s2", datetime(2023, 3, 9, 9), turns(
                "s2", ("assistant", "Welcome back!"), ("assistant", "How can I help today?"))),
            Session("s3", datetime(2023, 4, 2, 9), turns(
                "s3", ("user", "I moved to Lisbon for a new job."), ("assistant", "Lisbon is sunny.")))]


def given(sessions: list[Session]) -> int:
    return sum(len(s.turns) for s in sessions)


def account(stats: dict[str, Any]) -> InputKept:
    """The build's input account; constructing it checks that its counts add up."""
    return InputKept(**stats["input"])


def kept_everything(stats: dict[str, Any], sessions: list[Session], unit: str,
                    stored: int | None) -> None:
    kept = account(stats)
    assert (kept.given, kept.kept, kept.lost, kept.unit, kept.stored) == (
        given(sessions), given(sessions), {}, unit, stored)


# ---------------------------------------------------------------- the real libraries, on the model server


def schema_replies(request: ChatRequest) -> Any:
    """Every field of the requested response schema empty (Graphiti extracts nothing and goes on); JSON of
    another shape for a turn marked UNUSABLE, which Graphiti cannot use."""
    if any(UNUSABLE in m["content"] for m in request.messages):
        return {"unusable": True}
    return {name: [] for name in (request.json_schema or {}).get("properties", {})}


@pytest.fixture
def served() -> Iterator[Endpoints]:
    from benchmarks.serving.model_server import ModelServer

    chat_model = ScriptedChatModel(schema_replies, name="chat")
    with ModelServer(HashEmbedder(64), chat_model, model_name="chat") as server:
        yield Endpoints(server.base_url, "chat", "hash", 64, 8192)


def build(system: Any, sessions: list[Session], workdir: Path) -> dict[str, Any]:
    try:
        system.reset("conv", workdir)
        return dict(system.ingest(sessions))
    finally:
        system.close()


def installed(*modules: str) -> pytest.MarkDecorator:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    return pytest.mark.skipif(bool(missing), reason=f"{', '.join(missing)} not installed")


@installed("graphiti_core", "kuzu")
def test_zep_keeps_one_episode_per_turn_in_the_graph(served: Endpoints, tmp_path: Path) -> None:
    from baselines.zep_local import ZepLocalSystem

    for name, sessions in (("locomo", b_first()), ("longmemeval", chat())):
        stats = build(ZepLocalSystem(served), sessions, tmp_path / name)
        kept_everything(stats, sessions, "episodes", given(sessions))  # counted in the graph
        assert stats["failed_episodes"] == 0


@installed("graphiti_core", "kuzu")
def test_zep_counts_a_skipped_episode_as_a_lost_turn(served: Endpoints, tmp_path: Path) -> None:
    from baselines.zep_local import ZepLocalSystem
    from baselines.zep_local.system import LOST_EMPTY, LOST_FAILED

    sessions = b_first()
    odd = Session("c3", datetime(2023, 6, 2, 10), (
        Turn("user", f"{UNUSABLE} words", None, "c3:0", speaker="Bo"), Turn("user", "  ", None, "c3:1",
                                                                                speaker="Ana"),
        Turn("user", "See you.", None, "c3:2", speaker="Ana")), speakers=("Ana", "Bo"))
    stats = build(ZepLocalSystem(served), [*sessions, odd], tmp_path)
    kept = account(stats)
    assert stats["failed_episodes"] == 1 and stats["failures"][0].startswith("c3#c3:0: ValidationError")
    assert kept.lost == {LOST_FAILED: 1, LOST_EMPTY: 1} and not kept.upstream
    assert kept.kept == kept.stored == given(sessions) + 1 and kept.given == given(sessions) + 3


@installed("mempalace", "chromadb")
def test_mempalace_skips_a_session_without_user_turns_as_upstream_does(served: Endpoints,
                                                                       tmp_path: Path) -> None:
    """benchmarks/longmemeval_bench.py indexes a session only when it has user turns: the assistant-only
    session is lost on purpose; the consecutive replies and the unanswered turn of the others are kept."""
    from baselines.mempalace import MemPalaceSystem
    from baselines.mempalace.system import LOST_NO_USER, LOST_UNREAD

    stats = build(MemPalaceSystem(served), chat(), tmp_path / "chat")
    kept = account(stats)
    assert (kept.given, kept.kept, kept.lost, kept.upstream) == (8, 6, {LOST_NO_USER: 2}, True)
    assert kept.unit == "documents" and kept.stored == stats["documents"] == 2  # read from Chroma
    indexed = account(build(MemPalaceSystem(served, answer_documents="indexed"), chat(), tmp_path / "idx"))
    assert indexed.lost == {LOST_NO_USER: 2, LOST_UNREAD: 3} and indexed.kept == 3 and indexed.upstream
    kept_everything(build(MemPalaceSystem(served), b_first(), tmp_path / "locomo"), b_first(), "documents", 2)


# ---------------------------------------------------------------- LightMem and EverMemOS: their workers


@pytest.fixture
def record_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "record.jsonl"
    monkeypatch.setenv("UPSTREAM_STUB_RECORD", str(path))
    return path


def test_lightmem_keeps_every_locomo_turn_and_the_user_side_of_chats(record_file: Path,
                                                                      tmp_path: Path) -> None:
    """LoCoMo: every turn is a user message (add_locomo.py), whoever opens and however they alternate.
    LongMemEval: `messages_use` "user_only" (upstream's setting) reads the user turns, an unanswered last
    one included; the assistant turns are lost as upstream loses them. `stored`: the store's entries."""
    stats, _ = run_worker(lightmem(UPSTREAM / "lightmem", tmp_path), b_first(), tmp_path / "locomo")
    kept_everything(stats, b_first(), "memories", given(b_first()))  # the stub stores each user message
    stats, _ = run_worker(lightmem(UPSTREAM / "lightmem", tmp_path), chat(), tmp_path / "chat")
    kept = account(stats)
    assert (kept.given, kept.kept, kept.stored, kept.upstream) == (8, 3, 3, True)
    assert kept.lost == {"turns in a role LightMem's messages_use 'user_only' does not read": 5}


def test_evermemos_keeps_every_turn_as_a_message(record_file: Path, tmp_path: Path) -> None:
    for name, sessions in (("locomo", b_first()), ("chat", chat())):
        stats, _ = run_worker(evermemos(UPSTREAM / "evermemos", tmp_path, use_reranker=False), sessions,
                              tmp_path / name)
        # the stub's extraction: a MemCell of every two messages, read back from the file it saved
        kept_everything(stats, sessions, "memcells", math.ceil(given(sessions) / 2))
        assert stats["messages"] == given(sessions)


def test_worker_input_accounts_are_checked_and_old_workers_still_read(tmp_path: Path) -> None:
    sessions = chat()
    good = {"given": 8, "kept": 7, "unit": "lines", "stored": 7, "lost": {"why": 1}, "upstream": False}
    for reported, error in ((good, None), ({**good, "given": 9, "lost": {"why": 2}}, "9 turns given, 8"),
                            ({**good, "kept": 8}, "malformed")):
        system = WorkerSystem("echo", sys.executable, ECHO, {"input": reported})
        try:
            system.reset("i", tmp_path / "w")
            if error is None:
                assert system.ingest(sessions)["input"] == good
            else:
                with pytest.raises(WorkerError, match=error):
                    system.ingest(sessions)
        finally:
            system.close()
    old = WorkerSystem("echo", sys.executable, ECHO, {})
    try:
        old.reset("i", tmp_path / "old")
        assert "input" not in old.ingest(sessions)  # reported as unreported, not guessed
    finally:
        old.close()


# ---------------------------------------------------------------- the references and MemForest


@pytest.mark.parametrize("sessions", [b_first(), chat()], ids=["locomo", "longmemeval"])
def test_references_and_memforest_keep_every_turn(sessions: list[Session], tmp_path: Path) -> None:
    from baselines.flat_rag import FlatRAGSystem
    from baselines.flat_sessions import FlatSessionsSystem
    from baselines.full_context import FullContextSystem
    from baselines.memforest_method import MemForestSystem
    from memforest.config import MemForestConfig
    from memforest.llm.calllog import CallLog

    n = given(sessions)
    kept_everything(build(FullContextSystem(8192, 256), sessions, tmp_path / "full"), sessions, "turns", n)
    kept_everything(build(FlatRAGSystem(HashEmbedder()), sessions, tmp_path / "rag"), sessions, "turns", n)
    kept_everything(build(FlatSessionsSystem(HashEmbedder()), sessions, tmp_path / "docs"), sessions,
                    "documents", len(sessions))  # a reference: the assistant-only session too
    forest = MemForestSystem(MemForestConfig(), ScriptedChatModel(), HashEmbedder(), CallLog(),
                             generate=False)
    stats = build(forest, sessions, tmp_path / "forest")
    kept = account(stats)
    assert (kept.given, kept.kept, kept.lost, kept.unit) == (n, n, {}, "cells")
    assert kept.stored == stats["cells"] and kept.stored and kept.stored > 0


def test_references_count_empty_turns_as_lost(tmp_path: Path) -> None:
    from baselines.flat_rag import FlatRAGSystem
    from baselines.flat_sessions import FlatSessionsSystem

    sessions = [*chat(), Session("s4", datetime(2023, 5, 1), (Turn("user", " ", None, "s4:0"),))]
    for system in (FlatRAGSystem(HashEmbedder()), FlatSessionsSystem(HashEmbedder())):
        kept = account(build(system, sessions, tmp_path / system.name))
        assert kept.lost == {"empty turns": 1} and kept.kept == 8
    indexed = account(build(FlatSessionsSystem(HashEmbedder(), answer_documents="indexed"), chat(),
                            tmp_path / "indexed"))
    assert indexed.kept == 5 and sum(indexed.lost.values()) == 3  # the assistant turns of user sessions
