"""The shared shape of the two ablations on the paper's 60-question subset: accuracy (pass@n, n = the
attempts per question, 8 in the paper) and pass@1 per setting, one row per setting the paper or we
ran, the paper's value beside; a bar chart with the paper's values as markers. Our figures carry their
95% intervals (bootstrap over questions), in the cells and as error bars."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.load import Results
from analysis.names import backbone_name, system_name
from analysis.render import (
    INTERVAL_NOTE,
    Table,
    error_bars,
    finish_figure,
    fmt,
    fmt_interval,
    legend,
    new_figure,
    write_table,
)
from analysis.scores import SWEEP_GROUP, setting_intervals
from analysis.sweeps import scores, setting_of


@dataclass(frozen=True)
class Ablation:
    name: str
    title: str
    experiments: tuple[str, ...]
    key: str
    published: pd.DataFrame  # columns: setting, accuracy_pct, source
    label: object  # config value -> setting label
    display: dict[str, str]  # setting label -> text shown
    default: object = None
    note: str = ""


def table(ab: Ablation, acc: pd.DataFrame) -> Table:
    pub = ab.published.set_index("setting")
    order = list(pub.index) + sorted(set(acc["setting"]) - set(pub.index))
    rows = []
    for setting in order:
        mine = acc[acc["setting"] == setting].to_dict("records") or [None]
        paper = pub["accuracy_pct"].get(setting)
        for r in mine:
            rows.append({"setting": ab.display.get(setting, setting),
                         "source": "missing" if r is None else
                         f"ours, {system_name(r['method'])}, {r['dataset']}, {backbone_name(r['backbone'])}"
                         + (", simulated" if r["simulated"] else ""),
                         "judge": "missing" if r is None else r["judge"],
                         "questions": "missing" if r is None else fmt(r["questions"]),
                         "pass@n %": "missing" if r is None else f"{_cell(r, 'passn')} (n={r['n']})",
                         "pass@1 %": "missing" if r is None else _cell(r, "pass1"),
                         "paper pass@8 %": fmt(paper, 1)})
    notes = ["pass@n with n = the attempts per question of the run (the paper used n = 8).",
             f"Paper: {ab.published['source'].iloc[0]}; source analysis/published/{ab.name}.csv.",
             INTERVAL_NOTE, ab.note]
    return Table(ab.name, pd.DataFrame(rows), ab.title, [n for n in notes if n])


def _cell(row: dict[str, object], name: str) -> str:
    return fmt_interval(row[name], row[f"{name}_low"], row[f"{name}_high"], pct=True)


def figure(ab: Ablation, acc: pd.DataFrame, out: Path) -> list[Path]:
    pub = ab.published
    order = list(pub["setting"]) + sorted(set(acc["setting"]) - set(pub["setting"]))
    fig, ax = new_figure(width=7.2, height=4.4)
    series = list(acc.groupby(["method", "dataset", "backbone", "simulated", "judge"], dropna=False))
    width = 0.8 / max(1, len(series))
    for i, ((method, dataset, backbone, simulated, judge), group) in enumerate(series):
        mine = group.drop_duplicates("setting", keep="last").set_index("setting").reindex(order)
        n = int(group["n"].max())
        questions = int(group["questions"].max())
        xs = np.arange(len(order)) + (i - (len(series) - 1) / 2) * width
        heights = [100 * float(v) for v in mine["passn"]]
        ax.bar(xs, heights, width, hatch="//" if simulated else "",
               yerr=error_bars(mine["passn"], mine["passn_low"], mine["passn_high"]),
               error_kw={"elinewidth": 0.8, "capsize": 2},
               label=f"ours: {system_name(method)}, {dataset} ({questions} questions), "
                     f"{backbone_name(backbone)}, {judge}, pass@{n}"
               + (" (simulated)" if simulated else ""))
        for x, h in zip(xs, heights):  # values inside the bars, clear of the paper's markers
            if np.isnan(h):
                ax.text(x, 0, "missing", ha="center", va="bottom", fontsize=6, rotation=90)
            else:
                ax.text(x, max(h - 1.5, 1), f"{h:.0f}", ha="center", va="top" if h > 8 else "bottom",
                        fontsize=6, color="white" if h > 8 else "black",
                        rotation=90 if len(series) > 2 else 0)
    paper = dict(zip(pub["setting"], pub["accuracy_pct"]))
    ax.plot(range(len(order)), [paper.get(s, np.nan) for s in order], "k_", markersize=18, markeredgewidth=2,
            label="paper: 60-question LongMemEval-S subset, Qwen3-30B-A3B, pass@8")
    ax.set_xticks(range(len(order)), [textwrap.fill(ab.display.get(s, s), 14) for s in order], fontsize=7)
    ax.set_ylim(0, 105)
    ax.set_ylabel("accuracy, pass@n (%)\nerror bars: 95% interval")
    legend(ax, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=1)
    simulated = bool(len(acc) and acc["simulated"].any())
    return finish_figure(fig, ab.name, out, ab.title, simulated=simulated, empty=acc.empty)


def make(ab: Ablation, results: Results, out: Path) -> list[Path]:
    settings = setting_of(results, ab.experiments, ab.key, ab.label, ab.default)  # type: ignore[arg-type]
    acc = scores(results, settings).merge(setting_intervals(results.verdicts, settings), on=SWEEP_GROUP,
                                          how="left")
    return write_table(table(ab, acc), out) + figure(ab, acc, out)
