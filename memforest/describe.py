"""A plain, deterministic description of one user's memory (for `memforest show`)."""

from __future__ import annotations

from typing import Any

from memforest.state import UserState
from memforest.timeutil import iso_date, iso_minute


def describe(state: UserState, tree_id: str | None = None) -> dict[str, Any]:
    trees = [state.trees[t] for t in sorted(state.trees) if tree_id in (None, t)]
    state.read_facts()
    return {
        "user": state.user,
        "version": state.version,
        "counts": {
            "sessions": len(state.sessions),
            "cells": len(state.cells),
            "facts": len(state.facts),
            "occurrences": sum(len(f.occurrences) for f in state.facts.values()),
            "trees": len(state.trees),
            "trees_by_family": {fam: sum(1 for i in state.trees.values() if i.family == fam)
                                for fam in ("session", "entity", "scene")},
            "nodes": sum(len(i.tree.nodes) for i in state.trees.values()),
            "degraded_nodes": sum(1 for d in state.nodes.values() if d.mode == "degraded"),
        },
        "facts": [
            {"id": f.id, "text": f.text, "time": iso_date(f.time), "origin": f.origin, "role": f.role,
             "entities": f.entities, "topics": f.topics, "attribute": f.attribute, "domain": f.domain,
             "occurrences": [{"session_id": o.session_id, "cell_id": o.cell_id,
                              "turns": [o.turn_lo, o.turn_hi], "source_time": iso_minute(o.source_time),
                              "event_start": iso_date(o.event_start), "event_end": iso_date(o.event_end)}
                             for o in f.occurrences]}
            for f in sorted(state.facts.values(), key=lambda f: (f.time, f.id))
        ],
        "trees": [_tree(state, info) for info in trees],
    }


def _tree(state: UserState, info: Any) -> dict[str, Any]:
    t = info.tree
    nodes = []
    for nid in sorted(t.nodes, key=lambda n: (-t.nodes[n].level, t.nodes[n].key_lo, n)):
        n = t.nodes[nid]
        data = state.nodes.get((info.tree_id, nid))
        nodes.append({"id": nid, "level": n.level, "parent": n.parent, "children": list(n.children),
                      "from": iso_minute(n.t_lo), "to": iso_minute(n.t_hi), "leaves": n.count, "item": n.item,
                      "mode": data.mode if data else None, "text": data.text if data else None})
    return {"tree_id": info.tree_id, "family": info.family, "label": info.label, "fanout": t.fanout,
            "height": t.height, "leaves": len(t), "root": t.root, "nodes": nodes}


def format_text(desc: dict[str, Any]) -> str:
    c = desc["counts"]
    lines = [f"user {desc['user']} (version {desc['version']}): {c['sessions']} sessions, "
             f"{c['cells']} cells, {c['facts']} facts, {c['trees']} trees ({c['trees_by_family']}), "
             f"{c['nodes']} nodes"]
    lines.append("\nfacts:")
    lines += [f"  [{f['time']}] {f['text']}  ({f['id']}, {len(f['occurrences'])} occ.)"
              for f in desc["facts"]]
    for tr in desc["trees"]:
        lines.append(f"\n{tr['tree_id']}  k={tr['fanout']} height={tr['height']} leaves={tr['leaves']}")
        for n in tr["nodes"]:
            if n["level"] == 0:
                continue
            text = " ".join((n["text"] or "").split())
            lines.append(f"  {'  ' * (tr['height'] - n['level'])}L{n['level']} #{n['id']} "
                         f"{n['from'][:10]}..{n['to'][:10]} ({n['leaves']} leaves, "
                         f"{n['mode']}): {text[:160]}")
    return "\n".join(lines)
