"""What real benchmark files hold and synthetic ones do not, one kind at a time: repeated sessions,
turns with nothing readable, typed fields, malformed entries, compressed files. Each loads; nothing
but a file that is not a JSON list stops a load."""

from __future__ import annotations

import copy
import gzip
import json
import lzma
import sys
from pathlib import Path
from typing import Any

import pytest

from baselines.base import EvidenceItem, Retrieval
from benchmarks.datasets import DatasetError, load_dataset, resolve_file, sha256_file
from benchmarks.harness.app import main
from benchmarks.harness.metrics import retrieval_recall
from benchmarks.harness.runner import retrieval_fields

FIXTURES = Path(__file__).parent / "fixtures"
INVISIBLE = ["\u200b", "\ufeff", "\u00ad", "\u200c\u200d", "\u2060", " \t\n", "", "\x07"]


def entries() -> list[dict[str, Any]]:
    return json.loads((FIXTURES / "longmemeval_tiny.json").read_text())


def locomo_samples() -> list[dict[str, Any]]:
    return json.loads((FIXTURES / "locomo_tiny.json").read_text())


def write(tmp_path: Path, data: Any, name: str = "data.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def repeat_session(entry: dict[str, Any], index: int, date: str | None = None,
                   turns: list[dict[str, Any]] | None = None) -> None:
    """Append the haystack's session `index` again, with another date or other turns if given."""
    entry["haystack_session_ids"].append(entry["haystack_session_ids"][index])
    entry["haystack_dates"].append(date or entry["haystack_dates"][index])
    entry["haystack_sessions"].append(copy.deepcopy(turns or entry["haystack_sessions"][index]))


# ---------------------------------------------------------------- repeated sessions


def test_a_repeat_with_another_date_is_kept_under_a_derived_id_and_scores_as_its_source(
        tmp_path: Path) -> None:
    data = entries()
    first = data[0]  # answer_t1_a (index 1) holds evidence turn 0
    repeat_session(first, 1, date="2023/05/02 (Tue) 08:00")
    repeat_session(first, 1, date="2023/05/09 (Tue) 08:00")
    repeat_session(first, 1, date="2023/05/02 (Tue) 08:00")  # the same as the second occurrence
    loaded = load_dataset("longmemeval_s", path=write(tmp_path, data))
    instance = loaded.instances[0]
    assert not loaded.failures
    assert loaded.counts.sessions_renamed == 2 and loaded.counts.duplicate_sessions_dropped == 1
    assert dict(instance.session_aliases) == {"answer_t1_a#2": "answer_t1_a", "answer_t1_a#3": "answer_t1_a"}
    ids = [s.session_id for s in instance.sessions]
    assert ids == ["answer_t1_a", "answer_t1_b", "answer_t1_a#2", "answer_t1_a#3", "s_late"]  # by date
    question = instance.questions[0]
    assert question.evidence_sessions == ("answer_t1_a", "answer_t1_b")
    assert question.evidence_turns == ("answer_t1_a:0", "answer_t1_b:2", "answer_t1_a#2:0", "answer_t1_a#3:0")
    # Scoring: a derived session or turn counts as its source one, on both sides.
    retrieval = Retrieval("", [EvidenceItem("x", session_ids=["answer_t1_a#3", "answer_t1_b"],
                                            turn_ids=["answer_t1_a#3:0", "answer_t1_b:2"], score=1.0)])
    fields = retrieval_fields(retrieval, instance)
    assert fields["retrieved_session_ids"] == ["answer_t1_a", "answer_t1_b"]
    assert fields["retrieved_session_ids_raw"] == ["answer_t1_a#3", "answer_t1_b"]
    assert fields["retrieved_turn_ids"] == ["answer_t1_a:0", "answer_t1_b:2"]
    gold_turns = list(dict.fromkeys(instance.source_turn(t) for t in question.evidence_turns))
    assert gold_turns == ["answer_t1_a:0", "answer_t1_b:2"]
    recall = retrieval_recall(fields["retrieved_turn_ids"], gold_turns, ks=(2,))
    assert recall is not None and recall["recall_all@2"] == 1.0


def test_a_repeat_with_other_turns_keeps_its_own_evidence_flags(tmp_path: Path) -> None:
    data = entries()
    other: list[dict[str, Any]] = [{"role": "user", "content": "Filler."},
                                   {"role": "user", "content": "Herons again.", "has_answer": True}]
    repeat_session(data[0], 1, turns=other)
    instance = load_dataset("longmemeval_s", path=write(tmp_path, data)).instances[0]
    assert instance.counts.sessions_renamed == 1
    assert "answer_t1_a#2:1" in instance.questions[0].evidence_turns
    assert "answer_t1_a#2:0" not in instance.questions[0].evidence_turns


def test_a_derived_id_never_takes_an_id_the_file_holds(tmp_path: Path) -> None:
    data = entries()
    first = data[0]
    first["haystack_session_ids"][0] = "answer_t1_a#2"  # a real session already has the first derived id
    repeat_session(first, 1, date="2023/05/02 (Tue) 08:00")
    instance = load_dataset("longmemeval_s", path=write(tmp_path, data)).instances[0]
    assert dict(instance.session_aliases) == {"answer_t1_a#3": "answer_t1_a"}
    assert len({s.session_id for s in instance.sessions}) == len(instance.sessions) == 4


def test_an_identical_repeat_is_kept_once(tmp_path: Path) -> None:
    data = entries()
    repeat_session(data[0], 0)
    repeat_session(data[1], 1)
    loaded = load_dataset("longmemeval_s", path=write(tmp_path, data))
    assert loaded.duplicate_sessions_dropped == 2 and loaded.counts.sessions_renamed == 0
    assert [len(i.sessions) for i in loaded.instances] == [3, 2, 1]


# ---------------------------------------------------------------- turns with nothing readable


@pytest.mark.parametrize("content", INVISIBLE)
def test_a_turn_with_nothing_readable_is_dropped_and_positions_are_kept(tmp_path: Path, content: str) -> None:
    data = entries()
    data[0]["haystack_sessions"][2].insert(0, {"role": "assistant", "content": content})  # in answer_t1_b
    data[0]["haystack_sessions"][2].append({"role": "user", "content": f"{content}ok{content}"})
    loaded = load_dataset("longmemeval_s", path=write(tmp_path, data))
    assert loaded.counts.unreadable_turns_dropped == 1 and loaded.counts.instances_with_unreadable_turns == 1
    session = next(s for s in loaded.instances[0].sessions if s.session_id == "answer_t1_b")
    assert [t.turn_id for t in session.turns] == [f"answer_t1_b:{i}" for i in range(1, 6)]
    assert loaded.instances[0].questions[0].evidence_turns == ("answer_t1_a:0", "answer_t1_b:3")


def test_a_session_of_unreadable_turns_is_dropped_with_a_count(tmp_path: Path) -> None:
    data = entries()
    data[1]["haystack_sessions"][0] = [{"role": "user", "content": c} for c in INVISIBLE]
    data[1]["haystack_sessions"][0][1]["has_answer"] = True
    loaded = load_dataset("longmemeval_s", path=write(tmp_path, data))
    assert not loaded.failures
    assert loaded.counts.empty_sessions_dropped == 1
    assert loaded.counts.unreadable_turns_dropped == len(INVISIBLE)
    instance = loaded.instances[1]
    assert [s.session_id for s in instance.sessions] == ["answer_t2_b"]
    assert instance.questions[0].evidence_turns == ("answer_t2_b:0",)


def test_locomo_drops_unreadable_turns_too(tmp_path: Path) -> None:
    samples = locomo_samples()
    conversation = samples[0]["conversation"]
    conversation["session_1"].append({"speaker": "Nadia", "dia_id": "D1:99", "text": "\u200b"})
    conversation["session_2"] = [{"speaker": "Nadia", "dia_id": f"D2:{i}", "text": "\ufeff "} for i in (1, 2)]
    loaded = load_dataset("locomo", path=write(tmp_path, samples))
    assert not loaded.failures
    assert loaded.counts.unreadable_turns_dropped == 3 and loaded.counts.empty_sessions_dropped == 1
    conv = loaded.instances[0]
    assert [s.session_id for s in conv.sessions] == ["session_1", "session_10"]
    assert all(t.turn_id != "D1:99" for s in conv.sessions for t in s.turns)


# ---------------------------------------------------------------- typed fields and malformed entries


def test_answers_of_any_json_type_load_as_text(tmp_path: Path) -> None:
    data = entries()
    data[0]["answer"], data[1]["answer"], data[2]["answer"] = 3, 2.5, None
    data[1]["question_id"] = 42
    loaded = load_dataset("longmemeval_s", path=write(tmp_path, data))
    assert not loaded.failures
    questions = [q for _, q in loaded.questions()]
    assert [(q.answer, q.answer_type) for q in questions] == [("3", "int"), ("2.5", "float"), ("", "null")]
    assert questions[0].extra["answer_was_int"] and questions[1].question_id == "42"
    samples = locomo_samples()
    samples[0]["qa"][1]["answer"] = 2021
    question = load_dataset("locomo", path=write(tmp_path, samples)).instances[0].questions[1]
    assert question.answer == "2021" and question.answer_type == "int"


MALFORMED = {
    "a missing field": lambda e: e.pop("question"),
    "a bad date": lambda e: e["haystack_dates"].__setitem__(0, "30 May 2023"),
    "an impossible date": lambda e: e.__setitem__("question_date", "2023/02/30 (Thu) 10:00"),
    "a date of the wrong type": lambda e: e.__setitem__("question_date", 20230530),
    "sessions of the wrong type": lambda e: e.__setitem__("haystack_sessions", "none"),
    "a turn of the wrong type": lambda e: e["haystack_sessions"][0].__setitem__(0, "hello"),
    "a turn without a role": lambda e: e["haystack_sessions"][0][0].pop("role"),
    "content of the wrong type": lambda e: e["haystack_sessions"][0][0].__setitem__("content", {"a": 1}),
    "lists of different lengths": lambda e: e["haystack_dates"].pop(),
}


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_a_malformed_entry_is_one_failure_and_the_others_load(tmp_path: Path, kind: str) -> None:
    data = entries()
    MALFORMED[kind](data[1])
    loaded = load_dataset("longmemeval_s", path=write(tmp_path, data))
    assert [i.instance_id for i in loaded.instances] == ["tiny_q1", "tiny_q3_abs"]
    assert len(loaded.failures) == 1
    failure = loaded.failures[0]
    assert failure.instance_id == "tiny_q2" and failure.stage == "load"
    assert failure.reason and "\n" not in failure.reason and len(failure.reason) <= 300


def test_entries_without_an_id_or_with_a_repeated_one_are_failures(tmp_path: Path) -> None:
    data: list[Any] = entries()
    data.insert(1, "not an entry")
    data.append(copy.deepcopy(data[0]))
    data.append({"question": "no id"})
    loaded = load_dataset("longmemeval_s", path=write(tmp_path, data))
    assert [i.instance_id for i in loaded.instances] == ["tiny_q1", "tiny_q2", "tiny_q3_abs"]
    assert [(f.instance_id, f.stage) for f in loaded.failures] == [("entry 1", "load"), ("tiny_q1", "load"),
                                                                    ("entry 5", "load")]
    assert "same id" in loaded.failures[1].reason


def test_locomo_malformed_entries_and_questions_are_failures(tmp_path: Path) -> None:
    samples = locomo_samples()
    samples[0]["qa"][0].pop("question")
    samples[0]["qa"][1]["category"] = "soon"
    samples[1]["conversation"]["session_1_date_time"] = "yesterday"
    loaded = load_dataset("locomo", path=write(tmp_path, samples))
    assert [i.instance_id for i in loaded.instances] == ["conv-a"]
    assert [q.question_id for q in loaded.instances[0].questions] == ["conv-a:q2"]  # q0 and q1 left out
    assert [(f.instance_id, f.reason.split(":")[0]) for f in loaded.failures] == [
        ("conv-b", "ValueError"), ("conv-a", "question 0"), ("conv-a", "question 1")]


def test_a_file_that_is_not_a_json_list_stops_the_load(tmp_path: Path) -> None:
    not_json = tmp_path / "broken.json"
    not_json.write_text('[{"question_id": ')
    with pytest.raises(DatasetError, match="not a readable JSON file"):
        load_dataset("longmemeval_s", path=not_json)
    with pytest.raises(DatasetError, match="expected a JSON list of questions"):
        load_dataset("longmemeval_s", path=write(tmp_path, {"question_id": "x"}))
    bad_xz = tmp_path / "bad.json.xz"
    bad_xz.write_bytes(lzma.compress(b"[1, 2")[:-8])
    with pytest.raises(DatasetError):
        load_dataset("longmemeval_oracle", path=bad_xz)


# ---------------------------------------------------------------- compressed files


@pytest.mark.parametrize("suffix,pack", [(".xz", lzma.compress), (".gz", gzip.compress)])
def test_compressed_files_load_as_they_are(tmp_path: Path, suffix: str, pack: Any) -> None:
    plain = FIXTURES / "longmemeval_tiny.json"
    packed = tmp_path / f"longmemeval_oracle.json{suffix}"
    packed.write_bytes(pack(plain.read_bytes()))
    loaded = load_dataset("longmemeval_oracle", path=packed)
    assert loaded.instances == load_dataset("longmemeval_oracle", path=plain).instances
    assert loaded.sha256 == sha256_file(packed) != sha256_file(plain)
    assert resolve_file("longmemeval_oracle", cache_dir=tmp_path) == packed  # a packed cached copy is found
    locomo = tmp_path / f"locomo10.json{suffix}"
    locomo.write_bytes(pack((FIXTURES / "locomo_tiny.json").read_bytes()))
    assert len(load_dataset("locomo", path=locomo).instances) == 2


# ---------------------------------------------------------------- the command line


def run_main(monkeypatch: pytest.MonkeyPatch, *argv: str) -> int:
    monkeypatch.setattr(sys, "argv", ["memforest-bench", *argv])
    with pytest.raises(SystemExit) as stop:
        main()
    return int(stop.value.code or 0)


def test_the_data_command_reports_a_file_and_what_would_fail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    data = entries()
    repeat_session(data[0], 1, date="2023/05/02 (Tue) 08:00")
    data[0]["haystack_sessions"][0].append({"role": "assistant", "content": "\u200b"})
    good = write(tmp_path, data, "good.json")
    assert run_main(monkeypatch, "data", "dataset=longmemeval_s", f"dataset.path={good}") == 0
    out = capsys.readouterr().out
    for line in ("instances: 3", "sessions: 7", "unreadable turns dropped: 1 (in 1 instances)",
                 "repeated sessions kept under derived ids (same id, other date or turns): 1",
                 "answer types: str 2, int 1", "longest session: 4 turns (tiny_q1, session answer_t1_b)",
                 "entries that would fail: 0"):
        assert line in out
    data[1].pop("haystack_dates")
    bad = write(tmp_path, data, "bad.json")
    assert run_main(monkeypatch, "data", "dataset=longmemeval_s", f"dataset.path={bad}") == 1
    assert "- tiny_q2: load: missing field 'haystack_dates'" in capsys.readouterr().out
    missing = tmp_path / "none.json"
    assert run_main(monkeypatch, "data", "dataset=longmemeval_s", f"dataset.path={missing}") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not found" in err


def test_a_run_over_an_unreadable_file_stops_with_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    code = run_main(monkeypatch, "dataset=longmemeval_s", f"dataset.path={broken}", "progress=false")
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert [line for line in err.splitlines() if line.startswith("memforest-bench:")] == [
        f"memforest-bench: {broken}: not a readable JSON file (JSONDecodeError: Expecting property name "
        "enclosed in double quotes: line 1 column 2 (char 1))"]
    assert not (tmp_path / "results/default").exists()
