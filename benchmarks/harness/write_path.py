"""The write-path table of several runs (one per system): build cost and call structure side by side.

    memforest-bench write-path RUN_DIR... [--out DIR]     (a sweep writes it into its directory)

Per run (means over its completed builds): build_seconds, turns_per_second, llm_calls, waves and
critical_path_seconds derived from the proxy's call timestamps (harness/waves.py, the same rule for
every system), busy_seconds, max_in_flight, tokens (uncached prompt, cached prompt, output), and, when
the system records its own waves (MemForest's scheduler: builds' `llm.waves`, or for a simulated run
its client log llm_calls_client.jsonl), `recorded_waves` and `recorded_critical_path_seconds`.
For simulated runs also `modelled_critical_path_seconds` (the observed waves, each call at its
latency-model time: robust to a content source slower than the model), `modelled_build_seconds`
(build_seconds - busy_seconds + modelled_critical_path_seconds: the time with calls in flight replaced
by the modelled one, the rest of the build as measured), `overrun_calls`, `served_calls`, `capped_calls`
(answers longer than their prompt kind's output cap, charged at the cap), `output_caps`, `bounded_calls`
(answers the source decoded with the schema's unbounded arrays / strings bounded, at most
`source_bounds`, lowered to fit the cap), `reply_shapes` (schema-less JSON answers by the reply shape the
source decoded them under, `unknown` where none was known: benchmarks/serving/reply_shapes.py),
`content_source` (`model:<chat model>` or `replay`) and `latency_model`.
What each system built: `memories_stored` (mean per build of what its adapter reports, the build's
`system.input.stored`; None where a build does not say) and `update_calls` (mean per build: the
adapter's own `update_calls`, else, in a simulated run, its served calls of an update reply shape, such
as Mem0's memory actions; None where neither tells), with `stored_unit` (the adapter's unit: memories,
cells...). A run whose builds stored nothing is not `comparable`: its build seconds bought no memory, so
it gets no speedup or ratio and is no other run's reference.
`turns_per_second` is the write rate, all source turns over all build seconds (`analysis.rows.write_rate`,
as the paper's table and `analysis/` compute it), not a mean of per-build rates. Across runs:
`speedup_vs_slowest` = this write rate / the lowest one, and `ratio_to_mem0` = this write rate / mem0's
(when a run of a system named mem0 is among them); the same on modelled_build_seconds as
`modelled_speedup_vs_slowest` and `modelled_ratio_to_mem0`, and on the modelled critical path alone as
`llm_path_speedup_vs_slowest` and `llm_path_ratio_to_mem0`: these depend on the served calls only, so
replaying a recorded served_calls.jsonl of calls made one at a time reproduces them exactly. Only
`comparable` runs take part: a run that stored nothing has none of these, and without a comparable mem0
run there is no ratio to mem0.
`simulated` marks runs on the latency-model server; the table's title names what its rows share (simulated
latency, content source, instance, caps)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from analysis.rows import build_figures, build_spans, mean, served_by_build, write_rate
from benchmarks.harness.results import RunFiles, read_jsonl, write_json_atomic
from benchmarks.harness.simulation import CLIENT_LOG, SERVED_LOG
from benchmarks.serving.reply_shapes import BY_NAME, update_shapes
from memforest.llm.calllog import CallRecord, summarize


def _mean(values: Sequence[float]) -> float | None:
    """The mean to three decimals, as the table shows it."""
    value = mean(values)
    return round(value, 3) if value is not None else None


def _recorded(run_dir: Path, builds: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    """The system's own waves: in a simulated run from its client log, else from the build rows."""
    client = run_dir / CLIENT_LOG
    if client.exists():
        rows = [CallRecord(**r) for r in read_jsonl(client) if r.get("tags", {}).get("phase") == "build"]
        per = [summarize([r for r in rows if r.tags.get("instance") == b["instance_id"]]) for b in builds]
    else:
        per = [b.get("llm") or {} for b in builds]
    per = [p for p in per if p.get("waves")]
    return {"recorded_waves": _mean([float(p["waves"]) for p in per]),
            "recorded_critical_path_seconds": _mean([float(p["critical_path_seconds"]) for p in per])}


def modelled_critical_path(run_dir: Path, builds: Sequence[Mapping[str, Any]]) -> float | None:
    """A simulated run's critical path in the latency model's time: the build's chat calls grouped into
    waves as observed (overlapping proxy records), each call weighted by its modelled time (queue +
    service, served_calls.jsonl) instead of its wall time, which the CPU content source may have
    stretched. Proxy records and served rows are paired in arrival order (one row per proxied call); calls
before a build's start (an interrupted earlier attempt at the instance) are left out."""
    served = sorted(read_jsonl(run_dir / SERVED_LOG), key=lambda r: float(r["arrival"]))
    calls = sorted((CallRecord(**r) for r in read_jsonl(run_dir / "llm_calls.jsonl") if r["stage"] == "chat"),
                   key=lambda r: r.start)
    if not served or len(served) != len(calls):
        return None
    modelled = {id(c): float(s["queue_s"]) + float(s["service_s"]) for c, s in zip(calls, served)}
    windows = {str(b["instance_id"]): _window(b) for b in builds}
    mine = [c for c in calls if c.tags.get("phase") == "build" and c.tags.get("instance") in windows
            and _within(c.start, windows[str(c.tags.get("instance"))])]
    total, end, longest = 0.0, None, 0.0
    for c in mine:
        if end is not None and c.start < end:
            end, longest = max(end, c.end), max(longest, modelled[id(c)])
        else:
            total += longest
            end, longest = c.end, modelled[id(c)]
    return round((total + longest) / max(len(builds), 1), 3)


def _window(build: Mapping[str, Any]) -> tuple[float, float] | None:
    """When a completed build ran (its finish time, to the second, less its build seconds), so that the
    calls of an earlier, interrupted attempt at the same instance are left out; None if unrecorded."""
    try:
        end = datetime.strptime(str(build["finished"]), "%Y-%m-%dT%H:%M:%S%z").timestamp()
    except (KeyError, ValueError):
        return None
    return end - float(build["build_seconds"]) - 2.0, end + 1.0


def _within(start: float, window: tuple[float, float] | None) -> bool:
    return window is None or window[0] <= start <= window[1]


def stored_memories(builds: Sequence[Mapping[str, Any]]) -> tuple[float | None, int | None, str | None]:
    """The mean and total units the builds stored (`system.input.stored`) and their unit (None where the
    builds name different ones), or None for all three where any build does not say."""
    inputs = [(b.get("system") or {}).get("input") or {} for b in builds]
    counts = [int(i["stored"]) for i in inputs if i.get("stored") is not None]
    if not inputs or len(counts) < len(inputs):
        return None, None, None
    units = {str(i.get("unit")) for i in inputs}
    return _mean([float(v) for v in counts]), sum(counts), units.pop() if len(units) == 1 else None


def update_calls(run_dir: Path, builds: Sequence[Mapping[str, Any]],
                 served: Sequence[Mapping[str, Any]]) -> float | None:
    """Mean update calls per build: the adapter's own count (`system.update_calls`) where every build
    has it, else the build's served calls of an update reply shape (a simulated run whose served calls
    carry known shapes); None where neither tells."""
    own = [(b.get("system") or {}).get("update_calls") for b in builds]
    counts = [float(v) for v in own if v is not None]
    if own and len(counts) == len(own):
        return _mean(counts)
    if not any(r.get("shape") in BY_NAME for r in served):
        return None
    per = served_by_build(served, build_spans(read_jsonl(run_dir / "llm_calls.jsonl")))
    updates = update_shapes()
    return _mean([float(sum(r.get("shape") in updates for r in per.get(str(b["instance_id"]), ())))
                  for b in builds])


def run_row(run_dir: str | Path) -> dict[str, Any] | None:
    """One run's write-path figures; None when it has no completed build."""
    files = RunFiles(run_dir, create=False)
    run = files.load_run()
    builds = [b for b in files.builds().values() if not b.get("error")]
    if not builds:
        return None
    figures = [build_figures(b) for b in builds]
    row: dict[str, Any] = {
        "system": run["config"]["method"]["name"], "backbone": run["config"]["llm"]["name"],
        "simulated": bool(run.get("simulated")), "run_dir": str(files.dir.resolve()),
        "dataset": run["config"]["dataset"]["name"], "instances": len(builds),
        **{key: _mean([float(f[key]) for f in figures]) for key in ("turns", "build_seconds", "llm_calls")},
        "turns_per_second": _rate(write_rate([float(f["turns"]) for f in figures],
                                             [float(f["build_seconds"]) for f in figures])),
        "uncached_prompt_tokens": _mean([float(f["uncached_prompt_tokens"]) for f in figures]),
        "cached_prompt_tokens": _mean([float(f["cached_prompt_tokens"]) for f in figures]),
        "output_tokens": _mean([float(f["completion_tokens"]) for f in figures]),
    }
    derived = (("waves", "derived_waves"), ("critical_path_seconds", "derived_critical_path_seconds"),
               ("busy_seconds", "busy_seconds"), ("max_in_flight", "max_in_flight"))
    for key, figure in derived:
        row[key] = _mean([float(f[figure]) for f in figures if f[figure] is not None])
    row.update(_recorded(files.dir, builds))
    row["modelled_critical_path_seconds"] = (modelled_critical_path(files.dir, builds) if row["simulated"]
                                             else None)
    cp = row["modelled_critical_path_seconds"]
    row["modelled_build_seconds"] = round(row["build_seconds"] - (row["busy_seconds"] or 0.0) + cp, 3) \
        if cp is not None and row["build_seconds"] is not None else None
    served = read_jsonl(files.dir / SERVED_LOG) if row["simulated"] else []
    if row["simulated"]:  # calls whose content came later than the model says (the CPU's time shows)
        row["overrun_calls"] = sum(float(r.get("overrun_s") or 0) > 0 for r in served)
        row["served_calls"] = len(served)
        row.update(_simulation_labels(run, served))
    row["memories_stored"], stored, row["stored_unit"] = stored_memories(builds)
    row["comparable"] = stored is None or stored > 0
    row["update_calls"] = update_calls(files.dir, builds, served)
    return row


def _simulation_labels(run: Mapping[str, Any], served: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What a simulated run's table says of its simulation: latency model, content source, caps."""
    llm = run["config"]["llm"]
    node = llm.get("latency_model") or {}
    source = str(node.get("source") or "model")
    return {"latency_model": node.get("name"),
            "content_source": ("replay" if source == "replay"
                               else f"model:{llm.get('model') or llm['name']} ({llm.get('backend')})"),
            "output_caps": dict(node.get("output_caps") or {}),
            "source_bounds": {k: node.get(f"source_max_{k}") for k in ("items", "chars")
                              if node.get(f"source_max_{k}") is not None},
            "capped_calls": sum(bool(r.get("capped")) for r in served),
            "bounded_calls": sum(bool(r.get("bounded")) for r in served),
            "reply_shapes": _counts(str(r["shape"]) for r in served if r.get("shape"))}


def _counts(names: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for name in names:
        out[name] = out.get(name, 0) + 1
    return dict(sorted(out.items()))


def _rate(value: float | None) -> float | None:
    return round(value, 3) if value is not None else None


def table(run_dirs: Iterable[str | Path]) -> dict[str, Any]:
    """The rows of `run_dirs`, each with its write-rate speedup over the slowest system and its ratio to
    mem0's, measured and (simulated runs) modelled; comparable rows only (see the module doc)."""
    rows = [r for r in (run_row(d) for d in run_dirs) if r is not None]
    slowest = None
    pairs = (("build_seconds", ""), ("modelled_build_seconds", "modelled_"),
             ("modelled_critical_path_seconds", "llm_path_"))
    for key, prefix in pairs:
        rates = [write_rate([r["turns"]], [r[key]]) if r.get(key) and r["comparable"] else None
                 for r in rows]
        timed = [(rate, r) for rate, r in zip(rates, rows) if rate]
        low = min(timed, key=lambda pair: pair[0]) if timed else None
        mem0 = next((rate for rate, r in timed if r["system"] == "mem0"), None)
        if not prefix and low is not None:
            slowest = low[1]
        for rate, r in zip(rates, rows):
            r[f"{prefix}speedup_vs_slowest"] = round(rate / low[0], 3) if low is not None and rate else None
            r[f"{prefix}ratio_to_mem0"] = round(rate / mem0, 3) if mem0 and rate else None
    return {"rows": rows, "slowest": slowest["system"] if slowest else None,
            "simulated": any(r["simulated"] for r in rows),
            "not_comparable": [r["system"] for r in rows if not r["comparable"]]}


def title(data: Mapping[str, Any]) -> str:
    """The table's title: for simulated rows, the simulated latency, content source, instance and caps
    they share (each as a list when the rows differ)."""
    rows = data["rows"]
    if not data["simulated"]:
        return "## write path"

    def shared(key: str) -> str:
        values = sorted({json.dumps(r.get(key)) for r in rows if r["simulated"]})
        return " / ".join(_label(json.loads(v)) for v in values)

    instances = sorted({f"{r['dataset']} ({r['instances']} instances, {r['turns']:g} turns each)"
                        for r in rows})
    return (f"## write path [simulated latency: {shared('latency_model')} latency-model server; content "
            f"source: {shared('content_source')}; instance: {' / '.join(instances)}; output caps: "
            f"{shared('output_caps')}; unbounded schema arrays / strings decoded at most: "
            f"{shared('source_bounds')}, lowered to fit the cap]")


def _label(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items()) or "none"
    return "–" if value is None else str(value)


NOT_COMPARABLE = "not comparable"


def _versus(data: Mapping[str, Any], r: Mapping[str, Any]) -> list[Any]:
    """A row's speedup and ratio cells: `not comparable` for a run that stored nothing, and for the
    ratios to mem0 when mem0's run stored nothing."""
    mem0_off = "mem0" in data.get("not_comparable", ())
    out = []
    for prefix in ("modelled_", "llm_path_", ""):
        out.append(NOT_COMPARABLE if not r["comparable"] else r[f"{prefix}speedup_vs_slowest"])
        out.append(NOT_COMPARABLE if not r["comparable"] or mem0_off else r[f"{prefix}ratio_to_mem0"])
    return out


def _stored(r: Mapping[str, Any]) -> str | None:
    if r.get("memories_stored") is None:
        return None
    return f"{r['memories_stored']} {r.get('stored_unit') or ''}".strip()


def markdown(data: Mapping[str, Any]) -> str:
    head = ["system", "build s", "turns/s", "LLM calls", "waves", "critical path s", "max in flight",
            "prompt tokens uncached / cached", "output tokens", "recorded waves (critical path s)",
            "memories stored", "update calls",
            "modelled critical path s", "modelled build s", "modelled speedup vs slowest", "modelled vs mem0",
            "modelled LLM path speedup vs slowest", "modelled LLM path vs mem0", "speedup vs slowest",
            "vs mem0", "capped answers", "bounded answers", "reply shapes"]
    lines = [title(data), "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in data["rows"]:
        recorded = (f"{r['recorded_waves']} ({r['recorded_critical_path_seconds']})" if r["recorded_waves"]
                    else "–")
        cells = [r["system"] + (" (sim)" if r["simulated"] else ""), r["build_seconds"],
                 r["turns_per_second"], r["llm_calls"], r["waves"], r["critical_path_seconds"],
                 r["max_in_flight"], f"{r['uncached_prompt_tokens']} / {r['cached_prompt_tokens']}",
                 r["output_tokens"], recorded, _stored(r), r.get("update_calls"),
                 r["modelled_critical_path_seconds"], r["modelled_build_seconds"], *_versus(data, r),
                 f"{r['capped_calls']}/{r['served_calls']}" if r.get("served_calls") else None,
                 f"{r.get('bounded_calls') or 0}/{r['served_calls']}" if r.get("served_calls") else None,
                 _label(r.get("reply_shapes")) if r.get("reply_shapes") else None]
        lines.append("| " + " | ".join("–" if c is None else str(c) for c in cells) + " |")
    lines += ["", "Waves and critical path from the proxy's call timestamps (overlapping calls = one wave; "
              "critical path = sum over waves of the longest call). Modelled critical path (simulated runs): "
              "the same waves, each call at its latency-model time."]
    if data["simulated"]:
        lines.append("Simulated latency: times are a latency model's (assumptions stated in the llm config), "
                     "not a GPU's; output tokens are the charged ones (capped answers count at their cap).")
    if any(r.get("reply_shapes") for r in data["rows"]):
        lines.append("Reply shapes (simulated runs): schema-less JSON requests whose prompt asks for a "
                     "reply shape the server knows (benchmarks/serving/reply_shapes.py: Mem0's fact list and "
                     "memory actions) were decoded by the content source under that shape, bounded as any "
                     "schema; `unknown`: schema-less JSON requests decoded as sent. A served backbone gets "
                     "every request as sent.")
    if data.get("not_comparable"):
        lines.append(f"{NOT_COMPARABLE}: {', '.join(data['not_comparable'])} stored nothing, so its build "
                     "seconds bought no memory; it gets no speedup or ratio and is no other system's "
                     "reference.")
    lines += closing_note(data)
    over = [r for r in data["rows"] if r.get("overrun_calls")]
    if over:
        lines.append("Calls slower than simulated (content source slower than the model): " + ", ".join(
            f"{r['system']} {r['overrun_calls']}/{r['served_calls']}" for r in over)
                     + "; their wall times are the CPU's.")
    return "\n".join(lines) + "\n"


def closing_note(data: Mapping[str, Any]) -> list[str]:
    """MemForest's write rate against Mem0's and the slowest system's, measured (and modelled, simulated)."""
    out = []
    for r in (r for r in data["rows"] if str(r["system"]).startswith("memforest")):
        parts = [f"{r['ratio_to_mem0']}x Mem0's" if r.get("ratio_to_mem0") else None,
                 f"{r['speedup_vs_slowest']}x the slowest system's ({data['slowest']})"
                 if data.get("slowest") and data["slowest"] != r["system"] else None]
        modelled = [f"{r['modelled_ratio_to_mem0']}x Mem0's" if r.get("modelled_ratio_to_mem0") else None,
                    f"{r['modelled_speedup_vs_slowest']}x the slowest"
                    if r.get("modelled_speedup_vs_slowest") else None]
        if any(parts):
            out.append(f"{r['system']} writes at {', '.join(p for p in parts if p)} rate, measured"
                       + (f"; on modelled build seconds {', '.join(m for m in modelled if m)}"
                          if any(modelled) else "") + ".")
    if "mem0" in data.get("not_comparable", ()):
        out.append("No ratio to Mem0: its run stored no memories.")
    return out


def write(run_dirs: Iterable[str | Path], out_dir: str | Path) -> dict[str, Any]:
    data = table(run_dirs)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "write_path.json", data)
    (out / "write_path.md").write_text(markdown(data), encoding="utf-8")
    return data


def command(argv: Sequence[str]) -> int:
    args = list(argv)
    out = None
    if "--out" in args:
        i = args.index("--out")
        out = args[i + 1] if i + 1 < len(args) else None
        del args[i : i + 2]
    if not args or out is None and "--out" in argv:
        print("usage: memforest-bench write-path RUN_DIR... [--out DIR]", file=sys.stderr)
        return 2
    try:
        data = write(args, out) if out else table(args)
    except FileNotFoundError as exc:
        print(f"memforest-bench write-path: {exc}", file=sys.stderr)
        return 2
    print(markdown(data))
    if not out:
        print(json.dumps(data, indent=2))
    return 0
