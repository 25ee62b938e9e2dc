"""The fields a record carries about a retrieval: its context, its evidence ranked by score, and the
dataset ids of that evidence that recall is scored on."""

from __future__ import annotations

from typing import Any

from baselines.base import Retrieval
from benchmarks.datasets import Instance
from benchmarks.harness.scoring import dedupe


def retrieval_fields(retrieval: Retrieval, instance: Instance | None = None) -> dict[str, Any]:
    """Evidence ranked by score (ties and unscored items keep the system's order) and its dataset ids.
    The id lists are left out when the system exposes no provenance, so no recall is computed.

    `ranking_..._ids` (only when the system ranked past its served evidence, `Retrieval.beyond`) are the
    served ids followed by the rest of the ranking: recall@k is scored on them, LongMemEval's way (the
    first k distinct ids of a ranking), and on `retrieved_..._ids` as the served evidence's recall.

    Scoring compares source ids: a session the loader kept under a derived id (`<id>#2`) counts as its
    source session, in `retrieved_session_ids` / `retrieved_turn_ids` as in the gold lists; the ids as
    the system returned them are kept beside them (`..._raw`) for instances that have such sessions."""
    items = list(enumerate(retrieval.evidence))
    if all(e.score is not None for _, e in items):
        items.sort(key=lambda pair: (-float(pair[1].score or 0.0), pair[0]))
    ranked = [e for _, e in items]
    out: dict[str, Any] = {
        "context": retrieval.context,
        "retrieved": [{"time": e.time, "score": e.score, "session_ids": e.session_ids, "turn_ids": e.turn_ids}
                     for e in ranked],
    }
    if not retrieval.ranked:
        return out  # the whole (truncated) history: recall@k would only measure its order
    source = instance if instance is not None and instance.session_aliases else None
    for level in ("session", "turn"):
        per_unit = [getattr(e, f"{level}_ids") for e in ranked]
        if ranked and not any(per_unit):
            continue  # the system names no ids of this level
        beyond = [getattr(e, f"{level}_ids") for e in retrieval.beyond]
        lists = {f"retrieved_{level}_ids": per_unit, **({f"ranking_{level}_ids": per_unit + beyond}
                                                          if any(beyond) else {})}
        for key, units in lists.items():
            ids = dedupe(i for unit in units for i in unit)
            out[key] = ids
            if source is not None:
                to_source = source.source_session if level == "session" else source.source_turn
                out.update({key: dedupe(to_source(i) for i in ids), f"{key}_raw": ids})
    return out
