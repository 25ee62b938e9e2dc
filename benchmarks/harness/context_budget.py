"""The context the answer model is handed: the retrieval within the token evidence budget
(`budget=tokens`) and within the answer prompt's window (every budget mode). The same code cuts every
system's retrieval; each system lays out what is kept in its own way.

- Token budget: the evidence items, in the system's rank order (`EvidenceItem.rank`, else their list
  order): the most that fit whole, then as much of the next as fits, rendered by the system itself
  (its `render`, default `render_evidence`: one line each) in their list order, so its sections,
  headers and dates stay as its retrieval lays them out and count against the budget. Unranked evidence
  (the whole history, in time order) keeps its newest items instead. Without evidence items, the
  context's start. Recall is then scored on the evidence the answer model is handed.
- Window: a context too long for the prompt loses its oldest evidence items (by `EvidenceItem.time`;
  items without a readable time from the end of the list, after the timed ones) until it fits, rendered
  the same way; the question is still answered, and its record says `prompt_cut: true`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from baselines.base import EvidenceItem, Retrieval, render_evidence

Count = Callable[[str], int]
Render = Callable[[Sequence[EvidenceItem]], str]  # a system's context for a subset of its evidence
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


def rank_order(items: Sequence[EvidenceItem]) -> list[int]:
    """Indices of `items` in the system's rank order: ranked items by rank, then the others in list order."""
    return sorted(range(len(items)), key=lambda i: (items[i].rank is None, items[i].rank or 0, i))


def _subset(items: Sequence[EvidenceItem], chosen: Sequence[int]) -> list[EvidenceItem]:
    return [items[i] for i in sorted(chosen)]


def _most_that_fit(size: int, fits: Callable[[int], bool]) -> int:
    """The largest n in 0..size with fits(n), for `fits` true up to some n and false after."""
    lo, hi = 0, size
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _partial_item(items: Sequence[EvidenceItem], kept: list[int], nxt: int, budget: int, count: Count,
                  render: Render) -> EvidenceItem | None:
    """Item `nxt` with as much of its text as fits beside `kept` in `budget` tokens; None if none does."""
    words = items[nxt].text.split()
    cut = list(items)

    def with_words(n: int) -> str:
        cut[nxt] = replace(items[nxt], text=" ".join(words[:n]))
        return render(_subset(cut, [*kept, nxt]))

    n = _most_that_fit(len(words), lambda n: count(with_words(n)) <= budget)
    return replace(items[nxt], text=" ".join(words[:n])) if n else None


def cut_to_budget(retrieval: Retrieval, budget: int, count: Count,
                  render: Render = render_evidence) -> tuple[Retrieval, dict[str, Any]]:
    """The retrieval as the answer model sees it under a token budget (its context, rendered by `render`,
    and the evidence that recall is scored on), and the record's fields about the cut."""
    items = list(retrieval.evidence)
    if not items:
        before = count(retrieval.context)
        context = retrieval.context[:longest_prefix(retrieval.context, budget, count)].rstrip()
        kept_items: list[EvidenceItem] = []
        partial = 0
    else:
        before = count(render(items))
        order = rank_order(items) if retrieval.ranked else list(reversed(range(len(items))))  # newest first
        whole = _most_that_fit(len(order), lambda n: count(render(_subset(items, order[:n]))) <= budget)
        kept, partial = list(order[:whole]), 0
        cut = list(items)
        if retrieval.ranked and whole < len(order):
            piece = _partial_item(items, kept, order[whole], budget, count, render)
            if piece is not None:
                cut[order[whole]] = piece
                kept, partial = [*kept, order[whole]], 1
        kept_items = _subset(cut, kept)
        context = render(kept_items)
    after = count(context)
    fields = {"evidence_cut": after < before or len(kept_items) < len(items),
              "evidence_budget": {"tokens": budget, "tokens_before": before, "tokens_after": after,
                                  "items": len(items), "kept": len(kept_items) - partial,
                                  "truncated": partial, "dropped": len(items) - len(kept_items)}}
    return replace(retrieval, context=context, evidence=kept_items), fields


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


def fit_window(context: str, evidence: Sequence[EvidenceItem], limit: int, count: Count,
               render: Render = render_evidence) -> tuple[str, dict[str, Any] | None]:
    """The context, if it fits in `limit` tokens (then no details); otherwise the evidence without its
    oldest items, rendered by `render` (without evidence items, the context's start), and the record's
    details of the cut."""
    limit = max(0, limit)
    before = count(context)
    if before <= limit:
        return context, None
    order = drop_order(evidence)
    lo, hi = 0, len(order)  # the fewest items dropped (in `order`) for the rest to fit
    while lo < hi:
        mid = (lo + hi) // 2
        gone = set(order[:mid])
        if count(render([e for i, e in enumerate(evidence) if i not in gone])) <= limit:
            hi = mid
        else:
            lo = mid + 1
    if evidence:
        gone = set(order[:lo])
        fitted = render([e for i, e in enumerate(evidence) if i not in gone])
    else:
        fitted = context[:longest_prefix(context, limit, count)].rstrip()
    return fitted, {"window_tokens": limit, "tokens_before": before, "tokens_after": count(fitted),
                    "items": len(evidence), "dropped": lo}
