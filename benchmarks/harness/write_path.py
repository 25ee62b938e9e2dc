"""The write-path table of several runs (one per system): build cost and call structure side by side.

    memforest-bench write-path RUN_DIR... [--out DIR]     (a sweep writes it into its directory)

Per run (means over its completed builds): build_seconds, turns_per_second, llm_calls, waves and
critical_path_seconds derived from the proxy's call timestamps (harness/waves.py, the same rule for
every system), busy_seconds, max_in_flight, tokens (uncached prompt, cached prompt, output), and, when
the system records its own waves (MemForest's scheduler: builds' `llm.waves`, or for a simulated run
its client log llm_calls_client.jsonl), `recorded_waves` and `recorded_critical_path_seconds`.
Across runs: `speedup_vs_slowest` = slowest build_seconds / this build_seconds, and `ratio_to_mem0`
= mem0's build_seconds / this build_seconds (when a run of a system named mem0 is among them).
`simulated` marks runs on the latency-model server."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from statistics import fmean
from typing import Any

from benchmarks.harness.results import RunFiles, read_jsonl, write_json_atomic
from benchmarks.harness.simulation import CLIENT_LOG
from memforest.llm.calllog import CallRecord, summarize

FIELDS = ("build_seconds", "turns_per_second", "llm_calls", "waves", "critical_path_seconds", "busy_seconds",
          "max_in_flight", "uncached_prompt_tokens", "cached_prompt_tokens", "output_tokens")


def _mean(values: Sequence[float]) -> float | None:
    return round(fmean(values), 3) if values else None


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


def run_row(run_dir: str | Path) -> dict[str, Any] | None:
    """One run's write-path figures; None when it has no completed build."""
    files = RunFiles(run_dir, create=False)
    run = files.load_run()
    builds = [b for b in files.builds().values() if not b.get("error")]
    if not builds:
        return None
    llm = [b.get("llm") or {} for b in builds]
    waves = [b.get("call_waves") or {} for b in builds]
    row: dict[str, Any] = {
        "system": run["config"]["method"]["name"], "backbone": run["config"]["llm"]["name"],
        "simulated": bool(run.get("simulated")), "run_dir": str(files.dir.resolve()), "instances": len(builds),
        "turns": _mean([float(b["turns"]) for b in builds]),
        "build_seconds": _mean([float(b["build_seconds"]) for b in builds]),
        "turns_per_second": _mean([float(b["turns_per_second"]) for b in builds]),
        "llm_calls": _mean([float(x.get("calls", 0)) for x in llm]),
        "uncached_prompt_tokens": _mean([float(x.get("prompt_tokens", 0)) - float(x.get("cached_prompt_tokens", 0))
                                         for x in llm]),
        "cached_prompt_tokens": _mean([float(x.get("cached_prompt_tokens", 0)) for x in llm]),
        "output_tokens": _mean([float(x.get("completion_tokens", 0)) for x in llm]),
    }
    for key in ("waves", "critical_path_seconds", "busy_seconds", "max_in_flight"):
        row[key] = _mean([float(w[key]) for w in waves if key in w])
    row.update(_recorded(files.dir, builds))
    return row


def table(run_dirs: Iterable[str | Path]) -> dict[str, Any]:
    rows = [r for r in (run_row(d) for d in run_dirs) if r is not None]
    timed = [r for r in rows if r["build_seconds"]]
    slowest = max(timed, key=lambda r: r["build_seconds"]) if timed else None
    mem0 = next((r for r in timed if r["system"] == "mem0"), None)
    for r in rows:
        r["speedup_vs_slowest"] = round(slowest["build_seconds"] / r["build_seconds"], 3) \
            if slowest and r["build_seconds"] else None
        r["ratio_to_mem0"] = round(mem0["build_seconds"] / r["build_seconds"], 3) if mem0 and r["build_seconds"] else None
    return {"rows": rows, "slowest": slowest["system"] if slowest else None,
            "simulated": any(r["simulated"] for r in rows)}


def markdown(data: Mapping[str, Any]) -> str:
    head = ["system", "build s", "turns/s", "LLM calls", "waves", "critical path s", "max in flight",
            "prompt tokens uncached / cached", "output tokens", "recorded waves (critical path s)",
            "speedup vs slowest", "vs mem0"]
    title = "## write path" + (" [simulated: latency-model server]" if data["simulated"] else "")
    lines = [title, "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in data["rows"]:
        recorded = f"{r['recorded_waves']} ({r['recorded_critical_path_seconds']})" if r["recorded_waves"] else "–"
        cells = [r["system"] + (" (sim)" if r["simulated"] else ""), r["build_seconds"], r["turns_per_second"],
                 r["llm_calls"], r["waves"], r["critical_path_seconds"], r["max_in_flight"],
                 f"{r['uncached_prompt_tokens']} / {r['cached_prompt_tokens']}", r["output_tokens"], recorded,
                 r["speedup_vs_slowest"], r["ratio_to_mem0"]]
        lines.append("| " + " | ".join("–" if c is None else str(c) for c in cells) + " |")
    lines += ["", "Waves and critical path from the proxy's call timestamps (overlapping calls = one wave; "
              "critical path = sum over waves of the longest call)."]
    return "\n".join(lines) + "\n"


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
