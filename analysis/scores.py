"""Accuracy and pass@k from a verdicts frame, with the harness's definitions (`analysis.rows`): pass@k
is the unbiased estimator 1 - C(n-c,k)/C(n,k) per question (pass@1 = c/n), averaged over questions.

Every figure carries its 95% interval (`<figure>_low`, `<figure>_high`): a percentile bootstrap over
the questions it averages (`analysis.intervals`, 2,000 resamples, seed 0), as the harness's summary
computes it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from analysis.intervals import Bootstrap, Interval, bootstrap_mean, bootstrap_mean_columns
from analysis.rows import pass_at_k

BOOTSTRAP = Bootstrap()
SWEEP_GROUP = ["setting", "dataset", "method", "backbone", "simulated", "judge"]  # as `sweeps.scores`


def per_question(verdicts: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """One row per (keys..., question): attempts judged (n) and judged correct (c)."""
    group = [*keys, "question_id", "category", "abstention"]
    df = verdicts.assign(category=verdicts["category"].fillna("?"),
                         abstention=verdicts["abstention"].fillna(False).astype(bool))
    out = df.groupby(group, dropna=False)["correct"].agg(n="count", c="sum").reset_index()
    out["c"] = out["c"].astype(int)
    return out


def interval(questions: pd.Series, values: pd.Series) -> Interval | None:
    """The mean of per-question `values` with its 95% interval; NaN values are left out, None when
    none is left. Questions are resampled by id (`questions`)."""
    kept = values.notna()
    return bootstrap_mean(dict(zip(questions[kept].astype(str), values[kept].astype(float))), BOOTSTRAP)


def bounds(iv: Interval | None, name: str) -> dict[str, float]:
    """`{name: value, name_low: low, name_high: high}` of an interval, NaN for None."""
    nan = float("nan")
    if iv is None:
        return {name: nan, f"{name}_low": nan, f"{name}_high": nan}
    return {name: iv.value, f"{name}_low": iv.low, f"{name}_high": iv.high}


def mean_intervals(frame: pd.DataFrame, keys: Sequence[str], column: str, name: str,
                   ids: pd.Series | None = None) -> pd.DataFrame:
    """Per `keys`, the mean of `column` with its interval (columns: keys, name, name_low, name_high),
    resampling the rows by `ids` (one per question; default: each row its own)."""
    ids = pd.Series(range(len(frame)), index=frame.index) if ids is None else ids
    rows = [{**named, **bounds(interval(ids.loc[group.index], group[column]), name)}
            for named, group in _groups(frame, keys)]
    return pd.DataFrame(rows, columns=[*keys, name, f"{name}_low", f"{name}_high"])


def _groups(frame: pd.DataFrame, keys: Sequence[str]) -> list[tuple[dict[str, object], pd.DataFrame]]:
    out = []
    for values, group in frame.groupby(list(keys), dropna=False):
        values = values if isinstance(values, tuple) else (values,)
        out.append((dict(zip(keys, values)), group))
    return out


def accuracy(verdicts: pd.DataFrame, keys: Sequence[str], by_category: bool = False) -> pd.DataFrame:
    """Mean pass@1 (fraction 0..1) with its interval and question count per keys (and per category)."""
    q = per_question(verdicts, keys)
    q["pass1"] = [pass_at_k(int(n), int(c), 1) for n, c in zip(q["n"], q["c"])]
    group = [*keys, "category"] if by_category else list(keys)
    columns = [*group, "accuracy", "accuracy_low", "accuracy_high", "questions"]
    rows = [{**named, **bounds(interval(g["question_id"], g["pass1"]), "accuracy"), "questions": len(g)}
            for named, g in _groups(q, group)]
    return pd.DataFrame(rows, columns=columns)


def pass_curve(verdicts: pd.DataFrame, keys: Sequence[str], max_k: int = 8) -> pd.DataFrame:
    """Mean pass@k with its interval for k = 1..min(max_k, fewest attempts of any question) per keys."""
    q = per_question(verdicts, keys)
    rows = []
    for named, group in _groups(q, keys):
        top = min(max_k, int(group["n"].min()))
        per_k = {str(question): {str(k): pass_at_k(int(n), int(c), k) for k in range(1, top + 1)}
                 for question, n, c in zip(group["question_id"], group["n"], group["c"])}
        intervals = bootstrap_mean_columns(per_k, BOOTSTRAP)
        for k in range(1, top + 1):
            rows.append({**named, "k": k, **bounds(intervals.get(str(k)), "accuracy"),
                         "questions": len(group)})
    return pd.DataFrame(rows, columns=[*keys, "k", "accuracy", "accuracy_low", "accuracy_high", "questions"])


def setting_intervals(verdicts: pd.DataFrame, settings: Mapping[str, str], max_k: int = 8) -> pd.DataFrame:
    """The intervals of a sweep's pass@1 and pass@n (`sweeps.scores`: n = the fewest attempts of any
    question, at most `max_k`) per setting and judge, for the runs of `settings` (run id -> setting):
    SWEEP_GROUP and pass1_low, pass1_high, passn_low, passn_high, to merge on SWEEP_GROUP."""
    columns = [*SWEEP_GROUP, "pass1_low", "pass1_high", "passn_low", "passn_high"]
    v = verdicts[verdicts["run_id"].isin(settings)] if len(verdicts) else verdicts
    if v.empty:
        return pd.DataFrame(columns=columns)
    v = v.assign(setting=v["run_id"].map(settings),
                 judge=v["judge_id"].astype(str) + " (" + v["judge_model"].astype(str) + ")")
    rows = []
    for named, group in _groups(pass_curve(v, SWEEP_GROUP, max_k), SWEEP_GROUP):
        first, top = group.loc[group["k"].idxmin()], group.loc[group["k"].idxmax()]
        rows.append({**named, "pass1_low": first["accuracy_low"], "pass1_high": first["accuracy_high"],
                     "passn_low": top["accuracy_low"], "passn_high": top["accuracy_high"]})
    return pd.DataFrame(rows, columns=columns)
