"""The generator-free sweeps in `make paper`: retrieval recall per setting (evidence budget k, chunk size,
retrieval mode) from the records' retrieved and gold ids, in tables and panels labelled recall, beside the
paper's accuracy; and the command printed for each artifact without runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("pandas")
pytest.importorskip("matplotlib")

from analysis import hints  # noqa: E402
from analysis.__main__ import generate, main  # noqa: E402
from analysis.load import Results  # noqa: E402
from analysis.rows import record_recall  # noqa: E402

GOLD = {"evidence_sessions": ["s1", "s2"], "evidence_turns": ["s1:0", "s2:3"]}


def _record(qid: str, sessions: list[str], turns: list[str] | None, **extra: object) -> dict[str, object]:
    out: dict[str, object] = {"question_id": qid, "attempt": 0, "instance_id": qid, "abstention": False,
                              **GOLD, "retrieved_session_ids": sessions, **extra}
    if turns is not None:
        out["retrieved_turn_ids"] = turns
    return out


def _run(root: Path, experiment: str, setting: dict[str, object], records: list[dict[str, object]],
         kind: str = "longmemeval") -> None:
    name = "-".join(f"{v}" for v in setting.values())
    run_dir = root / experiment / name
    run_dir.mkdir(parents=True)
    config = {"experiment_name": experiment, "seed": 0, "dataset": {"name": "slice"},
              "llm": {"name": "smollm2_cpu"},
              "method": {"name": "memforest_sessions", "memforest": setting}}
    run = {"config": config, "dataset": {"name": "slice", "kind": kind}}
    (run_dir / "run.json").write_text(json.dumps(run))
    (run_dir / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_record_recall_counts_sessions_and_turns_and_skips_abstentions() -> None:
    r = record_recall(_record("q", ["s9", "s2"], ["s2:3", "s2:4"]))
    assert r == {"recall_session_any": 1.0, "recall_turn_any": 1.0, "recall_turn_all": 0.0,
                 "recall_turn": 0.5}
    root_only = record_recall(_record("q", ["s9"], None))
    assert root_only["recall_session_any"] == 0.0 and root_only["recall_turn_any"] is None
    assert set(record_recall(_record("q", ["s1"], ["s1:0"], abstention=True)).values()) == {None}


@pytest.fixture
def results(tmp_path: Path) -> Path:
    root = tmp_path / "results"
    for k, turns in ((5, ["s1:0"]), (10, ["s1:0", "s2:3"])):
        _run(root, "evidence_budget_recall", {"query": {"final_units": k}},
             [_record("q1", ["s1"], turns), _record("q2", ["s7"], ["s7:0"])])
    modes: tuple[tuple[str, list[str] | None], ...] = (("embed", ["s1:0"]), ("root", None),
                                                       ("flat", ["s2:3"]))
    for mode, listed in modes:
        query = {"mode": mode, **({"flat_units": "cells"} if mode == "flat" else {})}
        _run(root, "ablation_retrieval_recall", {"query": query}, [_record("q1", ["s1"], listed)])
    _run(root, "chunk_size_recall", {"chunk": {"max_turns": 0}}, [_record("q1", ["s2"], ["s2:3"])])
    return root


def _rows(path: Path) -> list[dict[str, str]]:
    lines = [line for line in path.read_text().splitlines() if line.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    return [dict(zip(head, (c.strip() for c in line.strip("|").split("|")))) for line in lines[2:]]


def test_recall_tables_and_panels_per_setting(results: Path, tmp_path: Path) -> None:
    out = tmp_path / "paper"
    generate(results, out, ["evidence_budget", "chunk_size", "ablation_retrieval"])
    budget = {r["k"]: r for r in _rows(out / "evidence_budget_recall.md")}
    assert budget["5"]["session recall_any %"] == "50.0" and budget["5"]["turn recall_any %"] == "50.0"
    assert budget["10"]["turn recall_all %"] == "50.0" and budget["10"]["evidence recall %"] == "50.0"
    assert budget["20"]["source"] == "missing"  # a k of the sweep without a run
    assert "not accuracy" in (out / "evidence_budget_recall.md").read_text()
    modes = {r["mode"]: r for r in _rows(out / "ablation_retrieval_recall.md")}
    assert modes["root summaries only"]["turn recall_any %"] == "n/a"
    assert modes["embedding browse"]["turn recall_any %"] == "100.0"
    assert modes["flat top-k cells (no trees)"]["turn recall_any %"] == "100.0"  # flat over cells, named so
    assert "flat top-k facts (no trees)" not in modes
    chunks = {r["turns per cell"]: r for r in _rows(out / "chunk_size_recall.md")}
    assert chunks["whole"]["session recall_any %"] == "100.0" and chunks["1"]["source"] == "missing"
    panels = json.loads((out / "evidence_budget.series.json").read_text())["axes"]
    assert any("recall" in s for ax in panels for s in ax["series"])
    for figure in ("ablation_retrieval_recall", "evidence_budget", "chunk_size"):
        assert (out / f"{figure}.png").stat().st_size > 1000


def test_missing_artifacts_name_the_command_that_fills_them(results: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    missing = hints.missing(Results.scan(results), ["accuracy", "passk", "evidence_budget", "write_path"])
    assert set(missing) == {"accuracy", "passk", "write_path"}
    assert "slurm" in missing["accuracy"] and "experiment=passk" in missing["passk"]
    assert "make paper-runs" in missing["write_path"]
    assert main([str(results), "--out", str(tmp_path / "p"), "--only", "passk", "evidence_budget"]) == 0
    out = capsys.readouterr().out
    assert "missing passk: no runs; to fill it:" in out and "missing evidence_budget" not in out
