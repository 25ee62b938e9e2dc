"""Write path table and figure: per system, mean per instance build wall time, source turns/s, LLM
calls, waves, critical path, prompt tokens cached / uncached, output tokens, memories stored and update
calls, and the write-rate speedup over the slowest system of the same (dataset, backbone,
real/simulated) group; the paper's values beside. A system whose builds stored nothing (its build time
bought no memory) is not comparable: no speedup, no ratio, and no other system's reference.

Reads the builds of runs of the experiments in EXPERIMENTS."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analysis.load import Results
from analysis.names import backbone_name, family, paper_dataset, published, system_name
from analysis.render import Table, finish_figure, fmt, legend, new_figure, series_label, write_table
from analysis.rows import write_rate

EXPERIMENTS = ("write_path",)
NAME = "write_path"
NOT_COMPARABLE = "not comparable"


def _every(values: pd.Series, how: str) -> float:
    """The mean or sum of `values` where every build gives one, else NaN (older builds do not say)."""
    numbers = pd.to_numeric(values, errors="coerce")
    if not len(numbers) or numbers.isna().any():
        return float("nan")
    return float(numbers.mean() if how == "mean" else numbers.sum())


def served_update_calls(served: pd.DataFrame) -> dict[str, int]:
    """Per simulated run whose served calls carry known reply shapes (a `shape_role`, as
    served_calls.jsonl records it), its calls of an update shape."""
    if served is None or not len(served) or "shape_role" not in served:
        return {}
    known = served[served["shape_role"].notna()]
    updates = known[known["shape_role"] == "update"].groupby("run_id").size()
    return {str(run): int(updates.get(run, 0)) for run in known["run_id"].unique()}


def summarise(builds: pd.DataFrame, served: pd.DataFrame | None = None) -> pd.DataFrame:
    """Mean per instance of every (dataset, method, backbone, simulated), and speedup vs the slowest
    comparable system; `served`: the served calls of simulated runs, for their update calls."""
    done = builds[builds["error"].isna()] if len(builds) else builds
    if done.empty:
        return pd.DataFrame()
    keys = ["dataset", "kind", "method", "backbone", "simulated"]
    done = done.assign(  # waves from call timestamps when the harness derived them: one rule for every system
        waves=done["derived_waves"].fillna(done["waves"]) if "derived_waves" in done else done["waves"],
        critical_path_seconds=done["derived_critical_path_seconds"].fillna(done["critical_path_seconds"])
        if "derived_critical_path_seconds" in done else done["critical_path_seconds"],
        max_in_flight=done["max_in_flight"] if "max_in_flight" in done else float("nan"),
        memories_stored=done["memories_stored"] if "memories_stored" in done else float("nan"),
        update_calls=_update_calls(done, served))
    out = done.groupby(keys, dropna=False).agg(
        instances=("instance_id", "count"), turns=("turns", "mean"), build_seconds=("build_seconds", "mean"),
        turns_total=("turns", "sum"), seconds_total=("build_seconds", "sum"), llm_calls=("llm_calls", "mean"),
        waves=("waves", "mean"), critical_path_seconds=("critical_path_seconds", "mean"),
        max_in_flight=("max_in_flight", "max"),
        cached=("cached_prompt_tokens", "mean"), uncached=("uncached_prompt_tokens", "mean"),
        output=("completion_tokens", "mean"),
        stored=("memories_stored", lambda v: _every(v, "mean")),
        stored_total=("memories_stored", lambda v: _every(v, "sum")),
        update_calls=("update_calls", lambda v: _every(v, "mean"))).reset_index()
    out["turns_per_second"] = [write_rate([t], [s]) for t, s in zip(out["turns_total"], out["seconds_total"])]
    out["comparable"] = ~(out["stored_total"] == 0)  # unknown (NaN) counts as comparable
    rate = out["turns_per_second"].where(out["comparable"])
    group = ["dataset", "backbone", "simulated"]
    out["speedup"] = rate / rate.groupby([out[k] for k in group], dropna=False).transform("min")
    mem0 = out[(out["method"] == "mem0") & out["comparable"]].set_index(group)["turns_per_second"]
    out["ratio_to_mem0"] = [r / mem0.get((d, b, s), float("nan"))
                            for r, d, b, s in zip(rate, out["dataset"], out["backbone"], out["simulated"])]
    return out


def _update_calls(builds: pd.DataFrame, served: pd.DataFrame | None) -> pd.Series:
    """Each build's update calls: the adapter's own count, else its run's served update calls spread
    evenly over the run's builds (NaN where neither tells)."""
    own = (pd.to_numeric(builds["update_calls"], errors="coerce") if "update_calls" in builds
           else pd.Series(np.nan, index=builds.index))
    per_run = served_update_calls(served) if served is not None else {}
    builds_per_run = builds.groupby("run_id")["instance_id"].transform("count")
    from_served = pd.Series([per_run.get(str(run), np.nan) for run in builds["run_id"]],
                            index=builds.index, dtype=float) / builds_per_run
    return own.fillna(from_served)


def _ratio(value: float, comparable: bool, mem0_off: bool) -> str:
    """A row's ratio to Mem0: not comparable when the row or its group's Mem0 stored nothing."""
    if not comparable or mem0_off:
        return NOT_COMPARABLE
    return "missing" if pd.isna(value) else f"{value:.2f}×"


def paper_rates() -> pd.DataFrame:
    pub = published("write_path")
    pub = pub[pub["turns_per_second"].notna()].copy()
    pub["speedup"] = pub["turns_per_second"] / pub.groupby(["dataset",
                                                            "backbone"])["turns_per_second"].transform("min")
    return pub


def table(ours: pd.DataFrame, sim_notes: list[str] | None = None) -> Table:
    sim_notes = sim_notes or []
    pub = paper_rates()
    rows = []
    off = ours[(ours["method"] == "mem0") & ~ours["comparable"]] if len(ours) else ours
    off_groups = {(r.dataset, r.backbone, r.simulated) for r in off.itertuples()}
    for r in ours.itertuples():
        mem0_off = (r.dataset, r.backbone, r.simulated) in off_groups
        match = pub[(pub["dataset"] == paper_dataset(r.kind, r.dataset))
                    & (pub["system"] == family(r.method))]
        p = match.iloc[0] if len(match) else None
        rows.append({
            "system": system_name(r.method), "dataset": r.dataset, "backbone": backbone_name(r.backbone),
            "run": "simulated" if r.simulated else "real", "instances": fmt(r.instances),
            "turns / instance": fmt(r.turns, 1), "build s": fmt(r.build_seconds),
            "turns/s": fmt(r.turns_per_second, 3), "LLM calls": fmt(r.llm_calls, 1), "waves": fmt(r.waves, 1),
            "critical path s": fmt(r.critical_path_seconds),
            "max in flight": fmt(r.max_in_flight, 0),
            "tokens cached": fmt(r.cached, 0), "tokens uncached": fmt(r.uncached, 0),
            "tokens output": fmt(r.output, 0),
            "memories stored": fmt(r.stored, 1), "update calls": fmt(r.update_calls, 1),
            "speedup vs slowest": f"{r.speedup:.2f}×" if r.comparable else NOT_COMPARABLE,
            "ratio to Mem0": _ratio(r.ratio_to_mem0, bool(r.comparable), mem0_off),
            "paper build s": fmt(p["build_seconds"] if p is not None else None),
            "paper turns/s": fmt(p["turns_per_second"] if p is not None else None, 3),
            "paper speedup": f"{p['speedup']:.2f}×" if p is not None else "missing",
        })
    for p in pub[~pub["system"].isin({family(m) for m in ours.get("method", [])})].itertuples():
        rows.append({"system": system_name(p.system), "dataset": p.dataset, "backbone": p.backbone,
                     "run": "not run",
                     **{c: "not run"
                            for c in ("instances", "turns / instance", "build s", "turns/s", "LLM calls",
                                      "waves", "critical path s", "max in flight", "tokens cached",
                                      "tokens uncached", "tokens output", "memories stored", "update calls",
                                      "speedup vs slowest", "ratio to Mem0")},
                     "paper build s": fmt(p.build_seconds), "paper turns/s": fmt(p.turns_per_second, 3),
                     "paper speedup": f"{p.speedup:.2f}×"})
    notes = ["Means per instance; turns/s = source dialogue turns / build wall seconds over all instances.",
             "Waves and critical path from call timestamps when recorded (overlapping calls "
             "form one wave; the critical path sums each wave's longest call), else from the "
             "library's own wave ids.",
             "Speedup = write rate over the slowest system of the same dataset, backbone and "
             "real/simulated group; ratio to Mem0 likewise over Mem0's rate (missing without a Mem0 "
             "run in the group).",
             "Memories stored: mean per instance of what each adapter reports its store holds after "
             "the build, in its own unit (missing where its builds do not say); update calls: the "
             "adapter's count, else the served calls of an update reply shape (Mem0's memory actions) in "
             "a simulated run. A system that "
             f"stored nothing is {NOT_COMPARABLE}: its build time bought no memory, so it has no speedup or "
             "ratio and is no other system's reference.",
             "Paper: revision write-rate table (Qwen3-30B-A3B, vLLM on one H100); its speedups are "
             "over its slowest system (Zep Local). Source: analysis/published/write_path.csv."]
    if any(r["run"] == "not run" for r in rows):
        notes.append("not run: a system of the paper's table with no run among these results. EverMemOS "
                     "and LightMem run from their own checkouts (baselines/README.md); once configured, "
                     "`memforest-bench experiment=write_path method=evermemos "
                     "method.system.checkout=DIR method.system.python=PY ...` with the same llm, dataset "
                     "and output_root adds their row.")
    if len(ours) and ours["simulated"].any():
        notes.append("Rows marked simulated ran against the latency-model server: their times are modelled.")
    return Table(NAME, pd.DataFrame(rows), "Write path: build cost per memory instance", notes + sim_notes)


def figure(ours: pd.DataFrame, out: Path) -> list[Path]:
    fig, ax = new_figure(width=7.5, height=4.2)
    pub = paper_rates()
    pub = pub[pub["dataset"] == "longmemeval_s"]
    labels: list[str] = []
    values: list[float] = []
    colors: list[str] = []
    hatches: list[str] = []
    for r in ours.itertuples():
        labels.append(f"{system_name(r.method)}\n{r.dataset}, {backbone_name(r.backbone)}")
        values.append(float(r.turns_per_second))
        colors.append("tab:orange" if r.simulated else "tab:blue")
        hatches.append("//" if r.simulated else "")
    for p in pub.itertuples():
        labels.append(f"{system_name(p.system)}\npaper, {p.backbone}")
        values.append(float(p.turns_per_second))
        colors.append("tab:grey")
        hatches.append("")
    bars = ax.barh(range(len(values)), values, color=colors, hatch=hatches) if values else []
    for bar, value in zip(bars, values):
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {value:.3g}", va="center", fontsize=7)
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("write rate (source turns / s, log scale)")
    kinds = [("ours, real", "tab:blue", "")]
    if len(ours) and ours["simulated"].any():
        kinds.append((series_label("ours", True), "tab:orange", "//"))
    legend(ax, [*kinds, ("paper (LongMemEval-S)", "tab:grey", "")], loc="lower right")
    simulated = bool(len(ours) and ours["simulated"].any())
    return finish_figure(fig, NAME, out, "Write rate per system", simulated=simulated, empty=ours.empty)


def simulation_notes(results: Results) -> list[str]:
    """Per simulated run: its latency model, content source, output caps and how many answers hit them,
    and the bounds of the source's schemas and how many answers they applied to (from its
    served_calls.jsonl)."""
    runs = results.runs
    runs = runs[runs["experiment"].isin(EXPERIMENTS) & runs["simulated"]] if len(runs) else runs
    served = results.measurements("served_calls") if len(runs) else pd.DataFrame()
    out = []
    for r in runs.itertuples():
        cfg = r.config
        prefix = "llm.latency_model.output_caps."
        caps = ", ".join(f"{k[len(prefix):]} {v}" for k, v in cfg.items() if k.startswith(prefix)) or "none"
        content = ("replay" if cfg.get("llm.latency_model.source") == "replay"
                   else f"{cfg.get('llm.model')} ({cfg.get('llm.backend')})")
        mine = served[served["run_id"] == r.run_id] if len(served) else served
        capped = int(mine["capped"].fillna(False).astype(bool).sum()) if "capped" in mine else 0
        bounded = int(mine["bounded"].fillna(False).astype(bool).sum()) if "bounded" in mine else 0
        shapes = (mine["shape"].dropna().value_counts().sort_index() if "shape" in mine
                  else pd.Series(dtype=int))
        bounds = ", ".join(f"{kind} {cfg[key]:g}" for kind in ("items", "chars")
                           if (key := f"llm.latency_model.source_max_{kind}") in cfg and pd.notna(cfg[key]))
        arrays = (f"; unbounded schema arrays / strings decoded at most {bounds} (lowered to fit the cap), "
                  f"{bounded} of {len(mine)} answers" if bounds else "")
        shaped = (f"; schema-less JSON answers by reply shape (benchmarks/serving/reply_shapes.py, the "
                  f"simulated source only): {', '.join(f'{k} {v}' for k, v in shapes.items())}"
                  if len(shapes) else "")
        out.append(f"{system_name(r.method)}, {r.dataset} (simulated): latency model "
                   f"{cfg.get('llm.latency_model.name')}, content source {content}, output caps {caps}; "
                   f"{capped} of {len(mine)} answers capped{arrays}{shaped}.")
    return out


def make(results: Results, out: Path) -> list[Path]:
    builds = results.builds
    builds = builds[builds["experiment"].isin(EXPERIMENTS)] if len(builds) else builds
    simulated = bool(len(builds)) and bool(builds["simulated"].any())
    ours = summarise(builds, results.measurements("served_calls") if simulated else None)
    return write_table(table(ours, simulation_notes(results)), out) + figure(ours, out)
