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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analysis.records import pick
from analysis.rows import write_rate
from benchmarks.harness.results import write_json_atomic
from benchmarks.harness.write_path_row import WritePathRow, modelled_critical_path, run_row

__all__ = ["modelled_critical_path"]  # re-exported


@dataclass
class WritePathTable:
    """The rows of several runs, the slowest comparable system, and the runs that stored nothing."""

    rows: list[WritePathRow] = field(default_factory=list)
    slowest: str | None = None
    simulated: bool = False
    not_comparable: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> WritePathTable:
        """The typed table of write_path.json's plain form (rows may name only some fields)."""
        table = pick(cls, data)
        table.rows = [pick(WritePathRow, row) for row in table.rows]  # type: ignore[arg-type]
        return table

    def to_dict(self) -> dict[str, Any]:
        return {"rows": [r.to_dict() for r in self.rows], "slowest": self.slowest,
                "simulated": self.simulated, "not_comparable": list(self.not_comparable)}


def typed_table(run_dirs: Iterable[str | Path]) -> WritePathTable:
    """The rows of `run_dirs`, each with its write-rate speedup over the slowest system and its ratio to
    mem0's, measured and (simulated runs) modelled; comparable rows only (see the module doc)."""
    rows = [r for r in (run_row(d) for d in run_dirs) if r is not None]
    slowest = None
    pairs = (("build_seconds", ""), ("modelled_build_seconds", "modelled_"),
             ("modelled_critical_path_seconds", "llm_path_"))
    for key, prefix in pairs:
        rates = [write_rate([r.turns or 0.0], [getattr(r, key)]) if getattr(r, key) and r.comparable else None
                 for r in rows]
        timed = [(rate, r) for rate, r in zip(rates, rows) if rate]
        low = min(timed, key=lambda pair: pair[0]) if timed else None
        mem0 = next((rate for rate, r in timed if r.system == "mem0"), None)
        if not prefix and low is not None:
            slowest = low[1]
        for rate, r in zip(rates, rows):
            speedup = round(rate / low[0], 3) if low is not None and rate else None
            setattr(r, f"{prefix}speedup_vs_slowest", speedup)
            setattr(r, f"{prefix}ratio_to_mem0", round(rate / mem0, 3) if mem0 and rate else None)
    return WritePathTable(rows, slowest.system if slowest else None, any(r.simulated for r in rows),
                          [r.system for r in rows if not r.comparable])


def table(run_dirs: Iterable[str | Path]) -> dict[str, Any]:
    """`typed_table` in write_path.json's plain form."""
    return typed_table(run_dirs).to_dict()


def title(data: WritePathTable) -> str:
    """The table's title: for simulated rows, the simulated latency, content source, instance and caps
    they share (each as a list when the rows differ)."""
    rows = data.rows
    if not data.simulated:
        return "## write path"

    def shared(key: str) -> str:
        values = sorted({json.dumps(getattr(r, key)) for r in rows if r.simulated})
        return " / ".join(_label(json.loads(v)) for v in values)

    instances = sorted({f"{r.dataset} ({r.instances} instances, {r.turns:g} turns each)" for r in rows})
    return (f"## write path [simulated latency: {shared('latency_model')} latency-model server; content "
            f"source: {shared('content_source')}; instance: {' / '.join(instances)}; output caps: "
            f"{shared('output_caps')}; unbounded schema arrays / strings decoded at most: "
            f"{shared('source_bounds')}, lowered to fit the cap]")


def _label(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items()) or "none"
    return "–" if value is None else str(value)


NOT_COMPARABLE = "not comparable"


def _versus(data: WritePathTable, r: WritePathRow) -> list[Any]:
    """A row's speedup and ratio cells: `not comparable` for a run that stored nothing, and for the
    ratios to mem0 when mem0's run stored nothing."""
    mem0_off = "mem0" in data.not_comparable
    out = []
    for prefix in ("modelled_", "llm_path_", ""):
        out.append(NOT_COMPARABLE if not r.comparable else getattr(r, f"{prefix}speedup_vs_slowest"))
        out.append(NOT_COMPARABLE if not r.comparable or mem0_off else getattr(r, f"{prefix}ratio_to_mem0"))
    return out


def _stored(r: WritePathRow) -> str | None:
    if r.memories_stored is None:
        return None
    return f"{r.memories_stored} {r.stored_unit or ''}".strip()


def _served(count: int | None, r: WritePathRow) -> str | None:
    return f"{count or 0}/{r.served_calls}" if r.served_calls else None


HEAD = ["system", "build s", "turns/s", "LLM calls", "waves", "critical path s", "max in flight",
        "prompt tokens uncached / cached", "output tokens", "recorded waves (critical path s)",
        "memories stored", "update calls",
        "modelled critical path s", "modelled build s", "modelled speedup vs slowest", "modelled vs mem0",
        "modelled LLM path speedup vs slowest", "modelled LLM path vs mem0", "speedup vs slowest",
        "vs mem0", "capped answers", "bounded answers", "reply shapes"]


def markdown(plain: Mapping[str, Any] | WritePathTable) -> str:
    data = plain if isinstance(plain, WritePathTable) else WritePathTable.of(plain)
    lines = [title(data), "", "| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    for r in data.rows:
        recorded = f"{r.recorded_waves} ({r.recorded_critical_path_seconds})" if r.recorded_waves else "–"
        cells = [r.system + (" (sim)" if r.simulated else ""), r.build_seconds,
                 r.turns_per_second, r.llm_calls, r.waves, r.critical_path_seconds,
                 r.max_in_flight, f"{r.uncached_prompt_tokens} / {r.cached_prompt_tokens}",
                 r.output_tokens, recorded, _stored(r), r.update_calls,
                 r.modelled_critical_path_seconds, r.modelled_build_seconds, *_versus(data, r),
                 _served(r.capped_calls, r), _served(r.bounded_calls, r),
                 _label(r.reply_shapes) if r.reply_shapes else None]
        lines.append("| " + " | ".join("–" if c is None else str(c) for c in cells) + " |")
    lines += ["", "Waves and critical path from the proxy's call timestamps (overlapping calls = one wave; "
              "critical path = sum over waves of the longest call). Modelled critical path (simulated runs): "
              "the same waves, each call at its latency-model time."]
    if data.simulated:
        lines.append("Simulated latency: times are a latency model's (assumptions stated in the llm config), "
                     "not a GPU's; output tokens are the charged ones (capped answers count at their cap).")
    if any(r.reply_shapes for r in data.rows):
        lines.append("Reply shapes (simulated runs): schema-less JSON requests whose prompt asks for a "
                     "reply shape the server knows (benchmarks/serving/reply_shapes.py: Mem0's fact list and "
                     "memory actions) were decoded by the content source under that shape, bounded as any "
                     "schema; `unknown`: schema-less JSON requests decoded as sent. A served backbone gets "
                     "every request as sent.")
    if data.not_comparable:
        lines.append(f"{NOT_COMPARABLE}: {', '.join(data.not_comparable)} stored nothing, so its build "
                     "seconds bought no memory; it gets no speedup or ratio and is no other system's "
                     "reference.")
    lines += closing_note(data)
    over = [r for r in data.rows if r.overrun_calls]
    if over:
        lines.append("Calls slower than simulated (content source slower than the model): " + ", ".join(
            f"{r.system} {r.overrun_calls}/{r.served_calls}" for r in over)
                     + "; their wall times are the CPU's.")
    return "\n".join(lines) + "\n"


def closing_note(plain: Mapping[str, Any] | WritePathTable) -> list[str]:
    """MemForest's write rate against Mem0's and the slowest system's, measured (and modelled, simulated)."""
    data = plain if isinstance(plain, WritePathTable) else WritePathTable.of(plain)
    out = []
    for r in (r for r in data.rows if str(r.system).startswith("memforest")):
        parts = [f"{r.ratio_to_mem0}x Mem0's" if r.ratio_to_mem0 else None,
                 f"{r.speedup_vs_slowest}x the slowest system's ({data.slowest})"
                 if data.slowest and data.slowest != r.system else None]
        modelled = [f"{r.modelled_ratio_to_mem0}x Mem0's" if r.modelled_ratio_to_mem0 else None,
                    f"{r.modelled_speedup_vs_slowest}x the slowest"
                    if r.modelled_speedup_vs_slowest else None]
        if any(parts):
            out.append(f"{r.system} writes at {', '.join(p for p in parts if p)} rate, measured"
                       + (f"; on modelled build seconds {', '.join(m for m in modelled if m)}"
                          if any(modelled) else "") + ".")
    if "mem0" in data.not_comparable:
        out.append("No ratio to Mem0: its run stored no memories.")
    return out


def write(run_dirs: Iterable[str | Path], out_dir: str | Path) -> dict[str, Any]:
    return write_table(typed_table(run_dirs), out_dir)


def write_table(data: WritePathTable, out_dir: str | Path) -> dict[str, Any]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "write_path.json", data.to_dict())
    (out / "write_path.md").write_text(markdown(data), encoding="utf-8")
    return data.to_dict()


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
        data = typed_table(args)
        if out:
            write_table(data, out)
    except FileNotFoundError as exc:
        print(f"memforest-bench write-path: {exc}", file=sys.stderr)
        return 2
    print(markdown(data))
    if not out:
        print(json.dumps(data.to_dict(), indent=2))
    return 0

