"""What a system held of its input, as the summary and the comparison table show it: turns kept of
turns given over a run's completed builds, lost turns by reason, one line when a system lost any."""

from __future__ import annotations

from typing import Any

import pytest

from baselines.base import InputKept
from benchmarks.harness.input_kept import input_cell, input_figures, input_line


def build(given: int, kept: int, lost: dict[str, int] | None = None, upstream: bool = False,
          error: str | None = None, stored: int | None = 3) -> dict[str, Any]:
    account = InputKept(given, kept, "pages", stored, lost or {}, upstream)
    return {"instance_id": "i", "error": error, "system": {"input": account.to_dict()}}


def test_counts_add_up_over_completed_builds_and_name_what_was_lost() -> None:
    builds = [build(10, 8, {"one-sided page dropped": 2}, upstream=True), build(5, 5),
              build(7, 0, {"x": 7}, error="build failed"),  # a failed build is counted as failed, not here
              {"instance_id": "j", "error": None, "system": {}}]  # a system that does not report
    figures = input_figures(builds)
    assert figures is not None
    assert (figures["given"], figures["kept"], figures["stored"]) == (15, 13, 6)
    assert figures["lost"] == {"one-sided page dropped": 2} and figures["upstream"]
    assert (figures["instances"], figures["unreported"], figures["unit"]) == (2, 1, "pages")
    assert input_cell(figures) == "13 / 15 (86.7%)"
    line = input_line(figures)
    assert line is not None and line.startswith("Input lost: 2 of 15 turns (13.3%)")
    assert "2 one-sided page dropped" in line and "upstream" in line


def test_nothing_lost_is_no_line_and_nothing_reported_is_a_dash() -> None:
    assert input_line(input_figures([build(4, 4)])) is None
    assert input_cell(input_figures([build(4, 4)])) == "4 / 4 (100.0%)"
    assert input_figures([{"error": None, "system": {"turns": 3}}]) is None
    assert input_cell(None) == "–"


def test_an_account_whose_counts_disagree_is_refused() -> None:
    with pytest.raises(ValueError, match="disagree"):
        InputKept(10, 8, lost={"dropped": 1})
    with pytest.raises(ValueError):
        InputKept(3, 4)
