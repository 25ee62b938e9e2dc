"""Query latency: retrieval versus answer seconds per question, per system and retrieval mode (from
the records of the experiments in EXPERIMENTS, each question's first attempt), and retrieval latency
over 1/2/4/8 composed forests (the `retrieval_latency` microbenchmark, or a `forest_scaling.jsonl`
measurement file with the same columns: forests, facts, trees, browse.p50_ms, browse.p95_ms,
root_recall.p50_ms, root_recall.p95_ms). The paper's Table 3 and scaling end points beside."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analysis.load import Results, config_value
from analysis.names import QUERY_MODES, backbone_name, published, published_backbone, system_name
from analysis.render import Table, finish_figure, fmt, legend, plt, write_table

EXPERIMENTS = ("query_latency",)
NAME = "query_latency"
SCALING = "query_latency_forests"
MODE_KEY = "method.memforest.query.mode"
COMPOSE_KEY = "dataset.compose"  # memories holding 1/2/4/8 instances' haystacks
SCALING_COLUMNS = ("browse.p50_ms", "browse.p95_ms", "root_recall.p50_ms", "root_recall.p95_ms")


def label(method: str, mode: object) -> str:
    """A system's name; a MemForest run is named by its retrieval mode."""
    if isinstance(mode, str) and method.startswith("memforest"):
        return f"MemForest ({QUERY_MODES.get(mode, mode)})"
    return system_name(method)


def paper_system(method: str, mode: object) -> str:
    """The published row a run sits beside: MemForest's embed and planner modes are its two rows."""
    if method.startswith("memforest") and mode in ("embed", "planner"):
        return f"memforest_{mode}"
    return method


def per_question(results: Results) -> pd.DataFrame:
    records = results.records
    if records.empty:
        return pd.DataFrame()
    df = records[records["experiment"].isin(EXPERIMENTS) & records["error"].isna()]
    df = df.sort_values("attempt").drop_duplicates(["run_id", "question_id"])
    modes = dict(zip(results.runs["run_id"], config_value(results.runs, MODE_KEY)))
    composed = dict(zip(results.runs["run_id"], config_value(results.runs, COMPOSE_KEY, 1)))
    return df.assign(mode=df["run_id"].map(modes), forests=df["run_id"].map(composed).fillna(1).astype(int))


def summarise(rows: pd.DataFrame) -> pd.DataFrame:
    if rows.empty:
        return pd.DataFrame()
    rows = rows.assign(total=rows["retrieve_seconds"].fillna(0) + rows["answer_seconds"].fillna(0))
    keys = ["method", "mode", "backbone", "simulated", "forests"]
    return rows.groupby(keys, dropna=False).agg(
        questions=("question_id", "count"), retrieve=("retrieve_seconds", "mean"),
        answer=("answer_seconds", "mean"), total=("total", "mean"),
        p95=("total", lambda s: float(np.percentile(s, 95))),
        retrieve_p50=("retrieve_seconds", "median"),
        retrieve_p95=("retrieve_seconds",
                      lambda s: float(np.percentile(s.dropna(), 95)) if s.notna().any() else np.nan),
    ).reset_index()


def scaling(results: Results) -> pd.DataFrame:
    frames = [results.bench("retrieval_latency"), results.measurements("forest_scaling")]
    frames = [f for f in frames if len(f) and "forests" in f]
    return pd.concat(frames, ignore_index=True).sort_values("forests") if frames else pd.DataFrame()


def latency_table(ours: pd.DataFrame) -> Table:
    pub = published("query_latency")
    rows = []
    for r in ours.itertuples():
        p = pub[(pub["system"] == paper_system(r.method, r.mode))
                & (pub["backbone"] == published_backbone(r.backbone))]
        rows.append({"system": label(r.method, r.mode), "backbone": backbone_name(r.backbone),
                     "run": "simulated" if r.simulated else "real", "forests": fmt(r.forests),
                     "questions": fmt(r.questions),
                     "retrieval s": fmt(r.retrieve, 3), "answer s": fmt(r.answer, 3),
                     "total s": fmt(r.total, 3),
                     "total p95 s": fmt(r.p95, 3),
                     "paper retrieval s": fmt(p["retrieve_seconds"].iloc[0] if len(p) else None, 3),
                     "paper answer s": fmt(p["answer_seconds"].iloc[0] if len(p) else None, 3),
                     "paper total s": fmt(p["total_seconds"].iloc[0] if len(p) else None, 2)})
    seen = {paper_system(r.method, r.mode) for r in ours.itertuples()}
    for p in pub[~pub["system"].isin(seen)].itertuples():
        rows.append({"system": system_name(p.system), "backbone": p.backbone, "run": "missing",
                     "forests": "1",
                     **{c: "missing"
                            for c in ("questions", "retrieval s", "answer s", "total s", "total p95 s")},
                     "paper retrieval s": fmt(p.retrieve_seconds, 3),
                     "paper answer s": fmt(p.answer_seconds, 3), "paper total s": fmt(p.total_seconds, 2)})
    notes = ["Per question, first attempt; retrieval = the system's retrieve call, answer = "
             "the answer call(s).",
             "forests = instances' haystacks composed into one memory (dataset.compose).",
             "Paper: submission Table 3 (LongMemEval-S, one instance per memory), same backbone "
             "when published, else Qwen3-30B-A3B."]
    return Table(NAME, pd.DataFrame(rows), "Query latency per question: retrieval versus answer", notes)


def scaling_table(rows: pd.DataFrame) -> Table:
    pub = published("forest_scaling")
    out = []
    for r in rows.to_dict("records"):
        p = pub[pub["forests"] == r["forests"]]
        out.append({"forests": fmt(int(r["forests"])), "facts": fmt(int(r.get("facts", 0))),
                    "trees": fmt(int(r.get("trees", 0))),
                    **{f"{c.replace('.', ' ')}": fmt(r.get(c), 3) for c in SCALING_COLUMNS},
                    "paper root recall p95_ms": fmt(p["root_recall_p95_ms"].iloc[0] if len(p) else None, 3),
                    "run": "simulated" if r.get("simulated") else "real"})
    notes = ["Top-10 embedding browse (recall + browse + assembly) and exact root-index recall, "
             "query embedding excluded; milliseconds.",
             "Paper (revision microbenchmark): 1,428 facts / 250 trees to 10,781 / 1,868; browse "
             "p50 37.6-39.2 ms, p95 41.8-44.1 ms over 1-8 forests; root recall p95 0.114 -> 0.413 ms (only "
             "these are published)."]
    return Table(SCALING, pd.DataFrame(out), "Retrieval latency over composed forests", notes)


def figure(ours: pd.DataFrame, scale: pd.DataFrame, out: Path) -> list[Path]:
    fig, (ax_bar, ax_line) = plt.subplots(2, 1, figsize=(8.5, 8.5))
    pub = published("query_latency")
    pub = pub[pub["backbone"] == "Qwen3-30B-A3B"]
    single = ours[ours["forests"] == 1] if len(ours) else ours
    bars = [(f"{label(r.method, r.mode)}\n{backbone_name(r.backbone)}"
             + (" (simulated)" if r.simulated else ""), r.retrieve, r.answer, False)
            for r in single.itertuples()]
    bars += [(f"{system_name(p.system)}\npaper, 30B", p.retrieve_seconds, p.answer_seconds, True)
             for p in pub.itertuples()]
    y = range(len(bars))
    ax_bar.barh(y, [b[1] or 0 for b in bars], color=["tab:grey" if b[3] else "tab:blue" for b in bars])
    ax_bar.barh(y, [b[2] or 0 for b in bars], left=[b[1] or 0 for b in bars],
                color=["silver" if b[3] else "tab:orange" for b in bars])
    for i, b in enumerate(bars):
        total = (b[1] or 0) + (b[2] or 0)
        ax_bar.text(total, i, f" {total:.3g} s", va="center", fontsize=7)
    ax_bar.set_yticks(list(y), [b[0] for b in bars], fontsize=7)
    ax_bar.invert_yaxis()
    ax_bar.set_xlabel("seconds per question")
    ax_bar.set_title("retrieval + answer (one instance per memory)", fontsize=9)
    ax_bar.margins(x=0.15)
    legend(ax_bar, [("ours: retrieval", "tab:blue", ""), ("ours: answer", "tab:orange", ""),
                    ("paper: retrieval", "tab:grey", ""), ("paper: answer", "silver", "")],
           loc="center left", bbox_to_anchor=(1.02, 0.5))
    if len(scale):
        for column, style in zip(SCALING_COLUMNS, ("o-", "o--", "s-", "s--")):
            if column in scale:
                ax_line.plot(scale["forests"], scale[column], style,
                             label=f"ours (microbenchmark): {column.replace('.', ' ')}")
    for (method, mode, backbone,
         simulated), group in ours.groupby(["method", "mode", "backbone", "simulated"],
                                                                   dropna=False) if len(ours) else []:
        if group["forests"].nunique() > 1:
            group = group.sort_values("forests")
            ax_line.plot(group["forests"], 1000 * group["retrieve_p50"], "D-",
                         label="ours (harness): "
                               f"{label(method, mode)},\n{backbone_name(backbone)}, retrieve p50"
                         + (" (simulated)" if simulated else ""))
    fp = published("forest_scaling")
    ax_line.plot(fp["forests"], fp["root_recall_p95_ms"], "k^:", label="paper: root_recall p95_ms")
    ax_line.axhspan(37.6, 39.2, color="tab:blue", alpha=0.3, label="paper: browse p50 range, 1-8 forests")
    ax_line.axhspan(41.8, 44.1, color="tab:orange", alpha=0.3, label="paper: browse p95 range, 1-8 forests")
    ax_line.set_xscale("log", base=2)
    ax_line.set_yscale("log")
    ax_line.set_xticks([1, 2, 4, 8], ["1", "2", "4", "8"])
    ax_line.set_xlabel("forests composed into one memory")
    ax_line.set_ylabel("latency (ms, log scale)")
    ax_line.set_title("retrieval over 1/2/4/8 forests", fontsize=9)
    legend(ax_line, loc="center left", bbox_to_anchor=(1.02, 0.5))
    simulated = bool(len(ours) and ours["simulated"].any())
    return finish_figure(fig, NAME, out, "Query latency", simulated=simulated,
                         empty=ours.empty and scale.empty)


def make(results: Results, out: Path) -> list[Path]:
    ours = summarise(per_question(results))
    scale = scaling(results)
    return (write_table(latency_table(ours), out) + write_table(scaling_table(scale), out)
            + figure(ours, scale, out))
