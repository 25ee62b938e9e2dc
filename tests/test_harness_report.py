"""Harness pieces on hand-computed examples: result files, evidence ranking, summary figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.records import BuildRow, QuestionRecord
from baselines.base import EvidenceItem, Retrieval
from benchmarks.harness import report
from benchmarks.harness.metrics import summarize
from benchmarks.harness.results import JsonlWriter, RunConflictError, RunFiles, read_jsonl
from benchmarks.harness.runner import retrieval_fields


def test_jsonl_skips_a_torn_line_and_terminates_it_before_appending(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    path.write_text('{"a": 1}\n{"a": 2, "b"', encoding="utf-8")  # killed mid-line
    assert read_jsonl(path) == [{"a": 1}]
    writer = JsonlWriter(path)
    writer.write({"a": 3})
    writer.close()
    assert read_jsonl(path) == [{"a": 1}, {"a": 3}]
    assert read_jsonl(tmp_path / "missing.jsonl") == []


def test_run_json_is_written_once_and_checked_on_resume(tmp_path: Path) -> None:
    files = RunFiles(tmp_path / "run")
    files.open_run({"config": {"seed": 0}}, {"seed": 0})
    files.open_run({"config": {"seed": 0}}, {"seed": 0})
    run = json.loads(files.run_json.read_text())
    assert run["schema_version"] == 1 and len(run["invocations"]) == 2
    with pytest.raises(RunConflictError, match="seed"):
        files.open_run({"config": {"seed": 1}}, {"seed": 1})


def test_evidence_is_ranked_by_score_for_recall() -> None:
    retrieval = Retrieval("ctx", [
        EvidenceItem("old", "2023-01-01", ["s1"], ["s1:0"], 0.2),
        EvidenceItem("best", "2023-03-01", ["s3"], ["s3:0", "s3:1"], 0.9),
        EvidenceItem("mid", "2023-02-01", ["s2", "s3"], ["s2:4"], 0.5),
    ])
    fields = retrieval_fields(retrieval)
    assert fields["retrieved_session_ids"] == ["s3", "s2", "s1"]
    assert fields["retrieved_turn_ids"] == ["s3:0", "s3:1", "s2:4", "s1:0"]
    unexposed = retrieval_fields(Retrieval("ctx", [EvidenceItem("x")]))
    assert "retrieved_session_ids" not in unexposed  # no provenance: no recall, rather than zero
    assert retrieval_fields(Retrieval("", []))["retrieved_session_ids"] == []  # nothing found: a miss


def _rows() -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    records, verdicts = [], []
    outcomes = {"q1": ("A", [True, False]), "q2": ("A", [False, False]), "q3": ("B", [True, True])}
    for qid, (category, results) in outcomes.items():
        for attempt, correct in enumerate(results):
            key = {"method": "m", "dataset": "d", "question_id": qid, "attempt": attempt}
            records.append({**key, "category": category, "abstention": False})
            verdicts.append({**key, "judge_id": "j", "correct": correct, "parsed": True, "judge_model": "x"})
    return records, verdicts


def test_per_category_pass_at_k_by_hand() -> None:
    records, verdicts = _rows()
    judge = summarize(records, verdicts)["m/d"]["judges"]["j"]
    # pass@1 per question: q1 1/2, q2 0, q3 1; pass@2: q1 1, q2 0, q3 1.
    assert judge["accuracy"] == pytest.approx(0.5)
    assert judge["per_category_pass_at_k"]["1"] == pytest.approx({"A": 0.25, "B": 1.0})
    assert judge["per_category_pass_at_k"]["2"] == pytest.approx({"A": 0.5, "B": 1.0})
    assert judge["per_category_questions"] == {"A": 2, "B": 1}


def test_build_and_query_figures_by_hand() -> None:
    builds = [
        {"turns": 100, "build_seconds": 10.0, "llm": {"calls": 4, "prompt_tokens": 400, "waves": 2,
                                                       "by_stage": {"extract": {"calls": 4}}}},
        {"turns": 300, "build_seconds": 30.0, "llm": {"calls": 8, "prompt_tokens": 800, "waves": 4,
                                                       "by_stage": {"extract": {"calls": 8}}}},
        {"turns": 50, "build_seconds": 1.0, "error": "model failed"},
    ]
    figures = report.build_figures([BuildRow.from_row(b) for b in builds])
    assert figures.instances == 2 and figures.failed == 1
    assert figures.turns_per_second == pytest.approx(10.0)
    assert figures.llm_calls_mean == 6 and figures.prompt_tokens_mean == 600
    assert figures.by_stage_total == {"extract": {"calls": 12}}
    records = [
        {"question_id": "q1", "attempt": 1, "latency": {"retrieve": 9.0}, "query_seconds": 9.0,
         "answer_usage": {"prompt_tokens": 10}},
        {"question_id": "q1", "attempt": 0, "latency": {"retrieve": 1.0, "answer": 2.0}, "query_seconds": 3.0,
         "retrieval_llm": {"prompt_tokens": 100}, "answer_usage": {"prompt_tokens": 20}},
    ]
    query = report.query_figures([QuestionRecord.from_row(r) for r in records])
    assert query.query_seconds_mean == 3.0 and query.latency_mean == {"answer": 2.0, "retrieve": 1.0}
    assert query.prompt_tokens_per_question == 130  # retrieval once, plus both answers
    assert query.latency_p50 == {"answer": 2.0, "retrieve": 1.0}  # one first attempt: its own times


def test_latency_percentiles_and_failure_counts_by_hand() -> None:
    rows: list[dict[str, object]] = [
        {"question_id": f"q{i}", "latency": {"retrieve": float(i)},
         "response": "I do not know." if i == 1 else "x"} for i in range(1, 6)]
    rows.append({"question_id": "q6", "response": "", "error_kind": "infrastructure",
                 "error": "answer: TimeoutError: the server took too long"})
    records = [QuestionRecord.from_row(row) for row in rows]
    records.append(QuestionRecord.from_row({"question_id": "q7", "error": "retrieval: KeyError: 'k'",
                                            "prompt_cut": True, "latency": {"retrieve": 6.0}}))
    query = report.query_figures(records)
    # inclusive percentiles of 1..6 s: p50 3.5, p95 = 5 + 0.75 * (6 - 5)
    assert query.latency_p50["retrieve"] == pytest.approx(3.5)
    assert query.latency_p95["retrieve"] == pytest.approx(5.75)
    counts = (query.failed, query.timed_out, query.prompt_cut, query.declined, query.answered)
    assert counts == (2, 1, 1, 1, 5)


def test_markdown_names_every_headline_figure(tmp_path: Path) -> None:
    files = RunFiles(tmp_path)
    records, verdicts = _rows()
    for row in records:
        files.add_record({**row, "retrieved_session_ids": ["s1"], "evidence_sessions": ["s1"],
                          "retrieved_turn_ids": ["t9"], "evidence_turns": ["t1"]})
    for verdict in verdicts:
        files.add_judgment(verdict)
    files.close()
    labels = report.RunLabels(method="m", dataset="d", backbone="b", seed=0, simulated=False)
    text = report.write_summary(files, labels)["markdown"]
    for figure in ("accuracy pass@1 [j (x)] | 50.0% [", "accuracy pass@2",
                   "session recall_any@1 | 100.0% [",
                   "session recall_any@5 | 100.0%", "turn recall_any@10 | 0.0%", "turn recall_all@10 | 0.0%",
                   "session ndcg@10 | 100.0%", "accuracy pass@1 over answered questions (3) [j (x)] | 50.0%",
                   "questions failed / timed out / prompt-cut / declined | 0 / 0 / 0 / 0",
                   "build seconds / instance", "source turns / second",
                   "query latency mean", "| A | 2 | 25.0% [0.0, 50.0] | 50.0% |"):
        assert figure in text
    assert (tmp_path / "summary.md").read_text() == text
