"""The raw-session anchor: one document of user turns per session, top-k sessions by similarity."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

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


def test_one_document_of_user_turns_per_session(tmp_path: Path) -> None:
    system = FlatSessionsSystem(HashEmbedder(), top_k=2)
    assert isinstance(system, MemorySystem)
    system.reset("i", tmp_path)
    stats = system.ingest(sessions())
    assert stats["documents"] == 3 and (tmp_path / "vectors.npy").exists()
    result = system.retrieve("What is my cat called?", None)
    assert result.evidence[0].session_ids == ["s1"]
    assert len(result.evidence) == 2 and result.evidence[0].turn_ids == ["s1:0"]
    assert "A lovely name" not in result.context  # assistant turns are not in the document
    scores = [e.score for e in result.evidence]
    assert all(isinstance(s, float) for s in scores) and scores == sorted(scores, reverse=True)  # type: ignore[type-var]


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
