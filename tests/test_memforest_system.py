"""MemForest behind the MemorySystem protocol: what the harness hands it and what it hands back."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from baselines.base import Session, Turn
from baselines.memforest_method import MemForestSystem
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
