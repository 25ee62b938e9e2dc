"""Mechanism scaling: (a) summary-refresh LLM calls of eager per-insert refresh versus batched
(mark-dirty, refresh once) as facts per tree grow, per fan-out; (b) level-parallel refresh speedup
versus the number of parallel requests P, per tree size. Beside the paper's Figure 6a and 6c (values
read off its plots).

Inputs: the harness's `scaling` task (scaling.jsonl, one row per built memory: leaves, trees,
eager_calls, batched_calls, refresh_s {P: seconds}; its level-parallel times list-schedule the build's
recorded summary calls on P slots), and/or rows of the same meaning from a measurement file or
microbenchmark suite:
- `refresh_calls`: fanout, facts, eager_calls, batched_calls
- `level_parallel`: facts, parallel, seconds (refresh wall time); speedup = seconds at P=1 / seconds"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis.load import Results
from analysis.names import published
from analysis.render import Table, finish_figure, fmt, legend, new_figure, write_table

NAME = "mechanism_scaling"


def source(results: Results, name: str) -> pd.DataFrame:
    frames = [f for f in (results.measurements(name), results.bench(name)) if len(f)]
    if not frames:
        return pd.DataFrame()
    df = pd.concat(frames, ignore_index=True)
    df["simulated"] = df["simulated"].fillna(False).astype(bool) if "simulated" in df else False
    return df


def scaling_rows(results: Results) -> pd.DataFrame:
    df = results.measurements("scaling")
    return df[df["eager_calls"].notna()] if len(df) and "eager_calls" in df else pd.DataFrame()


def refresh_calls(results: Results) -> pd.DataFrame:
    df = source(results, "refresh_calls")
    task = scaling_rows(results)
    if len(task):  # a whole memory: trees of every fan-out
        task = task.assign(fanout="memory",
                           facts=task["leaves"])[["fanout", "facts", "eager_calls", "batched_calls",
                                                                    "simulated"]]
        df = pd.concat([df, task], ignore_index=True) if len(df) else task
    if df.empty:
        return pd.DataFrame(columns=["fanout", "facts", "eager_calls", "batched_calls", "ratio"])
    df = df.assign(ratio=df["eager_calls"] / df["batched_calls"], fanout=df["fanout"].astype(str))
    return df.sort_values(["fanout", "facts"], key=lambda s: s.map(_order) if s.name == "fanout" else s)


def _order(fanout: str) -> float:
    return float(fanout) if fanout.isdigit() else float("inf")


def level_parallel(results: Results) -> pd.DataFrame:
    df = source(results, "level_parallel")
    task = scaling_rows(results)
    rows = []
    for r in task.to_dict("records"):
        for key, seconds in r.items():
            if key.startswith("refresh_s.") and seconds is not None and not pd.isna(seconds):
                rows.append({"facts": r["leaves"], "parallel": int(key.split(".", 1)[1]), "seconds": seconds,
                             "simulated": bool(r.get("simulated")), "basis": "scheduled from recorded calls"})
    if rows:
        df = pd.concat([df, pd.DataFrame(rows)], ignore_index=True) if len(df) else pd.DataFrame(rows)
    if df.empty:
        return pd.DataFrame(columns=["facts", "parallel", "seconds", "speedup", "simulated", "basis"])
    if "basis" not in df:
        df["basis"] = "measured"
    df["basis"] = df["basis"].fillna("measured")
    base = df[df["parallel"] == 1].groupby("facts")["seconds"].first()
    df = df.assign(speedup=df["facts"].map(base) / df["seconds"])
    return df.sort_values(["facts", "parallel"])


def tables(calls: pd.DataFrame, parallel: pd.DataFrame) -> list[Table]:
    pub_calls, pub_par = published("refresh_calls"), published("level_parallel")
    rows = []
    for r in calls.itertuples():
        p = pub_calls[(pub_calls["fanout"].astype(str) == r.fanout)
                      & (pub_calls["facts_per_tree"] == r.facts)]
        rows.append({"fan-out k": "every tree of a built memory" if r.fanout == "memory" else r.fanout,
                     "facts (tree or memory)": fmt(int(r.facts)), "eager calls": fmt(int(r.eager_calls)),
                     "batched calls": fmt(int(r.batched_calls)),
                     "eager / batched": f"{r.ratio:.1f}×",
                     "paper eager / batched": f"{p['eager_over_batched'].iloc[0]:.0f}×" if len(p)
                         else "missing"})
    for p in pub_calls.itertuples():
        if not ((calls["fanout"] == str(p.fanout)) & (calls["facts"] == p.facts_per_tree)).any():
            rows.append({"fan-out k": str(p.fanout), "facts (tree or memory)": fmt(int(p.facts_per_tree)),
                         "eager calls": "missing", "batched calls": "missing", "eager / batched": "missing",
                         "paper eager / batched": f"{p.eager_over_batched:.0f}×"})
    first = Table("mechanism_refresh_calls", pd.DataFrame(rows),
                  "Summary-refresh calls: eager per-insert versus batched",
                  ["Calls = internal nodes re-summarised: after every insert (eager) or once "
                   "after all inserts (batched); for a built memory, summed over its trees, "
                   "facts = its leaves.",
                   "Paper: submission Figure 6a, values read off the plot (approximate)."])
    rows = []
    for r in parallel.itertuples():
        p = pub_par[(pub_par["facts_per_tree"] == r.facts) & (pub_par["parallel_requests"] == r.parallel)]
        rows.append({"facts (tree or memory)": fmt(int(r.facts)), "parallel requests P": fmt(int(r.parallel)),
                     "refresh s": fmt(r.seconds, 3), "speedup vs P=1": f"{r.speedup:.2f}×",
                     "run": r.basis + (", simulated" if r.simulated else ""),
                     "paper speedup": f"{p['speedup'].iloc[0]:.1f}×" if len(p) else "missing"})
    for p in pub_par.itertuples():
        if not ((parallel["facts"] == p.facts_per_tree)
                & (parallel["parallel"] == p.parallel_requests)).any():
            rows.append({"facts (tree or memory)": fmt(int(p.facts_per_tree)),
                         "parallel requests P": str(p.parallel_requests), "refresh s": "missing",
                         "speedup vs P=1": "missing", "run": "missing", "paper speedup": f"{p.speedup:.1f}×"})
    second = Table("mechanism_level_parallel", pd.DataFrame(rows),
                   "Level-parallel refresh: speedup versus parallel requests",
                   ["Speedup = refresh time at P=1 / at P, same tree or memory; for a built memory the times "
                    "list-schedule its recorded summary calls level by level on P slots.",
                    "Paper: submission Figure 6c (fan-out 10), plateaus read off the plot (approximate)."])
    return [first, second]


def figure(calls: pd.DataFrame, parallel: pd.DataFrame, out: Path) -> list[Path]:
    fig, (ax_calls, ax_par) = new_figure(ncols=2, width=5.4, height=4.4)
    for fanout, group in sorted(calls.groupby("fanout"), key=lambda item: _order(str(item[0]))):
        label = "ours, built memories (all trees)" if fanout == "memory" else f"ours, k={fanout}"
        ax_calls.plot(group["facts"], group["ratio"], "o-" if fanout != "memory" else "D", label=label)
    for fanout, group in published("refresh_calls").groupby("fanout"):
        ax_calls.plot(group["facts_per_tree"], group["eager_over_batched"], "^--", color="black", alpha=0.6,
                      label=f"paper, k={int(fanout)} (read off plot)")
    ax_calls.set_xscale("log")
    ax_calls.set_xlabel("facts per tree, or leaves of a memory (log scale)")
    ax_calls.set_ylabel("eager / batched refresh calls (×)")
    ax_calls.set_title("refresh calls", fontsize=9)
    for (facts, basis), group in parallel.groupby(["facts", "basis"]):
        sim = bool(group["simulated"].any())
        ax_par.plot(group["parallel"], group["speedup"], "o-",
                    label=f"ours, {int(facts):,} facts, {basis}" + (" (simulated)" if sim else ""))
    pub = published("level_parallel")
    ax_par.plot(pub["parallel_requests"], pub["speedup"], "k^", label="paper at P=128 (read off plot)")
    for r in pub.itertuples():
        ax_par.annotate(f"{r.facts_per_tree:,} facts", (r.parallel_requests, r.speedup), fontsize=6,
                        xytext=(4, 0), textcoords="offset points", va="center")
    ax_par.set_xscale("log", base=2)
    ticks = [1, 2, 4, 8, 16, 32, 64, 128, 256]
    ax_par.set_xticks(ticks, [str(t) for t in ticks])
    ax_par.set_xlabel("parallel requests P (log scale)")
    ax_par.set_ylabel("refresh speedup over P=1 (×)")
    ax_par.set_title("level-parallel refresh", fontsize=9)
    for ax in (ax_calls, ax_par):
        legend(ax, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=1)
    simulated = bool(len(parallel) and parallel["simulated"].any())
    return finish_figure(fig, NAME, out, "Mechanism scaling", simulated=simulated,
                         empty=calls.empty and parallel.empty)


def make(results: Results, out: Path) -> list[Path]:
    calls, parallel = refresh_calls(results), level_parallel(results)
    paths: list[Path] = []
    for table in tables(calls, parallel):
        paths += write_table(table, out)
    return paths + figure(calls, parallel, out)
