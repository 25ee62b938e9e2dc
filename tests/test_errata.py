"""Errata: opt-in corrections of gold labels, checked, applied after loading, counted and listed."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks.datasets import DatasetError, load_dataset, load_errata
from benchmarks.datasets.download import github_cache_path, remote_files
from benchmarks.datasets.errata import ERRATA_DIR, errata_fields
from benchmarks.harness.app import compose_config, main
from benchmarks.harness.schema import bench_config

FIXTURES = Path(__file__).parent / "fixtures"
REAL_ORACLE = Path(__file__).resolve().parents[2] / "shared" / "data" / "longmemeval_oracle.json.xz"
SOURCE = "https://github.com/example/benchmark/issues/1"


def errata_file(tmp_path: Path, entries: list[dict[str, Any]], dataset: str = "longmemeval",
                name: str = "errata.yaml") -> Path:
    path = tmp_path / name
    text = {"version": "2", "dataset": dataset, "entries": entries}
    path.write_text(json.dumps(text) if name.endswith(".json") else yaml.safe_dump(text), encoding="utf-8")
    return path


def tiny(errata: Path | None = None, **kwargs: Any) -> Any:
    return load_dataset("longmemeval_s", path=FIXTURES / "longmemeval_tiny.json", errata=errata, **kwargs)


def test_the_default_leaves_the_official_file_untouched() -> None:
    data = tiny()
    assert data.errata is None and data.counts.errata_answers_changed == 0
    assert bench_config(compose_config([])).dataset.errata is None


def test_answer_evidence_and_drop_are_applied_and_counted(tmp_path: Path) -> None:
    path = errata_file(tmp_path, [
        {"question_id": "tiny_q1", "source": SOURCE, "answer": "The Lake Otters"},
        {"question_id": "tiny_q2", "source": SOURCE, "evidence": ["answer_t2_b"]},
        {"question_id": "tiny_q3_abs", "source": SOURCE, "drop": True},
    ], name="errata.json")
    data = tiny(path)
    questions = {q.question_id: q for _, q in data.questions()}
    assert set(questions) == {"tiny_q1", "tiny_q2"} and len(data.instances) == 2  # the dropped one is gone
    assert questions["tiny_q1"].answer == "The Lake Otters"
    assert questions["tiny_q2"].evidence_sessions == ("answer_t2_b",)
    assert all(t.startswith("answer_t2_b:") for t in questions["tiny_q2"].evidence_turns)
    counts = data.counts
    assert (counts.errata_answers_changed, counts.errata_evidence_changed, counts.errata_questions_dropped) \
        == (1, 1, 1)
    assert data.errata is not None
    meta = data.errata.to_dict()
    assert meta["version"] == "2" and len(meta["sha256"]) == 64 and meta["entries"] == 3
    assert meta["changes"][0]["answer"] == {"official": "The Otters", "new": "The Lake Otters"}
    assert errata_fields(questions["tiny_q1"]) == {"answer_official": "The Otters", "errata_source": SOURCE,
                                                  "errata_version": "2"}
    assert errata_fields(questions["tiny_q2"])["evidence_sessions_official"] == ["answer_t2_a", "answer_t2_b"]
    assert errata_fields(tiny().instances[0].questions[0]) == {}


def test_entries_for_questions_not_loaded_change_nothing(tmp_path: Path) -> None:
    path = errata_file(tmp_path, [{"question_id": "tiny_q2", "source": SOURCE, "answer": "3"}])
    data = tiny(path, instance_ids=["tiny_q1"])
    assert data.errata is not None and data.errata.not_loaded == ("tiny_q2",)
    assert data.counts.errata_answers_changed == 0


@pytest.mark.parametrize(("entries", "message"), [
    ([{"question_id": "nope", "source": SOURCE, "answer": "x"}], "name questions .* does not hold: nope"),
    ([{"question_id": "tiny_q1", "source": "issue 12", "answer": "x"}], "must be the URL"),
    ([{"question_id": "tiny_q1", "source": SOURCE}], "either drops its question or changes"),
    ([{"question_id": "tiny_q1", "source": SOURCE, "drop": True, "answer": "x"}], "either drops"),
    ([{"question_id": "tiny_q1", "source": SOURCE, "answer": "x"}] * 2, "two entries for question"),
    ([{"question_id": "tiny_q1", "source": SOURCE, "evidence": ["s_nowhere"]}], "does not hold: s_nowhere"),
    ([{"question_id": "tiny_q1", "answer": "x"}], "missing field 'source'"),
    ([{"question_id": "tiny_q1", "source": SOURCE, "answers": "x"}], "unknown fields"),
])
def test_bad_errata_are_one_line_errors(tmp_path: Path, entries: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(DatasetError, match=message) as error:
        tiny(errata_file(tmp_path, entries))
    assert "\n" not in str(error.value)


def test_an_errata_file_for_another_dataset_is_refused(tmp_path: Path) -> None:
    path = errata_file(tmp_path, [], dataset="locomo")
    with pytest.raises(DatasetError, match="is for locomo, not longmemeval_s"):
        tiny(path)
    with pytest.raises(DatasetError, match="expected an object"):
        tiny(tmp_path / "x.yaml" if (tmp_path / "x.yaml").write_text("[1]") else None)


def test_locomo_errata_use_question_indices_and_dia_ids(tmp_path: Path) -> None:
    path = errata_file(tmp_path, [
        {"question_id": "conv-a:q1", "source": SOURCE, "answer": "2022", "evidence": ["D1:2"]},
        {"question_id": "conv-a:q3", "source": SOURCE, "drop": True},  # category 5: not loaded
    ], dataset="locomo")
    data = load_dataset("locomo", path=FIXTURES / "locomo_tiny.json", errata=path)
    question = next(q for _, q in data.questions() if q.question_id == "conv-a:q1")
    assert question.answer == "2022" and question.evidence_turns == ("D1:2",)
    assert question.evidence_sessions == ("session_1",)
    assert data.errata is not None and data.errata.not_loaded == ("conv-a:q3",)
    bad = errata_file(tmp_path, [{"question_id": "conv-a:q9", "source": SOURCE, "drop": True}], "locomo")
    with pytest.raises(DatasetError, match="conv-a:q9"):
        load_dataset("locomo", path=FIXTURES / "locomo_tiny.json", errata=bad)
    wrong = errata_file(tmp_path, [{"question_id": "conv-a:q1", "source": SOURCE, "evidence": ["D7:1"]}],
                        "locomo")
    with pytest.raises(DatasetError, match="session_7"):
        load_dataset("locomo", path=FIXTURES / "locomo_tiny.json", errata=wrong)


def test_the_data_command_lists_what_an_errata_file_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    path = errata_file(tmp_path, [{"question_id": "sample_ku_001", "source": SOURCE, "answer": "Tampa"},
                                  {"question_id": "sample_tr_001", "source": SOURCE, "drop": True}],
                       dataset="sample")
    monkeypatch.setattr(sys, "argv", ["memforest-bench", "data", "dataset=sample", f"dataset.errata={path}"])
    with pytest.raises(SystemExit) as stop:
        main()
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert f"errata {path}: version 2, dataset sample" in out
    assert "- sample_ku_001: answer -> 'Tampa'" in out and f"[{SOURCE}]" in out
    assert "- sample_tr_001: drop" in out
    missing = errata_file(tmp_path, [{"question_id": "x", "source": SOURCE, "drop": True}], "sample",
                          "m.yaml")
    monkeypatch.setattr(sys, "argv", ["memforest-bench", "data", "dataset=sample",
                                      f"dataset.errata={missing}"])
    with pytest.raises(SystemExit) as stop:
        main()
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and len(err.splitlines()) == 1 and "does not hold: x" in err


def test_shipped_errata_files_are_well_formed() -> None:
    shipped = {path.stem: load_errata(path) for path in sorted(ERRATA_DIR.glob("*.yaml"))}
    assert set(shipped) == {"longmemeval", "locomo"}
    for errata in shipped.values():
        assert all(entry.source.startswith("https://github.com/") for entry in errata.entries)
    assert len(shipped["locomo"].entries) == 5


# the pinned public file where `python -m benchmarks.datasets.download locomo` puts it (never shipped)
LOCOMO = github_cache_path(remote_files()["locomo"])  # type: ignore[arg-type]


@pytest.mark.skipif(not LOCOMO.exists(), reason="the public locomo10.json is not here")
def test_shipped_locomo_errata_apply_to_the_pinned_file() -> None:
    data = load_dataset("locomo", path=LOCOMO, errata=ERRATA_DIR / "locomo.yaml")
    assert data.errata is not None and not data.errata.not_loaded
    assert (data.counts.errata_answers_changed, data.counts.errata_questions_dropped) == (4, 1)


@pytest.mark.skipif(not REAL_ORACLE.exists(), reason="the real LongMemEval oracle file is not here")
def test_shipped_longmemeval_errata_apply_to_the_real_file() -> None:
    data = load_dataset("longmemeval_oracle", path=REAL_ORACLE, errata=ERRATA_DIR / "longmemeval.yaml")
    assert data.errata is not None and not data.errata.not_loaded
    assert data.counts.errata_answers_changed == len(data.errata.changes)
    assert data.num_questions == 500 - data.counts.errata_questions_dropped
