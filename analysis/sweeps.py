"""Sweeps: runs of one experiment that differ in one config setting (evidence budget k, chunk size,
tree families, retrieval mode), scored per setting."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pandas as pd

from analysis.load import Results, config_value
from analysis.scores import pass_curve

GROUP = ["setting", "dataset", "method", "backbone", "simulated", "judge"]


def setting_of(results: Results, experiments: Sequence[str], key: str,
               label: Callable[[object], str] = str, default: object = None) -> dict[str, str]:
    """Run id -> the label of its value of `key`, for the runs of `experiments`."""
    runs = results.runs
    if runs.empty:
        return {}
    runs = runs[runs["experiment"].isin(experiments)]
    values = config_value(runs, key, default)
    return {run_id: label(value) for run_id, value in zip(runs["run_id"], values)}


def scores(results: Results, settings: dict[str, str]) -> pd.DataFrame:
    """pass@1 and pass@n (n = the fewest attempts of any question, at most 8) per setting and judge."""
    v = results.verdicts
    v = v[v["run_id"].isin(settings)] if len(v) else v
    if v.empty:
        return pd.DataFrame(columns=[*GROUP, "pass1", "passn", "n", "questions"])
    v = v.assign(setting=v["run_id"].map(settings),
                 judge=v["judge_id"].astype(str) + " (" + v["judge_model"].astype(str) + ")")
    curve = pass_curve(v, GROUP, 8)
    rows = []
    for keys, group in curve.groupby(GROUP, dropna=False):
        top = group.loc[group["k"].idxmax()]
        first = group.loc[group["k"].idxmin()]
        rows.append({**dict(zip(GROUP, keys)), "pass1": first["accuracy"], "passn": top["accuracy"],
                     "n": int(top["k"]), "questions": int(top["questions"])})
    return pd.DataFrame(rows, columns=[*GROUP, "pass1", "passn", "n", "questions"])


def record_means(results: Results, settings: dict[str, str], columns: Sequence[str]) -> pd.DataFrame:
    """Means of record columns (first attempt of each question) per setting, method and backbone."""
    r = results.records
    r = r[r["run_id"].isin(settings)] if len(r) else r
    keys = ["setting", "method", "backbone", "simulated"]
    if r.empty:
        return pd.DataFrame(columns=[*keys, *columns])
    r = r.sort_values("attempt").drop_duplicates(["run_id",
                                                  "question_id"]).assign(setting=r["run_id"].map(settings))
    present = [c for c in columns if c in r]
    return r.groupby(keys, dropna=False)[present].mean().reset_index()
