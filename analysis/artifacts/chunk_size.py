"""Chunk-size sweep: turns per extraction chunk (`method.memforest.chunk.max_turns`, 1..64; 0 = the
whole session) against extraction throughput (facts/s), tokens per fact, the share of questions whose
retrieved evidence holds a gold turn (from the records), and, when measured, the share whose gold span
survives in a fact (the paper's Ent-GR: a `gold_span_kept` column in a `chunk_size.jsonl` measurement
file of the run), beside the paper's Table 8. The generator-free sweep (RECALL_EXPERIMENTS) adds
retrieval recall per chunk size, in its own table and panel, labelled recall. Our shares of questions
(gold span kept, gold turn retrieved), pass@1 and recall carry their 95% intervals (bootstrap over
questions), in the cells and as error bars."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis import recall
from analysis.load import Results
from analysis.names import backbone_name, published
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
from analysis.scores import SWEEP_GROUP, mean_intervals, setting_intervals
from analysis.sweeps import scores, setting_of

EXPERIMENTS = ("chunk_size",)
RECALL_EXPERIMENTS = ("chunk_size_recall",)
NAME = "chunk_size"
KEY = "method.memforest.chunk.max_turns"
ORDER = ["1", "2", "4", "8", "16", "32", "48", "64", "whole"]


def chunk_label(value: object) -> str:
    return "whole" if value in (0, "0", None) else str(value)


def position(label: str) -> int:
    return ORDER.index(label) if label in ORDER else len(ORDER)


def throughput(results: Results, settings: dict[str, str]) -> pd.DataFrame:
    b = results.builds
    b = b[b["run_id"].isin(settings) & b["error"].isna()] if len(b) else b
    shares = [f"{name}{end}" for name in ("gold_span_kept", "gold_turn") for end in ("", "_low", "_high")]
    cols = ["setting", "backbone", "simulated", "facts_per_second", "tokens_per_fact", *shares]
    if b.empty:
        return pd.DataFrame(columns=cols)
    stages = results.build_stages
    extract = stages[stages["stage"] == "extract"] if len(stages) else stages
    tokens = {(r.run_id, r.instance_id): r.prompt_tokens + r.completion_tokens for r in extract.itertuples()}
    b = b.assign(setting=b["run_id"].map(settings),
                 tokens=[tokens.get((r, i), 0) for r, i in zip(b["run_id"], b["instance_id"])],
                 extract_seconds=b.get("time_extract", b["build_seconds"]))
    out = b.groupby(["setting", "backbone", "simulated"], dropna=False).agg(
        facts=("facts", "sum"), seconds=("extract_seconds", "sum"), tokens=("tokens", "sum")).reset_index()
    out["facts_per_second"] = out["facts"] / out["seconds"]
    out["tokens_per_fact"] = out["tokens"] / out["facts"].where(out["facts"] > 0)
    kept = results.measurements("chunk_size")
    if len(kept) and "gold_span_kept" in kept:
        kept = kept.assign(setting=kept["run_id"].map(settings), gold=kept["gold_span_kept"].astype(float))
        out = out.merge(mean_intervals(kept, ["setting"], "gold", "gold_span_kept"), on="setting", how="left")
    else:
        out = out.assign(gold_span_kept=float("nan"), gold_span_kept_low=float("nan"),
                         gold_span_kept_high=float("nan"))
    recs = results.records
    recs = recs[recs["run_id"].isin(settings) & (recs["attempt"] == 0)] if len(recs) else recs
    if len(recs) and recs["gold_turn_retrieved"].notna().any():
        hits = recs.assign(setting=recs["run_id"].map(settings),
                           hit=recs["gold_turn_retrieved"].astype(float))
        questions = hits["run_id"].astype(str) + "/" + hits["question_id"].astype(str)
        out = out.merge(mean_intervals(hits, ["setting"], "hit", "gold_turn", questions), on="setting",
                        how="left")
    else:
        out = out.assign(gold_turn=float("nan"), gold_turn_low=float("nan"), gold_turn_high=float("nan"))
    return out[cols].sort_values("setting", key=lambda s: s.map(position))


def table(ours: pd.DataFrame, acc: pd.DataFrame) -> Table:
    pub = published("chunk_size")
    rows = []
    for chunk in sorted(set(ours["setting"]) | set(pub["chunk_turns"]), key=position):
        p = pub[pub["chunk_turns"] == chunk]
        mine = ours[ours["setting"] == chunk].to_dict("records") or [{}]
        for r in mine:
            a = acc[acc["setting"] == chunk]
            rows.append({
                "turns per chunk": chunk, "source": ("ours" + (", simulated" if r.get("simulated") else "")
                                                     + f" ({backbone_name(r.get('backbone'))})") if r
                                              else "missing",
                "gold span kept %": _share(r, "gold_span_kept") if r else "missing",
                "gold turn retrieved %": _share(r, "gold_turn") if r else "missing",
                "facts/s": fmt(r.get("facts_per_second")) if r else "missing",
                "tokens/fact": fmt(r.get("tokens_per_fact"), 0) if r else "missing",
                "pass@1 %": fmt_interval(a["pass1"].iloc[0], a["pass1_low"].iloc[0], a["pass1_high"].iloc[0],
                                         pct=True) if len(a) else "missing",
                "paper gold span kept %": fmt(p["gold_span_kept_pct"].iloc[0] if len(p) else None, 0),
                "paper facts/s": fmt(p["facts_per_second"].iloc[0] if len(p) else None),
                "paper tokens/fact": fmt(p["tokens_per_fact"].iloc[0] if len(p) else None, 0)})
    notes = ["facts/s = new facts / extraction seconds (library stage timing); tokens/fact = extraction-call "
             "tokens (prompt + output) / new facts. 'whole' = one chunk per session (max_turns 0).",
             "Paper: submission Table 8 (raw-fact extraction on concatenated long sessions, Qwen3-30B-A3B); "
             "'gold span kept' is its Ent-GR. 'gold turn retrieved' (ours only) = questions whose retrieved "
             "evidence includes a gold turn: a retrieval measure, not the same as Ent-GR.", INTERVAL_NOTE]
    return Table(NAME, pd.DataFrame(rows), "Chunk-size sweep", notes)


def _share(row: dict[str, object], name: str) -> str:
    return fmt_interval(row.get(name), row.get(f"{name}_low"), row.get(f"{name}_high"), pct=True)


def figure(ours: pd.DataFrame, rec: pd.DataFrame, out: Path) -> list[Path]:
    fig, (ax_rate, ax_kept, ax_rec) = new_figure(ncols=3, width=4.6, height=4.2)
    pub = published("chunk_size")
    px = [position(c) for c in pub["chunk_turns"]]
    for (backbone, simulated), group in ours.groupby(["backbone", "simulated"], dropna=False):
        xs = [position(c) for c in group["setting"]]
        label = f"ours, {backbone_name(backbone)}" + (" (simulated)" if simulated else "")
        ax_rate.plot(xs, group["facts_per_second"], "o-", label=label)
        for name, style, what in (("gold_span_kept", "o-", "gold span kept"),
                                  ("gold_turn", "s--", "gold turn retrieved")):
            if group[name].notna().any():
                ax_kept.errorbar(xs, 100 * group[name].astype(float), fmt=style, capsize=2,
                                 yerr=error_bars(group[name], group[f"{name}_low"], group[f"{name}_high"]),
                                 label=f"{label}: {what}")
    ax_rate.plot(px, pub["facts_per_second"], "k^--", label="paper (Qwen3-30B-A3B)")
    ax_kept.plot(px, pub["gold_span_kept_pct"], "k^--",
                 label="paper (Qwen3-30B-A3B): gold span kept (Ent-GR)")
    if ours.empty or ours["gold_span_kept"].isna().all():
        ax_kept.text(0.5, 0.3, "ours: gold-span retention not measured (missing)",
                     transform=ax_kept.transAxes, ha="center", fontsize=8, color="grey")
    ax_rate.set_yscale("log")
    ax_rate.set_ylabel("extraction throughput (facts / s, log scale)")
    ax_kept.set_ylabel("questions (%)\nerror bars: 95% interval")
    ax_kept.set_ylim(0, 105)
    recall.plot(ax_rec, rec, position)
    ax_rec.set_title("recall (no generator), not accuracy", fontsize=9)
    for ax in (ax_rate, ax_kept, ax_rec):
        ax.set_xticks(range(len(ORDER)), ORDER, fontsize=8)
        ax.set_xlabel("turns per extraction chunk")
        legend(ax, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=1)
    simulated = bool(len(ours) and ours["simulated"].any())
    return finish_figure(fig, NAME, out, "Chunk-size sweep", simulated=simulated,
                         empty=ours.empty and rec.empty)


def make(results: Results, out: Path) -> list[Path]:
    settings = setting_of(results, EXPERIMENTS, KEY, chunk_label, default=2)
    acc = scores(results, settings).merge(setting_intervals(results.verdicts, settings), on=SWEEP_GROUP,
                                          how="left")
    acc = acc.sort_values("judge").drop_duplicates("setting")  # one judge's pass@1 per setting
    ours = throughput(results, settings)
    recall_settings = setting_of(results, RECALL_EXPERIMENTS, KEY, chunk_label, default=2)
    rec = recall.by_setting(results.records, results.runs, recall_settings)
    rec_table = recall.table(f"{NAME}_recall", "Chunk-size sweep: retrieval recall (no generator)", rec,
                             [o for o in ORDER if o != "48"], "turns per cell",
                             note="The evidence budget counts units (cells): larger cells put more turns "
                                  "into the same budget, so turn recall rises with cell size; the paper's "
                                  "Table 8 measures what extraction keeps, not what retrieval finds.")
    return write_table(table(ours, acc), out) + write_table(rec_table, out) + figure(ours, rec, out)
