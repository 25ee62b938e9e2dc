"""Typed result records: every row of a stored layout-1 run directory reads and writes back whole, and
the run's tables computed through the typed records keep every figure they showed before."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from analysis.records import (
    LAYOUT,
    BuildRow,
    JudgeVerdict,
    LayoutError,
    QuestionRecord,
    ServedCall,
    layout_of,
)
from benchmarks.harness import report, write_path
from benchmarks.harness.results import RunFiles

FIXTURE = Path(__file__).parent / "fixtures" / "run_layout1"  # the harness wrote it before rows had versions
RUNS = [FIXTURE / "memforest_embed", FIXTURE / "flat_rag"]
EXPECTED = FIXTURE / "expected"  # the tables the harness wrote from these files before the typed records
KINDS: dict[str, type[QuestionRecord] | type[BuildRow] | type[JudgeVerdict] | type[ServedCall]] = {
    "records": QuestionRecord, "builds": BuildRow, "judgments": JudgeVerdict, "served_calls": ServedCall}


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_layout1_row_reads_and_writes_back_whole(kind: str) -> None:
    paths = sorted(FIXTURE.glob(f"*/{kind}.jsonl"))
    assert paths
    for path in paths:
        for row in _rows(path):
            record = KINDS[kind].from_row(row)
            assert record.version == 1 and not record.extra  # every field written today is known
            out = record.to_row()
            assert out.pop("version") == LAYOUT
            if kind == "judgments":  # layout 2 verdicts always say which repeat and pinned judge they are
                assert (out.pop("repeat"), out.pop("judge_hash")) == (0, None)
            assert json.dumps(out, sort_keys=True) == json.dumps(row, sort_keys=True)
            assert KINDS[kind].from_row(record.to_row()) == KINDS[kind].from_row({**row, "version": 2})


def test_unknown_keys_are_kept_and_newer_layouts_refused() -> None:
    row = {"question_id": "q", "attempt": 1, "a_later_field": {"x": 1}}
    record = QuestionRecord.from_row(row)
    assert record.extra == {"a_later_field": {"x": 1}} and record.key == ("q", 1)
    assert record.to_row()["a_later_field"] == {"x": 1}
    assert "response" not in record.to_row()  # absent fields stay absent
    verdict = JudgeVerdict.from_row({"question_id": "q", "repeat": 2, "judge_hash": "ab", "version": 2})
    assert (verdict.repeat, verdict.judge_hash, verdict.version) == (2, "ab", 2)
    assert layout_of({}) == 1
    with pytest.raises(LayoutError):
        QuestionRecord.from_row({"question_id": "q", "version": LAYOUT + 1})


def test_failures_timeouts_and_declines_are_read_from_the_record() -> None:
    error = "answer: answer call failed after 1 retries: TimeoutError: slow"
    timed = QuestionRecord.from_row({"question_id": "q", "response": "", "error_kind": "infrastructure",
                                     "error": error})
    assert timed.failed and timed.timed_out and not timed.declined
    assert timed.failed_stage == ("answer", "answer call failed after 1 retries: TimeoutError: slow")
    broken = QuestionRecord.from_row({"question_id": "q", "error": "retrieval: KeyError: 'x'"})
    assert broken.failed and not broken.timed_out
    assert QuestionRecord.from_row({"question_id": "q", "response": "I do not know."}).declined
    assert not QuestionRecord.from_row({"question_id": "q", "response": "Miami"}).declined


def test_the_run_files_read_typed_records_and_write_the_current_layout(tmp_path: Path) -> None:
    files = RunFiles(tmp_path)
    for row in _rows(FIXTURE / "flat_rag" / "records.jsonl"):
        files.add_record(row)
    files.add_build(BuildRow.from_row(_rows(FIXTURE / "flat_rag" / "builds.jsonl")[0]))
    files.close()
    assert all(row["version"] == LAYOUT for row in _rows(files.records_path))
    assert [r.key for r in files.records()] == [r.key for r in RunFiles(RUNS[1], create=False).records()]
    assert isinstance(next(iter(files.builds().values())), BuildRow)


INTERVAL = re.compile(r" \[-?[0-9.]+, -?[0-9.]+\]")  # a figure's 95% interval, added beside it


def _table_rows(markdown: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in markdown.splitlines() if line.startswith("|") and not line.startswith("|---")]


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_the_summary_of_an_old_run_keeps_every_figure_and_row(run: Path) -> None:
    files = RunFiles(run, create=False)
    summary = report.summarize_run(files, report.RunLabels.stored(files.load_run()["config"]))
    before = json.loads((EXPECTED / f"summary_{run.name}.json").read_text(encoding="utf-8"))

    def same(old: Any, new: Any, where: str) -> None:
        if isinstance(old, dict):
            for key, value in old.items():
                assert key in new, f"{where}/{key} is gone"
                same(value, new[key], f"{where}/{key}")
        elif isinstance(old, float):
            assert new == pytest.approx(old), where
        else:
            assert new == old, where

    same(before, json.loads(json.dumps(summary, default=str)), "")
    rows = {row[0]: row[1:] for row in _table_rows(summary["markdown"])}
    for row in _table_rows((EXPECTED / f"summary_{run.name}.md").read_text(encoding="utf-8")):
        assert [INTERVAL.sub("", cell) for cell in rows[row[0]]] == row[1:], row[0]


def test_the_comparison_of_old_runs_keeps_every_column() -> None:
    before = _table_rows((EXPECTED / "comparison.md").read_text(encoding="utf-8"))
    text = report.comparison_markdown(RUNS)
    after = _table_rows(text)
    assert len(after) == len(before)
    for old, new in zip(before[1:], after[1:]):
        for head, cell in zip(before[0], old):
            assert INTERVAL.sub("", new[after[0].index(head)]) == cell, head
    assert "paired difference to memforest_embed" in text
    flat = dict(zip(after[0], after[2]))
    assert (flat["failed"], flat["timed out"], flat["declined"]) == ("1", "1", "0")
    assert flat["Δ accuracy"].startswith("0.0% [")
    assert dict(zip(after[0], after[1]))["Δ accuracy"] == "reference"
    assert flat["published"] == "–"  # no published figure for the shipped sample


def test_the_write_path_table_of_old_runs_is_unchanged() -> None:
    expected = (EXPECTED / "write_path.md").read_text(encoding="utf-8")
    assert write_path.markdown(write_path.table(RUNS)) == expected
