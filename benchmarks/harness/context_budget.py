"""The context the answer model is handed: the retrieval within the token evidence budget
(`budget=tokens`) and within the answer prompt's window (every budget mode). The same code cuts every
system's retrieval; adapters know nothing of it.

- Token budget: the evidence items, rendered by the harness the same way for every system
  (`render_evidence`, one line each), in the adapter's order: the first items that fit whole, then as
  much of the next as fits. A system's own layout of its context (headers, templates) is not used, so
  it neither counts against the budget nor differs between systems. Unranked evidence (the whole
  history, in time order) keeps its newest items instead. Without evidence items, the context's start.
  Recall is then scored on the evidence the answer model is handed.
- Window: a context too long for the prompt loses its oldest evidence items (by `EvidenceItem.time`;
  items without a readable time from the end of the list, after the timed ones) until it fits; the
  question is still answered, and its record says `prompt_cut: true`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from baselines.base import EvidenceItem, Retrieval, render_evidence

Count = Callable[[str], int]
TIME_FORMATS = ("%Y/%m/%d (%a) %H:%M", "%Y/%m/%d", "%I:%M %p on %d %B, %Y", "%d %B %Y")


def longest_prefix(text: str, limit: int, count: Count, at_least: int = 0) -> int:
    """The length of the longest start of `text` that counts at most `limit` tokens (searched from
    `at_least` characters on)."""
    lo, hi = at_least, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count(text[:mid]) <= limit:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _whole_items(items: Sequence[EvidenceItem], budget: int, count: Count, newest: bool) -> int:
    """How many items, from the start (or from the end when `newest`), fit whole in `budget` tokens."""
    lo, hi = 0, len(items)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        part = items[len(items) - mid:] if newest else items[:mid]
        if count(render_evidence(part)) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _partial_item(kept: list[EvidenceItem], item: EvidenceItem, budget: int,
                  count: Count) -> EvidenceItem | None:
    """`item` with as much of its text as fits after `kept` in `budget` tokens, behind its time tag;
    None if none of its text does."""
    head = render_evidence(kept)
    text = render_evidence([*kept, item])
    start = len(text) - len(" ".join(item.text.split()))  # where its text begins, after its time tag
    keep = longest_prefix(text, budget, count, at_least=len(head))
    piece = text[start:keep].strip() if keep > start else ""
    return replace(item, text=piece) if piece else None


def cut_to_budget(retrieval: Retrieval, budget: int, count: Count) -> tuple[Retrieval, dict[str, Any]]:
    """The retrieval as the answer model sees it under a token budget (its context and the evidence
    that recall is scored on), and the record's fields about the cut."""
    items = list(retrieval.evidence)
    if not items:
        before = count(retrieval.context)
        context = retrieval.context[:longest_prefix(retrieval.context, budget, count)].rstrip()
        kept, partial = [], 0
    else:
        before = count(render_evidence(items))
        whole = _whole_items(items, budget, count, newest=not retrieval.ranked)
        if not retrieval.ranked:  # a history: its newest whole items
            kept, partial = items[len(items) - whole:], 0
        else:
            kept, partial = items[:whole], 0
            if whole < len(items):
                piece = _partial_item(kept, items[whole], budget, count)
                if piece is not None and count(render_evidence([*kept, piece])) <= budget:
                    kept, partial = [*kept, piece], 1
        context = render_evidence(kept)
    after = count(context)
    fields = {"evidence_cut": after < before or len(kept) < len(items),
              "evidence_budget": {"tokens": budget, "tokens_before": before, "tokens_after": after,
                                  "items": len(items), "kept": len(kept) - partial, "truncated": partial,
                                  "dropped": len(items) - len(kept)}}
    return replace(retrieval, context=context, evidence=kept), fields


def item_time(item: EvidenceItem) -> datetime | None:
    """The item's time, read from the formats adapters write (ISO, LongMemEval's, LoCoMo's); None if none."""
    text = (item.time or "").strip()
    if not text:
        return None
    try:
        return datetime.fromisoformat(text).replace(tzinfo=None)
    except ValueError:
        pass
    for fmt in TIME_FORMATS:
        try:
            return datetime.strptime(text, fmt)
        except ValueError:
            continue
    return None


def drop_order(items: Sequence[EvidenceItem]) -> list[int]:
    """Indices of `items`, the first to drop first: the oldest timed items (of equal times, the later in
    the list first), then the items without a readable time from the end of the list."""
    times = [item_time(e) for e in items]
    timed = sorted((i for i, t in enumerate(times) if t is not None), key=lambda i: (times[i], -i))
    return timed + [i for i in reversed(range(len(items))) if times[i] is None]


def fit_window(context: str, evidence: Sequence[EvidenceItem], limit: int,
               count: Count) -> tuple[str, dict[str, Any] | None]:
    """The context, if it fits in `limit` tokens (then no details); otherwise the evidence without its
    oldest items, rendered by the harness (without evidence items, the context's start), and the
    record's details of the cut."""
    limit = max(0, limit)
    before = count(context)
    if before <= limit:
        return context, None
    order = drop_order(evidence)
    lo, hi = 0, len(order)  # the fewest items dropped (in `order`) for the rest to fit
    while lo < hi:
        mid = (lo + hi) // 2
        gone = set(order[:mid])
        if count(render_evidence([e for i, e in enumerate(evidence) if i not in gone])) <= limit:
            hi = mid
        else:
            lo = mid + 1
    if evidence:
        gone = set(order[:lo])
        fitted = render_evidence([e for i, e in enumerate(evidence) if i not in gone])
    else:
        fitted = context[:longest_prefix(context, limit, count)].rstrip()
    return fitted, {"window_tokens": limit, "tokens_before": before, "tokens_after": count(fitted),
                    "items": len(evidence), "dropped": lo}
