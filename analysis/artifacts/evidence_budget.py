"""Evidence budget: accuracy, evidence items and retrieval latency versus k, the number of units in
the final context (`method.memforest.query.final_units`, k = 5..100), for the runs of EXPERIMENTS.
The paper did not release its MemForest evidence-budget study; its only published budget control
(Mem0 on a fixed store, top-50 versus top-200) is shown beside, labelled as such. The generator-free
sweep (RECALL_EXPERIMENTS) adds retrieval recall versus k, in its own table and panel, labelled recall.
Our accuracy and recall carry their 95% intervals (bootstrap over questions), in the cells and as error
bars."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis import recall
from analysis.load import Results
from analysis.names import backbone_name, published, system_name
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
from analysis.sweeps import record_means, scores, setting_of

EXPERIMENTS = ("evidence_budget",)
RECALL_EXPERIMENTS = ("evidence_budget_recall",)
KS = ["5", "10", "20", "50", "100"]
NAME = "evidence_budget"
KEY = "method.memforest.query.final_units"


def table(acc: pd.DataFrame, means: pd.DataFrame) -> Table:
    rows = []
    for r in acc.sort_values(["method", "judge", "setting"],
                             key=lambda s: s.map(_num) if s.name == "setting" else s).itertuples():
        m = means[(means["setting"] == r.setting) & (means["method"] == r.method)
                  & (means["backbone"] == r.backbone)]
        rows.append({"system": system_name(r.method), "backbone": backbone_name(r.backbone),
                     "source": "ours, simulated" if r.simulated else "ours", "judge": r.judge, "k": r.setting,
                     "questions": fmt(r.questions),
                     "pass@1 %": fmt_interval(r.pass1, r.pass1_low, r.pass1_high, pct=True),
                     "evidence items": fmt(m["evidence_items"].iloc[0] if len(m) else None, 1),
                     "retrieval s": fmt(m["retrieve_seconds"].iloc[0] if len(m) else None, 3)})
    rows.append({"system": system_name("memforest"), "backbone": "Qwen3-30B-A3B", "source": "paper",
                 "judge": "missing", "k": "5..100", "questions": "missing",
                 "pass@1 %": "missing (not released)", "evidence items": "missing", "retrieval s": "missing"})
    for p in published("evidence_budget").itertuples():
        rows.append({"system": system_name(p.system), "backbone": p.backbone,
                     "source": "paper (fixed-store control)", "judge": f"{p.judge} (deepseek-v4-flash)",
                     "k": str(p.k), "questions": "500", "pass@1 %": fmt(p.accuracy_pct, 1),
                     "evidence items": "missing", "retrieval s": "missing"})
    notes = ["k = units in the final context (method.memforest.query.final_units).",
             "Paper: MemForest's evidence-budget study was not released (missing); the Mem0 rows "
             "are the revision's fixed-store control on LongMemEval-S (Qwen3-30B-A3B), a different system.",
             INTERVAL_NOTE]
    return Table(NAME, pd.DataFrame(rows), "Evidence budget: accuracy versus k", notes)


def _num(text: object) -> float:
    try:
        return float(str(text))
    except ValueError:
        return float("inf")


def figure(acc: pd.DataFrame, means: pd.DataFrame, rec: pd.DataFrame, out: Path) -> list[Path]:
    fig, (ax_acc, ax_lat, ax_rec) = new_figure(ncols=3, width=4.6, height=4.2)
    for (method, backbone, simulated,
         judge), group in acc.groupby(["method", "backbone", "simulated", "judge"]):
        group = group.assign(k=group["setting"].map(_num)).sort_values("k")
        label = (f"ours: {system_name(method)}, {backbone_name(backbone)}, {judge}"
                 + (" (simulated)" if simulated else ""))
        ax_acc.errorbar(group["k"], 100 * group["pass1"], fmt="o-", capsize=2, label=label,
                        yerr=error_bars(group["pass1"], group["pass1_low"], group["pass1_high"]))
    for judge, group in published("evidence_budget").groupby("judge"):
        ax_acc.plot(group["k"], group["accuracy_pct"], "k^--" if judge == "strict" else "kv:",
                    label=f"paper: Mem0 fixed store, {judge} judge")
    for (method, backbone, simulated), group in means.groupby(["method", "backbone", "simulated"]):
        group = group.assign(k=group["setting"].map(_num)).sort_values("k")
        ax_lat.plot(group["k"], 1000 * group["retrieve_seconds"], "o-",
                    label=f"ours: {system_name(method)}, {backbone_name(backbone)}"
                        + (" (simulated)" if simulated else ""))
    ax_acc.text(0.02, 0.97, "paper: MemForest's budget study not released (missing)",
                transform=ax_acc.transAxes, va="top", fontsize=7, color="grey")
    ax_acc.set_ylabel("accuracy, pass@1 (%)\nerror bars: 95% interval")
    ax_acc.set_ylim(0, 105)
    ax_lat.set_ylabel("retrieval latency per question (ms)")
    recall.plot(ax_rec, rec, _num)
    ax_rec.set_title("recall (no generator), not accuracy", fontsize=9)
    for ax in (ax_acc, ax_lat, ax_rec):
        ax.set_xscale("log")
        ax.set_xticks([5, 10, 20, 50, 100, 200], ["5", "10", "20", "50", "100", "200"])
        ax.set_xlabel("evidence budget k (units, log scale)")
        legend(ax, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=1)
    simulated = bool(len(acc) and acc["simulated"].any())
    return finish_figure(fig, NAME, out, "Evidence budget", simulated=simulated,
                         empty=acc.empty and rec.empty)


def make(results: Results, out: Path) -> list[Path]:
    settings = setting_of(results, EXPERIMENTS, KEY, lambda v: "missing" if v is None else str(v))
    acc = scores(results, settings).merge(setting_intervals(results.verdicts, settings), on=SWEEP_GROUP,
                                          how="left")
    means = record_means(results, settings, ["evidence_items", "retrieve_seconds"])
    recall_settings = setting_of(results, RECALL_EXPERIMENTS, KEY,
                                 lambda v: "missing" if v is None else str(v))
    rec = recall.by_setting(results.records, results.runs, recall_settings)
    # retrieval latency of the recall runs too (memforest_sessions: no generator)
    means = record_means(results, {**settings, **recall_settings}, ["evidence_items", "retrieve_seconds"])
    rec_table = recall.table(f"{NAME}_recall", "Evidence budget: retrieval recall versus k (no generator)",
                             rec, KS, "k")
    return (write_table(table(acc, means), out) + write_table(rec_table, out)
            + figure(acc, means, rec, out))
