"""Accuracy and pass@k from a verdicts frame, with the harness's definitions (`analysis.rows`): pass@k
is the unbiased estimator 1 - C(n-c,k)/C(n,k) per question (pass@1 = c/n), averaged over questions."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from analysis.rows import mean, pass_at_k


def per_question(verdicts: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """One row per (keys..., question): attempts judged (n) and judged correct (c)."""
    group = [*keys, "question_id", "category", "abstention"]
    df = verdicts.assign(category=verdicts["category"].fillna("?"),
                         abstention=verdicts["abstention"].fillna(False).astype(bool))
    out = df.groupby(group, dropna=False)["correct"].agg(n="count", c="sum").reset_index()
    out["c"] = out["c"].astype(int)
    return out


def accuracy(verdicts: pd.DataFrame, keys: Sequence[str], by_category: bool = False) -> pd.DataFrame:
    """Mean pass@1 (fraction 0..1) and question count per keys (and per category)."""
    q = per_question(verdicts, keys)
    q["pass1"] = [pass_at_k(int(n), int(c), 1) for n, c in zip(q["n"], q["c"])]
    group = [*keys, "category"] if by_category else list(keys)
    return q.groupby(group, dropna=False).agg(accuracy=("pass1", "mean"),
                                              questions=("pass1", "size")).reset_index()


def pass_curve(verdicts: pd.DataFrame, keys: Sequence[str], max_k: int = 8) -> pd.DataFrame:
    """Mean pass@k for k = 1..min(max_k, fewest attempts of any question) per keys."""
    q = per_question(verdicts, keys)
    rows = []
    for values, group in q.groupby(list(keys), dropna=False):
        values = values if isinstance(values, tuple) else (values,)
        top = min(max_k, int(group["n"].min()))
        for k in range(1, top + 1):
            score = mean(pass_at_k(int(n), int(c), k) for n, c in zip(group["n"], group["c"]))
            rows.append({**dict(zip(keys, values)), "k": k, "accuracy": score, "questions": len(group)})
    return pd.DataFrame(rows, columns=[*keys, "k", "accuracy", "questions"])
