"""Result rows, the mean, the pass@k estimator and the stages of proxied model calls, on the standard
library only: the one definition that both the paper's analysis and the harness's own report use (the
harness imports it from here, since analysis imports no project package)."""

from __future__ import annotations

import bisect
import itertools
import json
import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean
from typing import Any, TypeVar

from analysis.records import BuildRow, ServedCall

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


@dataclass(frozen=True)
class BuildCost:
    """The write-path figures of one build: its size and time, the model calls and tokens it recorded,
    and the waves derived from its calls' timestamps (`call_waves`: the same rule for every system; None
    where the run has none)."""

    turns: int | None
    build_seconds: float
    turns_per_second: float | None
    llm_calls: int
    prompt_tokens: int
    cached_prompt_tokens: int
    uncached_prompt_tokens: int
    completion_tokens: int
    derived_waves: int | None
    derived_critical_path_seconds: float | None
    busy_seconds: float | None
    max_in_flight: int | None


def build_figures(build: BuildRow) -> BuildCost:
    """The write-path figures of one build (a row of builds.jsonl), read the same way for the harness's
    write-path table and the paper's."""
    llm, derived = build.calls, build.call_waves
    prompt, cached = int(llm.prompt_tokens), int(llm.cached_prompt_tokens)
    return BuildCost(
        turns=build.turns, build_seconds=build.build_seconds, turns_per_second=build.turns_per_second,
        llm_calls=llm.calls, prompt_tokens=prompt, cached_prompt_tokens=cached,
        uncached_prompt_tokens=prompt - cached, completion_tokens=int(llm.completion_tokens),
        derived_waves=derived.waves if derived else None,
        derived_critical_path_seconds=derived.critical_path_seconds if derived else None,
        busy_seconds=derived.busy_seconds if derived else None,
        max_in_flight=derived.max_in_flight if derived else None,
    )


# Retrieval recall of one record (analysis.recall tabulates it; analysis.load adds it to every record).
RECALL_COLUMNS = ("recall_session_any", "recall_turn_any", "recall_turn_all", "recall_turn")


def ranked_ids(record: Mapping[str, Any], level: str, served: bool = False) -> list[str] | None:
    """A record's ranked ids of `level` (session | turn) that recall is scored on: the system's ranking
    (`ranking_<level>_ids`, which goes on past the served evidence where the system ranks further), else
    the served evidence's ids; with `served`, the served evidence's ids only. None without provenance."""
    served_ids = record.get(f"retrieved_{level}_ids")
    return served_ids if served else record.get(f"ranking_{level}_ids", served_ids)


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


# The stage of each model call of a simulated run. MemForest then reaches the latency-model server through
# the harness's logging proxy, which records every chat request under stage `chat`; the server records
# each request's prompt kind (served_calls.jsonl `kind`: the id of the MemForest prompt it opens with,
# else `json` or `text`), and the prompt id names the library's stage.
PROXY_STAGE = "chat"
PROMPT_STAGES = {  # MemForest prompt id -> the stage its caller records (memforest/facts, refresh, retrieval)
    "extract_facts": "extract", "fact_equivalence": "dedup", "interval_summary": "summarize",
    "browse_select": "browse", "query_plan": "plan", "answer_from_memory": "answer",
}
SPLIT_KEYS = ("calls", "failed", "prompt_tokens", "cached_prompt_tokens", "completion_tokens")


def build_spans(calls: Iterable[Mapping[str, Any]]) -> dict[str, tuple[float, float]]:
    """Per instance, the span (first start, last end) of the build-phase chat calls the proxy logged."""
    spans: dict[str, tuple[float, float]] = {}
    for call in calls:
        tags = call.get("tags") or {}
        if call.get("stage") != PROXY_STAGE or tags.get("phase") != "build" or tags.get("instance") is None:
            continue
        instance, start, end = str(tags["instance"]), float(call["start"]), float(call["end"])
        first, last = spans.get(instance, (start, end))
        spans[instance] = (min(first, start), max(last, end))
    return spans


Served = TypeVar("Served", ServedCall, Mapping[str, Any])


def served_by_build(served: Iterable[Served],
                    spans: Mapping[str, tuple[float, float]]) -> dict[str, list[Served]]:
    """The served calls of each build (`ServedCall`s, or served_calls.jsonl rows): those that arrived
    within its span and no other build's."""
    ordered = sorted(spans.items(), key=lambda item: item[1])
    firsts = [first for _, (first, _) in ordered]
    reach = list(itertools.accumulate((last for _, (_, last) in ordered), max))  # latest end so far
    out: dict[str, list[Served]] = {}
    for call in served:
        arrival = float((call.arrival if isinstance(call, ServedCall) else call.get("arrival")) or 0.0)
        before = bisect.bisect_right(firsts, arrival)  # the spans that start no later than the arrival
        if not before or reach[before - 1] < arrival:
            continue
        if before == 1 or reach[before - 2] < arrival:  # only the latest-starting span can hold it
            owners = [ordered[before - 1][0]]
        else:  # overlapping spans (builds that ran at once): look at each
            owners = [instance for instance, (first, last) in ordered[:before] if first <= arrival <= last]
        if len(owners) == 1:
            out.setdefault(owners[0], []).append(call)
    return out


def split_proxied(by_stage: Mapping[str, Mapping[str, Any]],
                  served: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]] | None:
    """A build's `llm.by_stage` with its proxied `chat` totals split by the library stage of each served
    call's prompt kind (`PROMPT_STAGES`; a kind that is no MemForest prompt stays `chat`), and what the
    served calls do not account for left under `chat`. The split rows carry calls, failures and tokens
    only: the served log does not tie a call's wall time or wave to a proxied call. None when there is
    nothing to split, or when the served calls hold more calls or tokens than the proxy counted (then
    they cannot all be this build's)."""
    chat = by_stage.get(PROXY_STAGE)
    split: dict[str, dict[str, int]] = {}
    for call in served:
        numbers = split.setdefault(PROMPT_STAGES.get(str(call.get("kind")), PROXY_STAGE),
                                   dict.fromkeys(SPLIT_KEYS, 0))
        numbers["calls"] += 1
        numbers["failed"] += call.get("error") is not None
        numbers["prompt_tokens"] += int(call.get("prompt_tokens") or 0)
        numbers["cached_prompt_tokens"] += int(call.get("cached_tokens") or 0)
        numbers["completion_tokens"] += int(call.get("completion_tokens") or 0)
    if not chat or not set(split) - {PROXY_STAGE}:
        return None
    rest = {key: int(chat.get(key, 0)) - sum(n[key] for n in split.values()) for key in SPLIT_KEYS}
    if any(value < 0 for value in rest.values()):
        return None
    unnamed = split.pop(PROXY_STAGE, dict.fromkeys(SPLIT_KEYS, 0))
    rest = {key: rest[key] + unnamed[key] for key in SPLIT_KEYS}
    out = {stage: dict(numbers) for stage, numbers in by_stage.items() if stage != PROXY_STAGE}
    for stage, numbers in [*split.items(), *([(PROXY_STAGE, rest)] if any(rest.values()) else [])]:
        before = out.get(stage, {})
        out[stage] = {**before, **{key: int(before.get(key, 0)) + numbers[key] for key in SPLIT_KEYS}}
    return out
