"""Retrieval recall of generator-free sweeps, beside the paper's accuracy: what the evidence a run handed
over (each record's retrieved sessions and turns, the whole evidence budget) holds of the gold evidence.

Per record (first attempt, questions with gold evidence, abstentions left out, as LongMemEval's own
retrieval metrics do): `recall_session_any` (a gold session among the retrieved ones), `recall_turn_any`
(a gold turn among the retrieved ones), `recall_turn_all` (every gold turn) and `recall_turn` (the share
of gold turns retrieved: LoCoMo's evidence recall by dia id). These are recall, never accuracy: the
tables and figures say so. Each mean carries its 95% interval (`<column>_low`, `<column>_high`; a
bootstrap over the questions, `analysis.scores.interval`), in its own table column and as error bars."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from analysis.names import system_name
from analysis.render import INTERVAL_NOTE, Table, error_bars, fmt, interval_cell
from analysis.rows import RECALL_COLUMNS
from analysis.scores import bounds, interval

LABEL = "retrieval recall (%), not accuracy"
INTERVAL_COLUMNS = tuple(f"{column}_{end}" for column in RECALL_COLUMNS for end in ("low", "high"))
HEADINGS = {"recall_session_any": "session recall_any %", "recall_turn_any": "turn recall_any %",
            "recall_turn_all": "turn recall_all %", "recall_turn": "evidence recall %"}


def by_setting(records: pd.DataFrame, runs: pd.DataFrame, settings: dict[str, str]) -> pd.DataFrame:
    """Mean recall with its interval per setting, dataset, method and backbone over the first attempt of
    each question."""
    keys = ["setting", "dataset", "kind", "method", "backbone"]
    columns = [*keys, "questions", *RECALL_COLUMNS, *INTERVAL_COLUMNS]
    r = records[records["run_id"].isin(settings)] if len(records) else records
    if r.empty or "recall_session_any" not in r:
        return pd.DataFrame(columns=columns)
    r = r[r["attempt"] == 0].merge(runs[["run_id", "dataset", "kind", "method", "backbone"]], on="run_id",
                                   how="left", suffixes=("_record", ""))
    r = r.assign(setting=r["run_id"].map(settings))
    r = r[r[list(RECALL_COLUMNS)].notna().any(axis=1)]
    if r.empty:
        return pd.DataFrame(columns=columns)
    questions = r["run_id"].astype(str) + "/" + r["question_id"].astype(str)  # seeds of a setting apart
    rows = []
    for values, group in r.groupby(keys, dropna=False):
        row: dict[str, Any] = {**dict(zip(keys, values)), "questions": len(group)}
        for column in RECALL_COLUMNS:
            row.update(bounds(interval(questions.loc[group.index], group[column]), column))
        rows.append(row)
    return pd.DataFrame(rows, columns=columns)


def table(name: str, caption: str, frame: pd.DataFrame, order: Sequence[str], setting_title: str,
          display: Mapping[str, str] | None = None, note: str = "") -> Table:
    """One row per (setting, dataset, method): session and turn recall, or `missing` for a setting
    of `order` without a run."""
    rows = []
    for setting in [*order, *sorted(set(frame["setting"]) - set(order))]:
        mine = frame[frame["setting"] == setting].to_dict("records")
        shown = (display or {}).get(setting, setting)
        if not mine:
            rows.append({setting_title: shown, "source": "missing", "questions": "missing",
                         **{head: "missing" for column in RECALL_COLUMNS for head in _heads(column)}})
        for r in mine:
            rows.append({setting_title: shown, "source": f"ours, {system_name(r['method'])}, {r['dataset']}",
                         "questions": fmt(int(r["questions"])),
                         **{cell: value for column in RECALL_COLUMNS
                            for cell, value in zip(_heads(column), _cells(r, column))}})
    notes = ["Retrieval recall, not accuracy: what the evidence handed to the answer model (every retrieved "
             "unit within the run's evidence budget) holds of the gold evidence, first attempt, questions "
             "with gold evidence (abstentions left out). Session recall_any: a gold session among the "
             "retrieved units' sessions; turn recall_any / recall_all: a gold turn / every gold turn "
             "among them; evidence recall: the share of gold turns (LoCoMo's dia-id evidence recall).",
             "Runs without a generator (memforest_sessions: raw cells, extractive summaries), so no "
             "accuracy exists for them; the paper's figures beside are accuracy. n/a: the run's evidence "
             "names no ids of that level (root summaries name sessions, not turns).", INTERVAL_NOTE]
    return Table(name, pd.DataFrame(rows), caption, notes + ([note] if note else []))


def _heads(column: str) -> tuple[str, str]:
    return HEADINGS[column], f"{HEADINGS[column].removesuffix(' %')} 95% interval"


def _cells(row: Mapping[str, Any], column: str) -> tuple[str, str]:
    """A recall figure of a run and its interval; n/a both where the run names no ids of its level."""
    value = _pct(row[column])
    return value, "n/a" if value == "n/a" else interval_cell(row[f"{column}_low"], row[f"{column}_high"])


def _pct(value: float | None) -> str:
    """A recall cell of a run that exists: n/a where its evidence names no ids of the level."""
    return "n/a" if value is None or pd.isna(value) else fmt(value, pct=True)


def plot(ax: Any, frame: pd.DataFrame, x_of: Any, title: str = LABEL) -> None:
    """Recall lines (session recall_any, turn recall_any but on LoCoMo, evidence recall) with their 95%
    intervals as error bars per dataset and method, x from `x_of(setting)`, on `ax`, labelled as recall."""
    for (dataset, kind, method), group in frame.groupby(["dataset", "kind", "method"], dropna=False):
        group = group.assign(x=group["setting"].map(x_of)).sort_values("x")
        name = f"ours: {system_name(method)}, {dataset}"
        lines = [("recall_session_any", "o-", "session recall_any")]
        if kind != "locomo":
            lines.append(("recall_turn_any", "s--", "turn recall_any"))
        lines.append(("recall_turn", "^:", "evidence recall (share of gold turns)"))
        for column, style, what in lines:
            ax.errorbar(group["x"], 100 * group[column].astype(float), fmt=style, capsize=2,
                        yerr=error_bars(group[column], group[f"{column}_low"], group[f"{column}_high"]),
                        label=f"{name}: {what}")
    ax.set_ylabel(f"{title}\nerror bars: 95% interval")
    ax.set_ylim(0, 105)
    if frame.empty:
        ax.text(0.5, 0.5, "no recall runs (missing)", transform=ax.transAxes, ha="center", color="grey")
