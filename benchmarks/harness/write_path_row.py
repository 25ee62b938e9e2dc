"""One run's write-path figures (`run_row`: a row of the write-path table, `write_path`, whose module
doc names each figure): means over its completed builds of their cost and call structure, the system's
own waves, and for a simulated run its modelled critical path and what its simulation was."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from analysis.records import BuildRow, CallSummary, ServedCall, pick
from analysis.rows import build_figures, build_spans, mean, served_by_build, write_rate
from benchmarks.harness.results import RunFiles, read_jsonl
from benchmarks.harness.simulation import CLIENT_LOG
from benchmarks.harness.stored_run import StoredRun
from benchmarks.serving.reply_shapes import BY_NAME, update_shapes
from memforest.llm.calllog import CallRecord, summarize

PHASE, INSTANCE = "phase", "instance"  # the call log's tags (harness/results.py RunCallLog)


@dataclass
class WritePathRow:
    """One run's write-path figures (write_path.json's rows; `write_path`'s module doc names each)."""

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
