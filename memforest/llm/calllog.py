"""The call log: one JSON record per model call, and its summary."""

from __future__ import annotations

import itertools
import json
import logging
import threading
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from memforest.errors import redact

logger = logging.getLogger(__name__)


@dataclass
class CallRecord:
    id: int
    stage: str
    prompt_id: str
    prompt_version: int
    wave: int
    level: int
    start: float
    end: float
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    completion_tokens: int = 0
    retries: int = 0
    error: str | None = None
    # why a failed call failed: "unavailable" (the model is gone), "busy" (timeouts or server errors
    # through every retry), "failed" (anything else), "unreachable" (a proxied request whose upstream
    # could not be reached); None for a call that succeeded or was recorded without it
    error_kind: str | None = None
    finish_reason: str | None = None
    model: str = ""
    tags: dict[str, Any] = field(default_factory=dict)

    @property
    def latency(self) -> float:
        return self.end - self.start


class CallLog:
    """Thread-safe collector of call records, mirrored to a JSONL file when a path is given.

    The log hands out call and wave ids, so that every scheduler and proxy writing to one log numbers
    its records uniquely; a log reopened on an existing file continues after the ids already there."""

    def __init__(self, path: str | Path | None = None) -> None:
        self._lock = threading.Lock()
        self.records: list[CallRecord] = []
        self.path = Path(path) if path else None
        self._file = None
        last_id = last_wave = 0
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.path.exists():
                last_id, last_wave = _last_ids(self.path)
            self._file = self.path.open("a", encoding="utf-8", buffering=1)
            if self._file.tell() and not ends_with_newline(self.path):
                self._file.write("\n")  # end a line torn by a crash, so the next record starts clean
        self._ids = itertools.count(last_id + 1)
        self._waves = itertools.count(last_wave + 1)

    def next_id(self) -> int:
        with self._lock:
            return next(self._ids)

    def next_wave(self) -> int:
        with self._lock:
            return next(self._waves)

    def add(self, record: CallRecord) -> None:
        if record.error:
            record.error = redact(record.error)  # a server's error body may echo the request's credentials
        with self._lock:
            self.records.append(record)
            if self._file:
                self._file.write(json.dumps(asdict(record), ensure_ascii=False) + "\n")

    def since(self, index: int) -> list[CallRecord]:
        with self._lock:
            return list(self.records[index:])

    def __len__(self) -> int:
        return len(self.records)

    def close(self) -> None:
        with self._lock:
            if self._file:
                self._file.close()
                self._file = None


def _last_ids(path: Path) -> tuple[int, int]:
    """The largest call and wave ids in a JSONL call log; a torn last line (a crash mid-write) is skipped."""
    last_id = last_wave = 0
    with path.open("rb") as f:
        for line in f:
            try:
                row = json.loads(line.decode("utf-8", errors="replace"))
                last_id = max(last_id, int(row.get("id") or 0))
                last_wave = max(last_wave, int(row.get("wave") or 0))
            except (ValueError, TypeError, AttributeError, OverflowError):
                continue  # not a record of ours: torn, foreign or damaged
    return last_id, last_wave


def ends_with_newline(path: Path) -> bool:
    with path.open("rb") as f:
        f.seek(-1, 2)
        return f.read(1) == b"\n"


def read_log(path: str | Path) -> list[CallRecord]:
    """The records of a JSONL call log; lines torn by a crash are skipped with a warning."""
    out, torn = [], 0
    with Path(path).open(encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                out.append(CallRecord(**json.loads(line)))
            except (ValueError, TypeError):
                torn += 1
    if torn:
        logger.warning("%s: skipped %d torn line(s)", path, torn)
    return out


EMBEDDING_STAGES = frozenset({"embed", "models"})  # proxied embedding and model-list requests


def summarize(records: Iterable[CallRecord]) -> dict[str, Any]:
    """Calls, waves, tokens by stage, wall time and critical path of a set of call records.

    The totals count chat (LLM) calls only; embedding requests seen by the logging proxy are listed by
    stage and counted apart (`embedding_calls`, `embedding_tokens`). The critical path is the chain of
    waves: each wave waits for its slowest call, so its length in seconds is the sum over waves of the
    longest call in that wave. Calls without a wave (id 0: proxied calls whose grouping is unknown)
    are left out of the waves and the critical path."""
    recs = list(records)
    by_stage: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    waves_by_stage: dict[str, set[int]] = defaultdict(set)
    wave_longest: dict[int, float] = {}
    for r in recs:
        s = by_stage[r.stage]
        s["calls"] += 1
        s["failed"] += r.error is not None
        s["retries"] += r.retries
        s["prompt_tokens"] += r.prompt_tokens
        s["cached_prompt_tokens"] += r.cached_prompt_tokens
        s["completion_tokens"] += r.completion_tokens
        s["call_seconds"] += r.latency
        if r.wave and r.stage not in EMBEDDING_STAGES:
            waves_by_stage[r.stage].add(r.wave)
            wave_longest[r.wave] = max(wave_longest.get(r.wave, 0.0), r.latency)
    for stage, s in by_stage.items():
        s["waves"] = len(waves_by_stage.get(stage, ()))
    chat = [s for stage, s in by_stage.items() if stage not in EMBEDDING_STAGES]
    total = {
        key: sum(s[key] for s in chat)
        for key in ("calls", "failed", "retries", "prompt_tokens", "cached_prompt_tokens",
                    "completion_tokens", "call_seconds")
    }
    embedding = [s for stage, s in by_stage.items() if stage in EMBEDDING_STAGES]
    wall = (max(r.end for r in recs) - min(r.start for r in recs)) if recs else 0.0
    return {
        **{k: int(v) if k != "call_seconds" else round(v, 3) for k, v in total.items()},
        "embedding_calls": int(sum(s["calls"] for s in embedding)),
        "embedding_tokens": int(sum(s["prompt_tokens"] for s in embedding)),
        "waves": len(wave_longest),
        "wall_seconds": round(wall, 3),
        "critical_path_seconds": round(sum(wave_longest.values()), 3),
        "by_stage": {
            stage: {k: (round(v, 3) if k == "call_seconds" else int(v)) for k, v in s.items()}
            for stage, s in sorted(by_stage.items())
        },
    }


def format_summary(summary: dict[str, Any]) -> str:
    """A fixed-width table of a summary, one row per stage and a total row."""
    cols = ("calls", "waves", "failed", "retries", "prompt_tokens", "cached_prompt_tokens",
            "completion_tokens", "call_seconds")
    heads = ("stage", "calls", "waves", "failed", "retries", "prompt", "cached", "completion", "call_s")
    rows = [[stage, *[str(s.get(c, 0)) for c in cols]] for stage, s in summary["by_stage"].items()]
    rows.append(["total (chat)", *[str(summary.get(c, 0)) for c in cols]])
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(heads)]
    lines = ["  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(heads, widths)))]
    for r in rows:
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(r, widths))))
    lines.append(
        f"wall {summary['wall_seconds']} s, critical path {summary['critical_path_seconds']} s "
        f"over {summary['waves']} waves"
    )
    return "\n".join(lines)
