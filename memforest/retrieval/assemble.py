"""From browsed leaves to the final evidence: resolve, add temporal neighbours, dedupe, cut, render."""

from __future__ import annotations

import numpy as np

from memforest.resident.ondemand import NodeKey
from memforest.retrieval.browse import Hit
from memforest.retrieval.results import Evidence
from memforest.timeutil import iso_date
from memforest.trees.memtree import Node
from memforest.versions.snapshot import Snapshot

NEIGHBOUR_WINDOW = 8
ANCHORS = 3


def to_evidence(snap: Snapshot, key: NodeKey, score: float, via: str) -> Evidence:
    item = snap.state.trees[key[0]].tree.nodes[key[1]].item
    assert item is not None
    if item in snap.state.facts:
        f = snap.state.facts[item]
        return Evidence("fact", f.id, f.text, iso_date(f.time), score, key[0], via, list(f.sorted_sessions))
    c = snap.state.cells[item]
    return Evidence("cell", c.id, c.text, iso_date(c.time), score, key[0], via, [c.session_id])


def temporal_neighbours(
    snap: Snapshot, hits: list[Hit], direction: str, qvec: np.ndarray
) -> list[tuple[Hit, NodeKey]]:
    """For the best fact leaves in entity and scene trees, the nearest leaf on the asked side of the
    match that concerns the same attribute (or, lacking one, the most query-like leaf in a short window)."""
    if direction not in ("before", "after"):
        return []
    out = []
    anchors = [h for h in hits if snap.state.trees[h.key[0]].family != "session"][:ANCHORS]
    for hit in anchors:
        tree = snap.state.trees[hit.key[0]].tree
        anchor_fact = snap.state.facts.get(tree.nodes[hit.key[1]].item or "")
        window: list[Node] = []
        node = tree.nodes[hit.key[1]]
        while len(window) < NEIGHBOUR_WINDOW:
            nxt = node.prev if direction == "before" else node.next
            if nxt is None:
                break
            node = tree.nodes[nxt]
            window.append(node)
        if not window or anchor_fact is None:
            continue
        same = [n for n in window if anchor_fact.attribute and
                snap.state.facts.get(n.item or "") is not None and
                snap.state.facts[n.item].attribute == anchor_fact.attribute]  # type: ignore[index]
        best = (same[0] if same
                else max(window, key=lambda n: float(snap.state.nodes[(hit.key[0], n.id)].embedding @ qvec)))
        out.append((hit, (hit.key[0], best.id)))
    return out


def assemble(
    snap: Snapshot, hits: list[Hit], neighbours: list[tuple[Hit, NodeKey]], budget: int, direction: str,
) -> list[Evidence]:
    """Temporal neighbours first (they answer before/after questions), then hits by score; one item
    per fact or cell; at most `budget` items, rendered in time order."""
    ranked: list[Evidence] = []
    for anchor, key in neighbours:
        ranked.append(to_evidence(snap, key, anchor.score, f"temporal:{direction}"))
    for h in sorted(hits, key=lambda h: (-h.score, h.key)):
        ranked.append(to_evidence(snap, h.key, h.score, "browse"))
    seen: set[tuple[str, str]] = set()
    out = []
    for ev in ranked:
        if (ev.kind, ev.id) in seen:
            continue
        seen.add((ev.kind, ev.id))
        out.append(ev)
        if len(out) == budget:
            break
    return sorted(out, key=lambda e: (e.time, e.id))


def render(evidence: list[Evidence]) -> str:
    return "\n".join(f"[{e.time}] {' '.join(e.text.split())}" for e in evidence)
