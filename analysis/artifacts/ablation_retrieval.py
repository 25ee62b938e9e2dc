"""Retrieval ablation (the paper's Table 7): the six retrieval settings (`method.memforest.query.mode`:
flat top-k facts, root summaries only, embedding browse, embedding browse + planner, LLM browse, LLM
browse + planner), scored on the 60-question LongMemEval-S subset. The generator-free modes (flat top-k
cells, the no-trees setting of a memory without facts; root summaries only; embedding browse) add
retrieval recall (RECALL_EXPERIMENTS) in their own table and a figure whose recall panel stands beside
the paper's accuracy, labelled recall, our recall with its 95% intervals as error bars."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analysis import recall
from analysis.artifacts import ablation
from analysis.load import Results
from analysis.names import QUERY_MODES, published, system_name
from analysis.render import error_bars, finish_figure, legend, new_figure, write_table
from analysis.sweeps import setting_of

EXPERIMENTS = ("ablation_retrieval", "retrieval_ablation")
RECALL_EXPERIMENTS = ("ablation_retrieval_recall",)
GENERATOR_FREE = ["flat_cells", "root", "embed"]
# `flat` over cells (query.flat_units=cells) is told apart from the paper's flat top-k facts
RECALL_MODES = {**QUERY_MODES, "flat_cells": "flat top-k cells (no trees)"}


def spec() -> ablation.Ablation:
    pub = published("ablation_retrieval").rename(columns={"mode": "setting"})
    return ablation.Ablation(
        name="ablation_retrieval", title="Retrieval ablation", experiments=EXPERIMENTS,
        key="method.memforest.query.mode", published=pub, label=lambda v: str(v or "embed"),
        display=QUERY_MODES, default="embed")


def recall_figure(rec: pd.DataFrame, out: Path) -> list[Path]:
    """The paper's accuracy per mode (left) beside our retrieval recall of the generator-free modes."""
    pub = published("ablation_retrieval")
    order = list(pub["mode"])
    fig, (ax_acc, ax_rec) = new_figure(ncols=2, width=4.8, height=4.4)
    ax_acc.bar(range(len(order)), pub["accuracy_pct"], color="grey",
               label="paper: 60-question LongMemEval-S subset, Qwen3-30B-A3B, pass@8")
    ax_acc.set_xticks(range(len(order)), [QUERY_MODES.get(m, m) for m in order], rotation=30, ha="right",
                      fontsize=7)
    ax_acc.set_ylabel("accuracy, pass@8 (%)")
    ax_acc.set_ylim(0, 105)
    series = list(rec.groupby(["dataset", "kind", "method"], dropna=False))
    width = 0.8 / max(1, 2 * len(series))
    for i, ((dataset, kind, method), group) in enumerate(series):
        values = group.drop_duplicates("setting", keep="last").set_index("setting").reindex(GENERATOR_FREE)
        turn = (("recall_turn", "evidence recall") if kind == "locomo"
                else ("recall_turn_any", "turn recall_any"))
        for j, (column, what) in enumerate((("recall_session_any", "session recall_any"), turn)):
            xs = np.arange(len(GENERATOR_FREE)) + (2 * i + j - (2 * len(series) - 1) / 2) * width
            heights = [100 * float(v) for v in values[column]]
            ax_rec.bar(xs, heights, width, hatch="" if j == 0 else "//",
                       yerr=error_bars(values[column], values[f"{column}_low"], values[f"{column}_high"]),
                       error_kw={"elinewidth": 0.8, "capsize": 2},
                       label=f"ours: {system_name(method)}, {dataset}: {what}")
    ax_rec.set_xticks(range(len(GENERATOR_FREE)), [RECALL_MODES.get(m, m) for m in GENERATOR_FREE],
                      fontsize=7, rotation=20, ha="right")
    ax_rec.set_ylabel(f"{recall.LABEL}\nerror bars: 95% interval")
    ax_rec.set_ylim(0, 105)
    ax_rec.set_title("recall (no generator), not accuracy", fontsize=9)
    if rec.empty:
        ax_rec.text(0.5, 0.5, "no recall runs (missing)", transform=ax_rec.transAxes, ha="center",
                    color="grey")
    for ax in (ax_acc, ax_rec):
        legend(ax, loc="upper center", bbox_to_anchor=(0.5, -0.42), ncol=1)
    return finish_figure(fig, "ablation_retrieval_recall", out, "Retrieval ablation: accuracy (paper) and "
                         "recall (ours, generator-free modes)", empty=rec.empty)


def recall_settings(results: Results) -> dict[str, str]:
    """Run id -> its mode, `flat_cells` for flat over cells."""
    modes = setting_of(results, RECALL_EXPERIMENTS, "method.memforest.query.mode",
                       lambda v: str(v or "embed"), "embed")
    units = setting_of(results, RECALL_EXPERIMENTS, "method.memforest.query.flat_units",
                       lambda v: str(v or "facts"), "facts")
    return {run: "flat_cells" if mode == "flat" and units.get(run) == "cells" else mode
            for run, mode in modes.items()}


def make(results: Results, out: Path) -> list[Path]:
    rec = recall.by_setting(results.records, results.runs, recall_settings(results))
    rec_table = recall.table("ablation_retrieval_recall", "Retrieval ablation: recall of the generator-free "
                             "modes (no generator)", rec, GENERATOR_FREE, "mode", RECALL_MODES)
    return ablation.make(spec(), results, out) + write_table(rec_table, out) + recall_figure(rec, out)
