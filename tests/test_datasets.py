"""Dataset loaders on synthetic fixtures in the exact LongMemEval and LoCoMo formats."""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

from benchmarks.datasets import DatasetUnavailableError, load_dataset, resolve_file, sha256_file
from benchmarks.datasets.locomo import extract_dia_ids
from benchmarks.datasets.locomo import format_date as locomo_format
from benchmarks.datasets.locomo import parse_date as locomo_date
from benchmarks.datasets.longmemeval import format_date, parse_date
from benchmarks.datasets.records import sanitize_text
from benchmarks.datasets.sample import SAMPLE_PATH, build_sample
from benchmarks.datasets.synthetic import (
    LONGMEMEVAL_TYPE_COUNTS,
    locomo_shaped,
    longmemeval_shaped,
    write_json,
)
from benchmarks.harness.answering import build_answer_messages

FIXTURES = Path(__file__).parent / "fixtures"
LME = FIXTURES / "longmemeval_tiny.json"
LOCOMO = FIXTURES / "locomo_tiny.json"


def test_longmemeval_dates_round_trip() -> None:
    moment = parse_date("2023/05/30 (Tue) 23:40")
    assert moment == datetime(2023, 5, 30, 23, 40)
    assert format_date(moment) == "2023/05/30 (Tue) 23:40"
    assert parse_date("2023/05/30") == datetime(2023, 5, 30)
    with pytest.raises(ValueError):
        parse_date("30 May 2023")


def test_locomo_dates_round_trip() -> None:
    for text in ("1:56 pm on 8 May, 2023", "12:05 am on 31 December, 2022", "12:30 pm on 1 July, 2023"):
        assert locomo_format(locomo_date(text)) == text


def test_longmemeval_fixture() -> None:
    data = load_dataset("longmemeval_s", path=LME)
    assert data.kind == "longmemeval"
    assert data.sha256 == sha256_file(LME)
    assert data.num_questions == 3 and len(data.instances) == 3
    first = data.instances[0]
    # Sorted by date; the session dated after the question is kept, last.
    assert [s.session_id for s in first.sessions] == ["answer_t1_a", "answer_t1_b", "s_late"]
    question = first.questions[0]
    assert question.question_date == datetime(2023, 5, 30, 23, 40)
    assert first.sessions[-1].timestamp > question.question_date
    assert question.evidence_sessions == ("answer_t1_a", "answer_t1_b")
    assert question.evidence_turns == ("answer_t1_a:0", "answer_t1_b:2")
    late = first.sessions[-1].turns[1]
    assert late.content == "Use SPF 30 or higher.<endoftext>" and "<|" not in late.content
    assert late.timestamp == first.sessions[-1].timestamp and late.turn_id == "s_late:1"
    second = data.instances[1].questions[0]
    assert second.answer == "2" and second.extra["answer_was_int"]
    # Equal dates keep their source order.
    assert [s.session_id for s in data.instances[1].sessions] == ["answer_t2_a", "answer_t2_b"]
    third = data.instances[2].questions[0]
    assert third.abstention and not second.abstention
    assert third.category == "single-session-user"


def test_limit_and_instance_ids() -> None:
    assert [i.instance_id for i in load_dataset("longmemeval_oracle", path=LME, limit=2).instances] == [
        "tiny_q1",
        "tiny_q2",
    ]
    picked = load_dataset("longmemeval_m", path=LME, instance_ids=["tiny_q3_abs"])
    assert [i.instance_id for i in picked.instances] == ["tiny_q3_abs"]
    with pytest.raises(ValueError, match="unknown instance"):
        load_dataset("longmemeval_s", path=LME, instance_ids=["nope"])
    with pytest.raises(ValueError, match="unknown dataset"):
        load_dataset("squad", path=LME)


def test_locomo_fixture() -> None:
    data = load_dataset("locomo", path=LOCOMO)
    assert data.kind == "locomo" and len(data.instances) == 2
    conv = data.instances[0]
    assert [s.session_id for s in conv.sessions] == ["session_1", "session_2", "session_10"]
    assert conv.sessions[0].timestamp == datetime(2023, 5, 8, 13, 56)
    assert conv.sessions[2].timestamp == datetime(2024, 1, 1, 0, 15)
    image = conv.sessions[0].turns[1]
    assert image.turn_id == "D1:2" and image.role == "user" and image.speaker == "Tomas"
    assert image.content == "Look at this! [shares a photo of a red kite on a beach]"
    first = conv.sessions[0].turns[0]
    assert first.speaker == "Nadia" and first.content == "I finally repaired my old sailboat."
    questions = {q.question_id: q for q in conv.questions}
    assert set(questions) == {"conv-a:q0", "conv-a:q1", "conv-a:q2"}
    assert questions["conv-a:q0"].evidence_turns == ("D1:3", "D2:1")
    assert questions["conv-a:q0"].evidence_sessions == ("session_1", "session_2")
    assert questions["conv-a:q2"].evidence_turns == ("D1:3", "D2:1", "D1:2")
    assert questions["conv-a:q1"].answer == "2021" and questions["conv-a:q1"].category == "temporal"
    assert questions["conv-a:q0"].question_date is None
    assert data.category_counts() == {"single-hop": 1, "temporal": 1, "multi-hop": 1, "open-domain": 1}


def test_locomo_adversarial_flag() -> None:
    data = load_dataset("locomo", path=LOCOMO, include_adversarial=True)
    adversarial = [q for _, q in data.questions() if q.category == "adversarial"]
    assert len(adversarial) == 1
    only = adversarial[0]
    assert only.question_id == "conv-a:q3" and only.abstention and only.answer == ""
    assert only.extra["adversarial_answer"] == "a sailboat"
    assert load_dataset("locomo", path=LOCOMO, instance_ids=["conv-b"]).num_questions == 1


def test_locomo_helpers() -> None:
    assert extract_dia_ids(["D1:3; D2:1", "D1:3D2:1", "D:5", None]) == ("D1:3", "D2:1")
    assert extract_dia_ids("D12:7") == ("D12:7",)
    assert locomo_date("12:05 pm on 1 Jan, 2023") == datetime(2023, 1, 1, 12, 5)
    with pytest.raises(ValueError):
        locomo_date("8 May 2023")


def test_sanitize_text() -> None:
    assert sanitize_text("a<|endoftext|>b <|im_start|>") == "a<endoftext>b <im_start>"
    assert sanitize_text("x < y | z > w") == "x < y | z > w"


def test_real_shaped_longmemeval(tmp_path: Path) -> None:
    path = write_json(longmemeval_shaped(), tmp_path / "longmemeval_s_cleaned.json")
    data = load_dataset("longmemeval_s", path=path)
    assert data.num_questions == 500
    assert data.category_counts() == LONGMEMEVAL_TYPE_COUNTS
    questions = [q for _, q in data.questions()]
    assert sum(q.abstention for q in questions) == 30
    assert sum(q.extra["answer_was_int"] for q in questions) == 32
    assert all(isinstance(q.answer, str) for q in questions)


def test_real_shaped_locomo(tmp_path: Path) -> None:
    path = write_json(locomo_shaped(), tmp_path / "locomo10.json")
    main = load_dataset("locomo", path=path)
    assert len(main.instances) == 10 and main.num_questions == 1540
    assert main.category_counts() == {"multi-hop": 282, "temporal": 321, "open-domain": 96, "single-hop": 841}
    full = load_dataset("locomo", path=path, include_adversarial=True)
    assert full.num_questions == 1986 and full.category_counts()["adversarial"] == 446
    assert all(len(i.sessions) == 3 for i in full.instances)


def test_locomo_sessions_carry_the_speaker_order(tmp_path: Path) -> None:
    """speaker_a is not always the first to speak (6 of the 10 real conversations): the order is the
    file's `speaker_a`/`speaker_b`, on every session, also one that lost an unreadable turn."""
    samples = locomo_shaped(sessions=2, turns=3)[:2]
    conversation = samples[0]["conversation"]
    conversation.update(speaker_a=conversation["speaker_b"], speaker_b=conversation["speaker_a"])
    conversation["session_2"][1]["text"] = "\u200b"  # unreadable: dropped, the session kept
    del samples[1]["conversation"]["speaker_b"]
    data = load_dataset("locomo", path=write_json(samples, tmp_path / "locomo.json"))
    swapped, unnamed = data.instances
    assert swapped.sessions[0].turns[0].speaker == "Ari0"  # speaker_b opens
    assert [s.speakers for s in swapped.sessions] == [("Bea0", "Ari0")] * 2
    assert len(swapped.sessions[1].turns) == 2 and swapped.counts.unreadable_turns_dropped == 1
    assert all(s.speakers == () for s in unnamed.sessions)  # not both named: adapters fall back
    chats = load_dataset("longmemeval_s", path=LME).instances
    assert all(s.speakers == () for i in chats for s in i.sessions)


def test_sample_file_is_current_and_well_formed() -> None:
    assert json.loads(SAMPLE_PATH.read_text(encoding="utf-8")) == build_sample()
    data = load_dataset("sample")
    assert 4 <= len(data.instances) <= 6
    assert sum(q.abstention for _, q in data.questions()) == 1
    assert {"knowledge-update", "temporal-reasoning", "multi-session", "single-session-user"} <= set(
        data.category_counts()
    )
    for instance in data.instances:
        assert 4 <= len(instance.sessions) <= 8
        assert all(4 <= len(s.turns) <= 10 for s in instance.sessions)
        question = instance.questions[0]
        flagged = {t.rsplit(":", 1)[0] for q in instance.questions for t in q.evidence_turns}
        assert flagged == set(question.evidence_sessions) and question.evidence_turns
        assert len(question.evidence_sessions) < len(instance.sessions)  # filler exists
    ids = Counter(i.instance_id for i in data.instances)
    assert max(ids.values()) == 1


def test_resolve_prefers_path_then_cache(tmp_path: Path) -> None:
    assert resolve_file("locomo", path=LOCOMO) == LOCOMO
    with pytest.raises(DatasetUnavailableError):
        resolve_file("locomo", path=tmp_path / "missing.json")
    cached = tmp_path / "locomo10.json"
    cached.write_text("[]")
    assert resolve_file("locomo", cache_dir=tmp_path) == cached


def test_answer_messages() -> None:
    messages, prompt_id, version = build_answer_messages(
        "longmemeval", "Where do I live?", datetime(2023, 5, 30, 23, 40), "[2023-05-01] lives in Miami"
    )
    assert prompt_id == "answer.longmemeval" and version == 1
    assert [m["role"] for m in messages] == ["system", "user"]
    assert "Tuesday, 30 May 2023, 23:40" in messages[1]["content"]
    assert "lives in Miami" in messages[1]["content"] and "Where do I live?" in messages[1]["content"]
    messages, prompt_id, _ = build_answer_messages("locomo", "When?", None, "")
    assert prompt_id == "answer.locomo" and "Today's date" not in messages[1]["content"]
    with pytest.raises(ValueError):
        build_answer_messages("squad", "q", None, "c")


def test_longmemeval_keeps_an_exact_repeat_once_and_another_under_a_derived_id(tmp_path: Path) -> None:
    entries = json.loads((FIXTURES / "longmemeval_tiny.json").read_text())
    entry = entries[0]
    for key in ("haystack_session_ids", "haystack_dates", "haystack_sessions"):
        entry[key].append(entry[key][0])
    path = tmp_path / "repeat.json"
    path.write_text(json.dumps(entries))
    data = load_dataset("longmemeval_s", path=path)
    assert data.duplicate_sessions_dropped == 1 and data.counts.sessions_renamed == 0
    assert len(data.instances[0].sessions) == len(entry["haystack_session_ids"]) - 1
    entry["haystack_sessions"][-1] = [{"role": "user", "content": "something else"}]
    path.write_text(json.dumps(entries))
    data = load_dataset("longmemeval_s", path=path)
    first, repeated = entry["haystack_session_ids"][0], entry["haystack_session_ids"][0] + "#2"
    assert data.counts.sessions_renamed == 1 and data.duplicate_sessions_dropped == 0 and not data.failures
    assert dict(data.instances[0].session_aliases) == {repeated: first}
    kept = [s for s in data.instances[0].sessions if s.session_id == repeated]
    assert [s.turns[0].turn_id for s in kept] == [f"{repeated}:0"]
