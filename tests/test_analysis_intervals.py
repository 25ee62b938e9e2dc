"""The paper's accuracy and recall figures carry 95% intervals: the same bootstrap as the harness's
summary, in the table cells and as error bars in the figures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pd = pytest.importorskip("pandas")
pytest.importorskip("matplotlib")

from analysis.__main__ import generate  # noqa: E402
from analysis.recall import by_setting  # noqa: E402
from analysis.render import error_bars, fmt_interval, interval_cell  # noqa: E402
from analysis.scores import accuracy, mean_intervals, pass_curve, setting_intervals  # noqa: E402
from benchmarks.harness.metrics import summarize  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "paper_results"


def _verdicts(questions: int = 120, attempts: int = 3) -> list[dict[str, Any]]:
    rng = np.random.default_rng(11)
    rows = []
    for i in range(questions):
        for attempt in range(attempts):
            rows.append({"method": "m", "dataset": "d", "question_id": f"q{i:03d}", "attempt": attempt,
                         "category": "AB"[i % 2], "abstention": False, "judge_id": "j",
                         "correct": bool(rng.random() < (0.4 if i % 2 else 0.8))})
    return rows


def test_accuracy_and_pass_at_k_intervals_are_the_harness_summarys() -> None:
    rows = _verdicts()
    judge = summarize(rows, rows)["m/d"]["judges"]["j"]
    frame = pd.DataFrame(rows)
    overall = accuracy(frame, ["method"]).iloc[0]
    assert overall["accuracy"] == pytest.approx(judge["accuracy"])
    assert [overall["accuracy_low"], overall["accuracy_high"]] == pytest.approx(judge["accuracy_ci95"])
    by_category = accuracy(frame, ["method"], by_category=True).set_index("category")
    for category, (low, high) in judge["per_category_ci95"].items():
        assert [by_category.at[category, "accuracy_low"], by_category.at[category, "accuracy_high"]] == \
            pytest.approx([low, high])
    curve = pass_curve(frame, ["method"]).set_index("k")
    assert list(curve.index) == [1, 2, 3]
    for k, (low, high) in judge["pass_at_k_ci95"].items():
        point = curve.loc[int(k)]
        assert [point["accuracy_low"], point["accuracy_high"]] == pytest.approx([low, high])
        assert low <= point["accuracy"] <= high


def test_sweep_intervals_per_setting_and_judge() -> None:
    rows = _verdicts(40, 2)
    frame = pd.DataFrame(rows).assign(run_id=lambda d: np.where(d["question_id"] < "q020", "r1", "r2"),
                                      backbone="b", simulated=False, judge_model="x")
    out = setting_intervals(frame, {"r1": "k5", "r2": "k10"}).set_index("setting")
    assert set(out.index) == {"k5", "k10"}
    assert (out["pass1_low"] <= out["pass1_high"]).all() and (out["passn_low"] <= out["passn_high"]).all()
    assert setting_intervals(frame, {}).empty


def test_recall_means_carry_intervals_and_nan_stays_apart() -> None:
    records = pd.DataFrame({
        "run_id": ["r"] * 4, "question_id": ["q1", "q2", "q3", "q4"], "attempt": [0] * 4,
        "recall_session_any": [1.0, 0.0, 1.0, 1.0], "recall_turn_any": [np.nan] * 4,
        "recall_turn_all": [np.nan] * 4, "recall_turn": [0.5, 0.0, 1.0, np.nan]})
    runs = pd.DataFrame({"run_id": ["r"], "dataset": ["d"], "kind": ["longmemeval"], "method": ["m"],
                         "backbone": ["b"]})
    row = by_setting(records, runs, {"r": "k5"}).iloc[0]
    assert row["recall_session_any"] == 0.75 and row["recall_session_any_low"] <= 0.75
    assert row["recall_session_any_high"] == 1.0
    assert row["recall_turn"] == pytest.approx(0.5)
    assert row["recall_turn_low"] <= 0.5 <= row["recall_turn_high"]
    assert np.isnan(row["recall_turn_any"]) and np.isnan(row["recall_turn_any_low"])


def test_mean_intervals_resample_rows_or_given_ids() -> None:
    frame = pd.DataFrame({"setting": ["a", "a", "a", "b"], "hit": [1.0, 0.0, 1.0, 1.0]})
    out = mean_intervals(frame, ["setting"], "hit", "gold").set_index("setting")
    assert out.at["a", "gold"] == pytest.approx(2 / 3) and out.at["b", "gold_low"] == 1.0
    assert out.at["a", "gold_low"] == 0.0 and out.at["a", "gold_high"] == 1.0


def test_cells_and_error_bars() -> None:
    assert fmt_interval(0.8123, 0.7912, 0.8321, pct=True) == "81.2 [79.1, 83.2]"
    assert fmt_interval(1.5, 1.25, 1.75) == "1.50 [1.25, 1.75]"
    assert fmt_interval(0.5, None, None, pct=True) == "50.0"
    assert fmt_interval(float("nan"), 0.1, 0.2) == "missing"
    assert interval_cell(0.1, 0.25) == "[10.0, 25.0]" and interval_cell(np.nan, 0.2) == "missing"
    bars = error_bars([0.5, np.nan, 0.9], [0.4, np.nan, None], [0.7, np.nan, None])
    assert bars.shape == (2, 3)
    assert bars[:, 0] == pytest.approx([10.0, 20.0]) and (bars[:, 1:] == 0).all()


def test_the_paper_tables_show_our_intervals_and_none_for_the_paper(tmp_path: Path) -> None:
    generate(FIXTURE, tmp_path, ["accuracy", "passk"])
    accuracy_md = (tmp_path / "accuracy_locomo_locomo_generous_scripted.md").read_text()
    ours = next(line for line in accuracy_md.splitlines() if "| ours |" in line)
    assert "[" in ours and "(n=4)" in ours
    paper = next(line for line in accuracy_md.splitlines() if "| paper (" in line)
    assert "[" not in paper
    assert "no interval" in accuracy_md
    passk_md = (tmp_path / "passk.md").read_text()
    assert "| ours: 95% interval |" in passk_md
