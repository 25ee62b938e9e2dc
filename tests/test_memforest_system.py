"""MemForest behind the MemorySystem protocol: what the harness hands it and what it hands back."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from baselines.base import Session, Turn
from baselines.memforest_method import MemForestSystem
from baselines.memforest_method.system import StoredSessions
from benchmarks.datasets import Instance
from benchmarks.harness.tasks.common import payload
from memforest.config import MemForestConfig
from memforest.llm.calllog import CallLog
from memforest.llm.testing import HashEmbedder, ScriptedChatModel


def test_turns_without_text_are_left_out_and_ids_still_map_back(tmp_path: Path) -> None:
    sessions = [
        Session("a/1", datetime(2023, 3, 1, 9), (
            Turn("user", "   ", None, "a/1:0"),
            Turn("user", "I adopted a grey cat called Miso.", None, "a/1:1"),
            Turn("assistant", "Miso is a lovely name.", None, "a/1:2"),
        )),
        Session("blank", datetime(2023, 3, 2, 9), (Turn("user", "", None, "blank:0"),)),
    ]
    system = MemForestSystem(MemForestConfig(), ScriptedChatModel(), HashEmbedder(), CallLog())
    system.reset("i", tmp_path)
    stats = system.ingest(sessions)
    assert stats["empty_turns_skipped"] == 2 and stats["sessions"] == 1
    result = system.retrieve("What is my cat called?", datetime(2023, 4, 1))
    turn_ids = {t for e in result.evidence for t in e.turn_ids}
    assert turn_ids and turn_ids <= {"a/1:1", "a/1:2"}
    assert {s for e in result.evidence for s in e.session_ids} == {"a/1"}
    system.close()


def test_derived_and_unsafe_session_ids_map_back_without_colliding(tmp_path: Path) -> None:
    def session(sid: str, day: int, text: str) -> Session:
        when = datetime(2023, 3, day, 9)
        blank = Turn("assistant", "\u200b", when, f"{sid}:1")
        return Session(sid, when, (Turn("user", text, when, f"{sid}:0"), blank))

    sessions = [session("trip#2", 1, "I flew to Lisbon in March."),
                session("trip_2", 2, "My sister plays the cello."),
                session("trip", 3, "I flew to Oslo in January."),
                session("..x", 4, "The cat sleeps on the piano.")]
    for order in (sessions, sessions[::-1]):
        system = MemForestSystem(MemForestConfig(), ScriptedChatModel(), HashEmbedder(), CallLog(),
                                 generate=False)
        system.reset("i", tmp_path / str(len(list(tmp_path.iterdir()))))
        stats = system.ingest(order)
        assert stats["empty_turns_skipped"] == 4  # the zero-width turns
        assert system.ids.stored_ids == {"trip#2": "trip_2+2", "trip_2": "trip_2", "trip": "trip",
                                         "..x": "s._x"}
        evidence = system.retrieve("Where did I fly in March?", None).evidence
        for item in evidence:  # each turn maps back into the item's own session
            assert {t.rsplit(":", 1)[0] for t in item.turn_ids} <= set(item.session_ids)
        turns = {t for item in evidence for t in item.turn_ids}
        assert turns <= {f"{s.session_id}:0" for s in sessions} and "trip#2:0" in turns
        system.close()


def test_the_tasks_write_sessions_as_the_adapter_does() -> None:
    when = datetime(2023, 5, 8, 13, 56)
    chat = Session("session_1", when, (Turn("user", "Hi Ben, I adopted a whippet.", when, "D1:1", "Ana"),
                                       Turn("user", "\u200b", when, "D1:2", "Ben"),
                                       Turn("user", "Lovely!", when, "D1:3", "Ben")))
    [written] = payload(Instance("conv-1", "conv-1", (chat,), ()), "i0-")
    assert written["session_id"] == "i0-session_1"
    assert [t["content"] for t in written["turns"]] == ["Ana: Hi Ben, I adopted a whippet.", "Ben: Lovely!"]
    [adapter] = StoredSessions().payload([chat])
    assert adapter["turns"] == written["turns"]
