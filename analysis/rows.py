"""Result rows, the mean and the pass@k estimator, on the standard library only: the one definition that both
the paper's analysis and the harness's own report use (the harness imports it from here, since
analysis imports no project package)."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from statistics import fmean
from typing import Any

log = logging.getLogger(__name__)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """All complete rows of a JSONL file (none if it does not exist); a line torn by an interrupted
    write is skipped with a warning."""
    if not path.exists():
        return []
    rows = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                log.warning("%s:%d: skipping a torn line", path, number)
    return rows


def mean(values: Iterable[float]) -> float | None:
    """The arithmetic mean (`statistics.fmean`), None when there are no values."""
    values = list(values)
    return fmean(values) if values else None


def write_rate(turns: Iterable[float], seconds: Iterable[float]) -> float | None:
    """Write throughput: every source turn written over every second of build time (a rate of totals,
    not a mean of per-build rates); None without build time."""
    total = sum(seconds)
    return sum(turns) / total if total > 0 else None


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct: 1 - C(n-c, k) / C(n, k)."""
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def build_figures(build: Mapping[str, Any]) -> dict[str, Any]:
    """The write-path figures of one build (a row of builds.jsonl), read the same way for the harness's
    write-path table and the paper's: its size and time, the model calls and tokens it recorded, and the
    waves derived from its calls' timestamps (`call_waves`: the same rule for every system; None where
    the run has none)."""
    llm = build.get("llm") or {}
    derived = build.get("call_waves") or {}
    prompt = int(llm.get("prompt_tokens", 0))
    cached = int(llm.get("cached_prompt_tokens", 0))
    return {
        "turns": build.get("turns"), "build_seconds": build.get("build_seconds"),
        "turns_per_second": build.get("turns_per_second"), "llm_calls": llm.get("calls", 0),
        "prompt_tokens": prompt, "cached_prompt_tokens": cached, "uncached_prompt_tokens": prompt - cached,
        "completion_tokens": int(llm.get("completion_tokens", 0)),
        "derived_waves": derived.get("waves"),
        "derived_critical_path_seconds": derived.get("critical_path_seconds"),
        "busy_seconds": derived.get("busy_seconds"), "max_in_flight": derived.get("max_in_flight"),
    }


# Retrieval recall of one record (analysis.recall tabulates it; analysis.load adds it to every record).
RECALL_COLUMNS = ("recall_session_any", "recall_turn_any", "recall_turn_all", "recall_turn")


def record_recall(record: Mapping[str, Any]) -> dict[str, float | None]:
    """The recall columns of one record (None where it has no gold or no retrieved ids of a level)."""
    out: dict[str, float | None] = dict.fromkeys(RECALL_COLUMNS)
    if record.get("abstention"):
        return out
    for level in ("session", "turn"):
        gold = {str(g) for g in record.get(f"evidence_{level}s") or ()}
        got = record.get(f"retrieved_{level}_ids")
        if not gold or got is None:
            continue
        found = gold & {str(g) for g in got}
        if level == "session":
            out["recall_session_any"] = float(bool(found))
        else:
            out.update(recall_turn_any=float(bool(found)), recall_turn_all=float(found == gold),
                       recall_turn=len(found) / len(gold))
    return out
