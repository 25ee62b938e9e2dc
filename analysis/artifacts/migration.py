"""Migration: merging N materialised forests versus writing all their sessions sequentially into one
forest (time, speedup, facts, trees), beside the paper's Figure 5 and Table 10.

Rows come from a `migration.jsonl` measurement file in a run directory (one row per N) or from the
`merge_speed` microbenchmark; the columns read are the forest count (`forests` or `n`), the sequential
and merge seconds (`sequential_seconds`/`sequential_s`, `merge_seconds`/`merge_s`), and the fact and
tree counts (`facts_sequential`, `facts_merged`, `trees_sequential`, `trees_merged`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from analysis.load import Results
from analysis.names import backbone_name, published
from analysis.render import Table, finish_figure, fmt, legend, new_figure, write_table

NAME = "migration"
ALIASES = {"n": "forests", "sequential_s": "sequential_seconds", "merge_s": "merge_seconds"}
COUNTS = ("facts_sequential", "facts_merged", "trees_sequential", "trees_merged")


def rows(results: Results) -> pd.DataFrame:
    frames = []
    for df in (results.measurements("migration"), results.bench("merge_speed")):
        if df.empty:
            continue
        df = df.rename(columns={k: v for k, v in ALIASES.items() if k in df and v not in df})
        if "forests" not in df:
            continue
        for column in ("run_id", "backbone"):
            if column not in df:
                df[column] = df.get("source_file", "microbenchmark") if column == "run_id" else None
        frames.append(df)
    if not frames:
        return pd.DataFrame(columns=["forests", "sequential_seconds", "merge_seconds", "speedup", "run_id"])
    df = pd.concat(frames, ignore_index=True)
    if "speedup" not in df:
        df["speedup"] = pd.NA
    df["speedup"] = df["speedup"].fillna(df["sequential_seconds"] / df["merge_seconds"])
    return df.sort_values(["run_id", "forests"])


def table(ours: pd.DataFrame) -> Table:
    pub = published("migration")
    out = []
    forests = sorted(set(ours["forests"].astype(int)) | set(pub["forests"]))
    for n in forests:
        p = pub[pub["forests"] == n]
        mine: list[dict | None] = list(ours[ours["forests"].astype(int) == n].to_dict("records")) or [None]
        for r in mine:
            def get(key: str, r: dict | None = r) -> object:
                return r.get(key) if r is not None else None

            out.append({
                "N forests": str(n), "source": "missing" if r is None else run_label(r),
                "sequential s": fmt(get("sequential_seconds")), "merge s": fmt(get("merge_seconds")),
                "speedup": fmt(get("speedup")) + ("×" if r is not None else ""),
                "paper speedup": fmt(p["speedup"].iloc[0] if len(p) else None) + ("×" if len(p) else ""),
                "facts seq / merged": pair(get("facts_sequential"), get("facts_merged")),
                "paper facts": pair(*(p[c].iloc[0] if len(p) else None for c in COUNTS[:2])),
                "trees seq / merged": pair(get("trees_sequential"), get("trees_merged")),
                "paper trees": pair(*(p[c].iloc[0] if len(p) else None for c in COUNTS[2:])),
            })
    notes = ["Sequential = cumulative time writing every instance's sessions into one forest; "
             "merge = composing the N materialised forests. Speedup = sequential / merge.",
             "Paper: submission Figure 5 (speedups) and Table 10 (facts, trees), LongMemEval instances, "
             "Qwen3-30B-A3B; no QA was run on merged states."]
    return Table(NAME, pd.DataFrame(out), "Migration: merging N forests versus sequential write", notes)


def run_label(row: dict) -> str:
    backbone = row.get("backbone")
    label = f"ours ({backbone_name(backbone)})" if isinstance(backbone, str) else "ours (microbenchmark)"
    return label + (", simulated" if row.get("simulated") is True else "")


def pair(a: Any, b: Any) -> str:
    return ("missing" if a is None or b is None or pd.isna(a) or pd.isna(b)
            else f"{fmt(int(a))} / {fmt(int(b))}")


def figure(ours: pd.DataFrame, out: Path) -> list[Path]:
    fig, (ax_speed, ax_count) = new_figure(ncols=2, width=4.6, height=4.2)
    pub = published("migration")
    for _, group in ours.groupby("run_id"):
        row = group.iloc[0].to_dict()
        ax_speed.plot(group["forests"], group["speedup"], "o-", label=run_label(row))
        if {"facts_sequential", "facts_merged"} <= set(group):
            ax_count.plot(group["forests"], group["facts_merged"] / group["facts_sequential"], "o-",
                          label=f"{run_label(row)}: facts")
            ax_count.plot(group["forests"], group["trees_merged"] / group["trees_sequential"], "s--",
                          label=f"{run_label(row)}: trees")
    ax_speed.plot(pub["forests"], pub["speedup"], "k^--", label="paper (Qwen3-30B-A3B)")
    ax_count.plot(pub["forests"], pub["facts_merged"] / pub["facts_sequential"], "k^--", label="paper: facts")
    ax_count.plot(pub["forests"], pub["trees_merged"] / pub["trees_sequential"], "kv:", label="paper: trees")
    ax_speed.axhline(1.0, color="grey", linewidth=0.8)
    ax_speed.set_xlabel("N forests merged")
    ax_speed.set_ylabel("speedup over sequential write (×, log scale)")
    ax_speed.set_yscale("log")  # one forest "merges" by a copy: its speedup is orders above the rest
    ax_count.set_xlabel("N forests merged")
    ax_count.set_ylabel("merged / sequential count (ratio)")
    ax_count.axhline(1.0, color="grey", linewidth=0.8)
    for ax in (ax_speed, ax_count):
        ax.set_xticks(range(1, 9))
        legend(ax, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=1)
    simulated = bool(len(ours) and "simulated" in ours and (ours["simulated"] == True).any())  # noqa: E712
    return finish_figure(fig, NAME, out, "Migration: merge versus sequential write", simulated=simulated,
                         empty=ours.empty)


def make(results: Results, out: Path) -> list[Path]:
    ours = rows(results)
    return write_table(table(ours), out) + figure(ours, out)
