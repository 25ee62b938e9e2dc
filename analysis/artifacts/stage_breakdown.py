"""Stage breakdown of MemForest's write path: share of build time and of LLM tokens per stage
(extract; canonicalise + route; refresh + index; persistence), beside the paper's Figure 7.

Time comes from the library's stage timings in each build row (`system.timings`); calls and tokens from
the call log's per-stage totals (`llm.by_stage`), which for a simulated run (every call logged by the
harness's proxy as `chat`) are split by the prompt kind the latency-model server recorded for each call
(`Results.build_stages`). Reads MemForest builds of the experiments in EXPERIMENTS."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis.load import Results
from analysis.names import backbone_name, published, system_name
from analysis.render import Table, finish_figure, fmt, new_figure, write_table
from analysis.rows import PROMPT_STAGES

EXPERIMENTS = ("stage_breakdown", "write_path")
NAME = "stage_breakdown"
STAGES = {  # paper stage -> the library's timing laps
    "extract": ("chunk", "extract"),
    "canonicalise_route": ("embed", "canonicalize", "route"),
    "refresh_index": ("refresh", "index"),
    "persistence": ("commit",),
}
# the library's call stage -> paper stage; any other stage (browse, plan, answer, unattributed chat): other
CALL_STAGES = {"extract": "extract", "dedup": "canonicalise_route", "summarize": "refresh_index"}
LABELS = {"extract": "extract", "canonicalise_route": "canonicalise + route",
          "refresh_index": "refresh + index", "persistence": "persistence", "other": "other"}
COLORS = {"extract": "tab:blue", "canonicalise_route": "tab:orange", "refresh_index": "tab:green",
          "persistence": "tab:red", "other": "tab:grey"}


def time_shares(builds: pd.DataFrame) -> pd.DataFrame:
    """Seconds per instance and share of the summed stage time, per (method, backbone, simulated, stage)."""
    rows = []
    for (method, backbone, simulated), group in builds.groupby(["method", "backbone", "simulated"],
                                                               dropna=False):
        seconds = {stage: sum(group[f"time_{lap}"].fillna(0).sum() for lap in laps if f"time_{lap}" in group)
                   for stage, laps in STAGES.items()}
        total = sum(seconds.values())
        for stage, value in seconds.items():
            rows.append({"method": method, "backbone": backbone, "simulated": simulated, "stage": stage,
                         "seconds": value / len(group), "share": value / total if total else None})
    return pd.DataFrame(rows, columns=["method", "backbone", "simulated", "stage", "seconds", "share"])


def token_shares(stages: pd.DataFrame) -> pd.DataFrame:
    if stages.empty:
        return pd.DataFrame(columns=["method", "backbone", "simulated", "stage", "calls", "token_share"])
    df = stages.assign(stage=stages["stage"].map(lambda s: CALL_STAGES.get(s, "other")),
                       tokens=stages["prompt_tokens"].fillna(0) + stages["completion_tokens"].fillna(0))
    keys = ["method", "backbone", "simulated"]
    df["build"] = df["run_id"] + "/" + df["instance_id"]
    out = df.groupby([*keys, "stage"], dropna=False).agg(calls=("calls", "sum"),
                                                         tokens=("tokens", "sum")).reset_index()
    builds = df.groupby(keys, dropna=False)["build"].nunique().rename("builds").reset_index()
    out = out.merge(builds, on=keys)
    out["calls"] = out["calls"] / out["builds"]
    out["token_share"] = out["tokens"] / out.groupby(keys, dropna=False)["tokens"].transform("sum")
    return out


def of_build(tokens: pd.DataFrame, method: str, backbone: str, simulated: bool) -> pd.DataFrame:
    """The token-share rows of one (method, backbone, simulated) group."""
    if tokens.empty:
        return tokens
    return tokens[(tokens["method"] == method) & (tokens["backbone"] == backbone)
                  & (tokens["simulated"] == simulated)]


def prompt_stage_note() -> str:
    """Which prompt kinds count for which paper stage, e.g. `extract_facts -> extract`."""
    named = [f"{prompt} -> {LABELS[CALL_STAGES[stage]]}" for prompt, stage in PROMPT_STAGES.items()
             if stage in CALL_STAGES]
    rest = [prompt for prompt, stage in PROMPT_STAGES.items() if stage not in CALL_STAGES]
    return "; ".join([*named, f"{', '.join(rest)} and any other kind -> other"])


FOLDED = "n/a (folded)"


def table(times: pd.DataFrame, tokens: pd.DataFrame) -> Table:
    pub = published("stage_breakdown")
    rows = []
    groups = times.groupby(["method", "backbone", "simulated"], dropna=False) if len(times) else []
    for (method, backbone, simulated), group in groups:
        tok = of_build(tokens, method, backbone, simulated)
        attributed = bool(len(tok) and set(tok["stage"]) - {"other"})  # else every call is unattributed
        for r in group.itertuples():
            t = tok[tok["stage"] == r.stage] if attributed else None
            p = pub[(pub["stage"] == r.stage) & (pub["backbone"] == "Qwen3-30B-A3B")]
            rows.append({"system": system_name(method), "backbone": backbone_name(backbone),
                         "run": "simulated" if simulated else "real", "stage": LABELS[r.stage],
                         "s / instance": fmt(r.seconds, 3), "time share %": fmt(r.share, pct=True),
                         "LLM calls / instance": "missing" if t is None
                             else fmt(t["calls"].sum() if len(t) else 0.0, 1),
                         "token share %": "missing" if t is None
                             else fmt(t["token_share"].sum() if len(t) else 0.0, pct=True),
                         # the paper folds persistence into its three stages: no figure of its own
                         "paper time share % (30B)": FOLDED if r.stage == "persistence" and not len(p)
                             else fmt(p["latency_share_pct"].iloc[0] if len(p) else None, 1),
                         "paper token share % (30B)": FOLDED if r.stage == "persistence" and not len(p)
                             else fmt(p["token_share_pct"].iloc[0] if len(p) else None, 1)})
    notes = ["Time share = the stage's wall time over the summed stage times of the build "
             "(library stage timings).",
             "Calls and tokens per stage come from the call log's stage names. In a simulated run the "
             "logging proxy records every call under 'chat'; its calls are assigned to stages by the prompt "
             f"kind the latency-model server recorded per call (served_calls.jsonl: {prompt_stage_note()}), "
             "each to the build whose span of proxied calls it arrived in. A simulated run without "
             "served_calls.jsonl and llm_calls.jsonl cannot be split: missing.",
             "Paper: submission Figure 7 (LongMemEval-S, Qwen3-30B-A3B); it folds persistence into its three "
             "stages ('Route' = canonicalisation + routing, 'TreeBuild' = summaries + index): n/a (folded)."]
    return Table(NAME, pd.DataFrame(rows), "Write-path stage breakdown (MemForest)", notes)


def figure(times: pd.DataFrame, tokens: pd.DataFrame, out: Path) -> list[Path]:
    fig, (ax_time, ax_tok) = new_figure(ncols=2, width=4.8, height=3.8)
    pub = published("stage_breakdown")
    bars: list[tuple[str, dict[str, float], dict[str, float]]] = []
    for (method, backbone, simulated), group in times.groupby(["method", "backbone", "simulated"],
                                                              dropna=False):
        tok = of_build(tokens, method, backbone, simulated)
        label = f"{system_name(method)}\n{backbone_name(backbone)}" + ("\n(simulated)" if simulated else "")
        attributed = set(tok["stage"]) - {"other"}
        bars.append((label, dict(zip(group["stage"], group["share"].fillna(0))),
                     dict(zip(tok["stage"], tok["token_share"])) if attributed else {}))
    for backbone, group in pub.groupby("backbone"):
        bars.append((f"paper\n{backbone}", dict(zip(group["stage"], group["latency_share_pct"] / 100)),
                     dict(zip(group["stage"], group["token_share_pct"] / 100))))
    shown: set[str] = set()
    for ax, index, title in ((ax_time, 1, "share of build time"), (ax_tok, 2, "share of LLM tokens")):
        left = [0.0] * len(bars)
        for stage in [*STAGES, "other"]:
            widths = [100 * (b[1] if index == 1 else b[2]).get(stage, 0.0) for b in bars]
            if any(widths):
                ax.barh(range(len(bars)), widths, left=left, color=COLORS[stage])
                shown.add(stage)
            left = [a + w for a, w in zip(left, widths)]
        for i, bar in enumerate(bars):
            if not (bar[1] if index == 1 else bar[2]):
                ax.text(2, i, "missing (calls not attributed to stages)", va="center", fontsize=7,
                        color="grey")
        ax.set_yticks(range(len(bars)), [b[0] for b in bars], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlim(0, 100)
        ax.set_xlabel(f"{title} (%)")
    simulated = bool(len(times) and times["simulated"].any())
    patches = [(LABELS[s], COLORS[s], "") for s in [*STAGES, "other"] if s in shown]
    return finish_figure(fig, NAME, out, "MemForest write path by stage", simulated=simulated,
                         empty=times.empty, patches=patches)


def make(results: Results, out: Path) -> list[Path]:
    builds = results.builds
    mine = builds[builds["experiment"].isin(EXPERIMENTS)
                  & builds["method"].fillna("").str.startswith("memforest")
                  & builds["error"].isna()] if len(builds) else builds
    stages = results.build_stages
    stages = stages[stages["run_id"].isin(set(mine.get("run_id", [])))] if len(stages) else stages
    times, tokens = time_shares(mine), token_shares(stages)
    return write_table(table(times, tokens), out) + figure(times, tokens, out)
