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
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from analysis.records import BuildRow, CallSummary, ServedCall, pick
from analysis.rows import build_figures, build_spans, mean, served_by_build, write_rate
from benchmarks.harness.report import StoredRun
from benchmarks.harness.results import RunFiles, read_jsonl, write_json_atomic
from benchmarks.harness.simulation import CLIENT_LOG
from benchmarks.serving.reply_shapes import BY_NAME, update_shapes
from memforest.llm.calllog import CallRecord, summarize

PHASE, INSTANCE = "phase", "instance"  # the call log's tags (harness/results.py RunCallLog)


@dataclass
class WritePathRow:
    """One run's write-path figures (write_path.json's rows; the module doc names each)."""

    system: str = ""
    backbone: str | None = None
    simulated: bool = False
    run_dir: str | None = None
    dataset: str | None = None
    instances: int = 0
    turns: float | None = None
    build_seconds: float | None = None
    llm_calls: float | None = None
    turns_per_second: float | None = None
    uncached_prompt_tokens: float | None = None
    cached_prompt_tokens: float | None = None
    output_tokens: float | None = None
    waves: float | None = None
    critical_path_seconds: float | None = None
    busy_seconds: float | None = None
    max_in_flight: float | None = None
    recorded_waves: float | None = None
    recorded_critical_path_seconds: float | None = None
    modelled_critical_path_seconds: float | None = None
    modelled_build_seconds: float | None = None
    overrun_calls: int | None = None
    served_calls: int | None = None
    latency_model: str | None = None
    content_source: str | None = None
    output_caps: Mapping[str, Any] | None = None
    source_bounds: Mapping[str, Any] | None = None
    capped_calls: int | None = None
    bounded_calls: int | None = None
    reply_shapes: Mapping[str, int] | None = None
    memories_stored: float | None = None
    stored_unit: str | None = None
    comparable: bool = True
    update_calls: float | None = None
    speedup_vs_slowest: float | None = None
    ratio_to_mem0: float | None = None
    modelled_speedup_vs_slowest: float | None = None
    modelled_ratio_to_mem0: float | None = None
    llm_path_speedup_vs_slowest: float | None = None
    llm_path_ratio_to_mem0: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The row as write_path.json holds it (simulation fields only for simulated runs)."""
        out = asdict(self)
        if not self.simulated:
            for name in SIMULATION_FIELDS:
                out.pop(name)
        return out


SIMULATION_FIELDS = ("overrun_calls", "served_calls", "latency_model", "content_source", "output_caps",
                     "source_bounds", "capped_calls", "bounded_calls", "reply_shapes")


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


def _mean(values: Iterable[float]) -> float | None:
    """The mean to three decimals, as the table shows it."""
    value = mean(values)
    return round(value, 3) if value is not None else None


def _typed(builds: Sequence[BuildRow | Mapping[str, Any]]) -> list[BuildRow]:
    return [b if isinstance(b, BuildRow) else BuildRow.from_row(b) for b in builds]


def _calls(path: Path) -> list[CallRecord]:
    return [CallRecord(**r) for r in read_jsonl(path)]


def _recorded(run_dir: Path, builds: Sequence[BuildRow]) -> tuple[float | None, float | None]:
    """The system's own waves: in a simulated run from its client log, else from the build rows."""
    client = run_dir / CLIENT_LOG
    if client.exists():
        rows = [r for r in _calls(client) if r.tags.get(PHASE) == "build"]
        per = [CallSummary.from_row(summarize([r for r in rows if r.tags.get(INSTANCE) == b.instance_id]))
               for b in builds]
    else:
        per = [b.calls for b in builds]
    per = [p for p in per if p.waves]
    return _mean(float(p.waves) for p in per), _mean(float(p.critical_path_seconds) for p in per)


def modelled_critical_path(run_dir: Path, builds: Sequence[BuildRow | Mapping[str, Any]]) -> float | None:
    """A simulated run's critical path in the latency model's time: the build's chat calls grouped into
    waves as observed (overlapping proxy records), each call weighted by its modelled time (queue +
    service, served_calls.jsonl) instead of its wall time, which the CPU content source may have
    stretched. Proxy records and served rows are paired in arrival order (one row per proxied call); calls
    before a build's start (an interrupted earlier attempt at the instance) are left out."""
    served = sorted(RunFiles(run_dir, create=False).served_calls(), key=lambda r: float(r.arrival))
    calls = sorted((c for c in _calls(run_dir / "llm_calls.jsonl") if c.stage == "chat"),
                   key=lambda r: r.start)
    if not served or len(served) != len(calls):
        return None
    typed = _typed(builds)
    modelled = {id(c): float(s.queue_s) + float(s.service_s) for c, s in zip(calls, served)}
    windows = {str(b.instance_id): _window(b) for b in typed}
    mine = [c for c in calls if c.tags.get(PHASE) == "build" and c.tags.get(INSTANCE) in windows
            and _within(c.start, windows[str(c.tags.get(INSTANCE))])]
    total, end, longest = 0.0, None, 0.0
    for c in mine:
        if end is not None and c.start < end:
            end, longest = max(end, c.end), max(longest, modelled[id(c)])
        else:
            total += longest
            end, longest = c.end, modelled[id(c)]
    return round((total + longest) / max(len(typed), 1), 3)


def _window(build: BuildRow) -> tuple[float, float] | None:
    """When a completed build ran (its finish time, to the second, less its build seconds), so that the
    calls of an earlier, interrupted attempt at the same instance are left out; None if unrecorded."""
    try:
        end = datetime.strptime(str(build.finished), "%Y-%m-%dT%H:%M:%S%z").timestamp()
    except ValueError:
        return None
    return end - float(build.build_seconds) - 2.0, end + 1.0


def _within(start: float, window: tuple[float, float] | None) -> bool:
    return window is None or window[0] <= start <= window[1]


@dataclass(frozen=True)
class _Stored:
    """What an adapter's input account says it stored."""

    stored: int | None = None
    unit: str | None = None


@dataclass(frozen=True)
class _Updates:
    update_calls: int | None = None  # the adapter's own count of update calls (system statistics)


def stored_memories(builds: Sequence[BuildRow]) -> tuple[float | None, int | None, str | None]:
    """The mean and total units the builds stored (`system.input.stored`) and their unit (None where the
    builds name different ones), or None for all three where any build does not say."""
    inputs = [pick(_Stored, b.input_account or {}) for b in builds]
    counts = [int(i.stored) for i in inputs if i.stored is not None]
    if not inputs or len(counts) < len(inputs):
        return None, None, None
    units = {str(i.unit) for i in inputs}
    return _mean(float(v) for v in counts), sum(counts), units.pop() if len(units) == 1 else None


def update_calls(run_dir: Path, builds: Sequence[BuildRow], served: Sequence[ServedCall]) -> float | None:
    """Mean update calls per build: the adapter's own count (`system.update_calls`) where every build
    has it, else the build's served calls of an update reply shape (a simulated run whose served calls
    carry known shapes); None where neither tells."""
    own = [pick(_Updates, b.stats).update_calls for b in builds]
    counts = [float(v) for v in own if v is not None]
    if own and len(counts) == len(own):
        return _mean(counts)
    if not any(r.shape in BY_NAME for r in served):
        return None
    per = served_by_build(served, build_spans(read_jsonl(run_dir / "llm_calls.jsonl")))
    updates = update_shapes()
    return _mean(float(sum(r.shape in updates for r in per.get(str(b.instance_id), ()))) for b in builds)


def run_row(run_dir: str | Path) -> WritePathRow | None:
    """One run's write-path figures; None when it has no completed build."""
    files = RunFiles(run_dir, create=False)
    run = StoredRun.of(files)
    config = run.stored_config
    builds = [b for b in files.builds().values() if not b.error]
    if not builds:
        return None
    figures = [build_figures(b) for b in builds]
    row = WritePathRow(
        system=config.method_name, backbone=config.llm_node.name, simulated=bool(run.simulated),
        run_dir=str(files.dir.resolve()), dataset=config.dataset_name, instances=len(builds),
        turns=_mean(float(f.turns or 0) for f in figures),
        build_seconds=_mean(float(f.build_seconds) for f in figures),
        llm_calls=_mean(float(f.llm_calls) for f in figures),
        turns_per_second=_rate(write_rate([float(f.turns or 0) for f in figures],
                                          [float(f.build_seconds) for f in figures])),
        uncached_prompt_tokens=_mean(float(f.uncached_prompt_tokens) for f in figures),
        cached_prompt_tokens=_mean(float(f.cached_prompt_tokens) for f in figures),
        output_tokens=_mean(float(f.completion_tokens) for f in figures),
        waves=_mean(float(f.derived_waves) for f in figures if f.derived_waves is not None),
        critical_path_seconds=_mean(float(f.derived_critical_path_seconds) for f in figures
                                    if f.derived_critical_path_seconds is not None),
        busy_seconds=_mean(float(f.busy_seconds) for f in figures if f.busy_seconds is not None),
        max_in_flight=_mean(float(f.max_in_flight) for f in figures if f.max_in_flight is not None))
    row.recorded_waves, row.recorded_critical_path_seconds = _recorded(files.dir, builds)
    if row.simulated:
        row.modelled_critical_path_seconds = cp = modelled_critical_path(files.dir, builds)
        if cp is not None and row.build_seconds is not None:
            row.modelled_build_seconds = round(row.build_seconds - (row.busy_seconds or 0.0) + cp, 3)
    served = files.served_calls() if row.simulated else []
    if row.simulated:  # calls whose content came later than the model says (the CPU's time shows)
        row.overrun_calls = sum(float(r.overrun_s or 0) > 0 for r in served)
        row.served_calls = len(served)
        _simulation_labels(row, config.llm_node, served)
    row.memories_stored, stored, row.stored_unit = stored_memories(builds)
    row.comparable = stored is None or stored > 0
    row.update_calls = update_calls(files.dir, builds, served)
    return row


@dataclass(frozen=True)
class _LatencyNode:
    """The stored `llm.latency_model` node, as far as the table's title reads it."""

    name: str | None = None
    source: str | None = None
    output_caps: Mapping[str, Any] | None = None
    source_max_items: int | None = None
    source_max_chars: int | None = None


def _simulation_labels(row: WritePathRow, llm: Any, served: Sequence[ServedCall]) -> None:
    """What a simulated run's table says of its simulation: latency model, content source, caps."""
    node = pick(_LatencyNode, llm.latency_model or {})
    source = str(node.source or "model")
    row.latency_model = node.name
    row.content_source = "replay" if source == "replay" else f"model:{llm.model or llm.name} ({llm.backend})"
    row.output_caps = dict(node.output_caps or {})
    row.source_bounds = {k: v for k, v in (("items", node.source_max_items), ("chars", node.source_max_chars))
                         if v is not None}
    row.capped_calls = sum(bool(r.capped) for r in served)
    row.bounded_calls = sum(bool(r.bounded) for r in served)
    row.reply_shapes = _counts(str(r.shape) for r in served if r.shape)


def _counts(names: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for name in names:
        out[name] = out.get(name, 0) + 1
    return dict(sorted(out.items()))


def _rate(value: float | None) -> float | None:
    return round(value, 3) if value is not None else None


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

