"""The raw-session anchor: MemPalace's documents (ranked by a session's user turns, or LoCoMo's every
turn as `Name said, "text"`; read whole, both speakers), top-k sessions by similarity."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from baselines.base import MemorySystem, Session, Turn
from baselines.flat_sessions import FlatSessionsSystem
from memforest.llm.testing import HashEmbedder


def sessions() -> list[Session]:
    def make(sid: str, day: int, user: str, reply: str) -> Session:
        when = datetime(2024, 5, day, 10)
        return Session(sid, when,
                       (Turn("user", user, when, f"{sid}:0"), Turn("assistant", reply, when, f"{sid}:1")))

    return [make("s1", 1, "My grey cat is called Miso.", "A lovely name for a cat."),
            make("s2", 2, "I moved to Denver in May.", "Denver is a great city, your cat Miso will like it."),
            make("s3", 3, "I started cello lessons.", "Practise a little every day.")]


def test_ranks_user_documents_and_answers_from_whole_sessions(tmp_path: Path) -> None:
    system = FlatSessionsSystem(HashEmbedder(), top_k=2)
    assert isinstance(system, MemorySystem)
    system.reset("i", tmp_path)
    stats = system.ingest(sessions())
    assert stats["documents"] == 3 and (tmp_path / "vectors.npy").exists()
    stored = json.loads((tmp_path / "documents.json").read_text())
    assert [d["indexed"] for d in stored] == [s.turns[0].content for s in sessions()]  # user turns only
    result = system.retrieve("What is my cat called?", None)
    assert result.evidence[0].session_ids == ["s1"]
    assert len(result.evidence) == 2 and result.evidence[0].turn_ids == ["s1:0", "s1:1"]
    # The answer model reads both roles (LongMemEval's assistant-side answers), each turn once.
    assert result.evidence[0].text == "user: My grey cat is called Miso.\nassistant: A lovely name for a cat."
    assert result.trace["answer_documents"] == "session"
    scores = [e.score for e in result.evidence]
    assert all(isinstance(s, float) for s in scores) and scores == sorted(scores, reverse=True)  # type: ignore[type-var]


def test_indexed_answer_documents_hand_over_the_user_turns(tmp_path: Path) -> None:
    system = FlatSessionsSystem(HashEmbedder(), top_k=3, answer_documents="indexed")
    system.reset("i", tmp_path)
    system.ingest(sessions())
    result = system.retrieve("What is my cat called?", None)
    assert "A lovely name" not in result.context and result.evidence[0].turn_ids == ["s1:0"]
    with pytest.raises(ValueError, match="answer_documents"):
        FlatSessionsSystem(HashEmbedder(), answer_documents="user")


def test_sessions_without_user_turns_keep_every_turn_with_speakers(tmp_path: Path) -> None:
    when = datetime(2024, 5, 1)
    chat = Session("D1", when, (Turn("assistant", "Hi Ana!", when, "D1:1", speaker="Ben"),
                                Turn("assistant", "Hi Ben, I adopted a whippet.", when, "D1:2",
                                     speaker="Ana")))
    system = FlatSessionsSystem(HashEmbedder(), top_k=5)
    system.reset("i", tmp_path)
    system.ingest([chat])
    (item,) = system.retrieve("Which dog did Ana adopt?", None).evidence
    assert item.turn_ids == ["D1:1", "D1:2"] and item.text.startswith("Ben: Hi Ana!")
    (stored,) = json.loads((tmp_path / "documents.json").read_text())
    assert stored["indexed"] == 'Ben said, "Hi Ana!"\nAna said, "Hi Ben, I adopted a whippet."'  # MemPalace's
