"""pass@1..8 (%) per system, dataset and judge from the sampled attempts of the experiments in
EXPERIMENTS; the paper's only published pass@k numbers (corrected Mem0, LongMemEval-S, Qwen3-30B-A3B,
strict judge) beside. The paper's own pass@k curves (Appendix F) were published as plots only. Each of
our rows has a row of its 95% intervals (bootstrap over questions) beneath; the curves draw them as error
bars."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis.load import Results
from analysis.names import backbone_name, published, system_name
from analysis.render import (
    INTERVAL_NOTE,
    Table,
    error_bars,
    finish_figure,
    fmt,
    interval_cell,
    legend,
    new_figure,
    write_table,
)
from analysis.scores import pass_curve

EXPERIMENTS = ("passk",)
NAME = "passk"
MAX_K = 8
KEYS = ["dataset", "method", "backbone", "simulated", "judge"]


def curves(results: Results) -> pd.DataFrame:
    v = results.verdicts
    v = v[v["experiment"].isin(EXPERIMENTS)] if len(v) else v
    if v.empty:
        return pd.DataFrame(columns=[*KEYS, "k", "accuracy", "accuracy_low", "accuracy_high", "questions"])
    v = v.assign(judge=v["judge_id"].astype(str) + " (" + v["judge_model"].astype(str) + ")")
    return pass_curve(v, KEYS, MAX_K)


def table(ours: pd.DataFrame) -> Table:
    ks = [f"pass@{k}" for k in range(1, MAX_K + 1)]
    rows = []
    for (dataset, method, backbone, simulated, judge), group in ours.groupby(KEYS, dropna=False):
        by_k = group.set_index("k").reindex(range(1, MAX_K + 1))
        row = {"system": system_name(method), "dataset": dataset, "backbone": backbone_name(backbone),
               "judge": judge, "source": "ours, simulated" if simulated else "ours",
               "questions": fmt(int(group["questions"].iloc[0]))}
        rows.append({**row, **{f"pass@{k}": fmt(by_k.at[k, "accuracy"], pct=True) for k in by_k.index}})
        rows.append({**row, "source": row["source"] + ": 95% interval",
                     **{f"pass@{k}": interval_cell(by_k.at[k, "accuracy_low"], by_k.at[k, "accuracy_high"])
                        for k in by_k.index}})
    pub = published("passk")
    for (dataset, system, backbone, judge), group in pub.groupby(["dataset", "system", "backbone", "judge"]):
        acc = dict(zip(group["k"], group["accuracy_pct"]))
        rows.append({"system": system_name(system), "dataset": dataset, "backbone": backbone,
                     "judge": f"{judge} (deepseek-v4-flash)", "source": "paper", "questions": "500",
                     **{f"pass@{k}": fmt(acc.get(k), 1) for k in range(1, MAX_K + 1)}})
    notes = ["Unbiased pass@k from n attempts per question (attempt 0 greedy, then sampled); a k "
             "above the fewest attempts of any question is left out (missing).",
             "Paper: revision corrected-Mem0 8-sample run (temperature 0.7, top_p 0.95); "
             "MemForest's pass@k was published as curves only (Appendix F).", INTERVAL_NOTE]
    frame = pd.DataFrame(rows, columns=["system", "dataset", "backbone", "judge", "source", "questions", *ks])
    return Table(NAME, frame, "pass@k, k = 1..8 (%)", notes)


def figure(ours: pd.DataFrame, out: Path) -> list[Path]:
    fig, ax = new_figure(width=6.4, height=4.4)
    for (dataset, method, backbone, simulated, judge), group in ours.groupby(KEYS, dropna=False):
        label = (f"ours: {system_name(method)}, {dataset}, {backbone_name(backbone)}, {judge}"
                 + (" (simulated)" if simulated else ""))
        ax.errorbar(group["k"], 100 * group["accuracy"], fmt="o-", capsize=2, label=label,
                    yerr=error_bars(group["accuracy"], group["accuracy_low"], group["accuracy_high"]))
    pub = published("passk")
    for (dataset, system, backbone, judge), group in pub.groupby(["dataset", "system", "backbone", "judge"]):
        ax.plot(group["k"], group["accuracy_pct"], "k^--",
                label=f"paper: {system_name(system)}, {dataset}, {backbone}, {judge}")
    ax.set_xticks(range(1, MAX_K + 1))
    ax.set_xlabel("k (answers sampled per question)")
    ax.set_ylabel("pass@k (%)\nerror bars: 95% interval")
    ax.set_ylim(0, 105)
    legend(ax, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=1)
    simulated = bool(len(ours) and ours["simulated"].any())
    return finish_figure(fig, NAME, out, "pass@k", simulated=simulated, empty=ours.empty)


def make(results: Results, out: Path) -> list[Path]:
    ours = curves(results)
    return write_table(table(ours), out) + figure(ours, out)
