"""Deleting and correcting sessions: edit the persistent state first, then refresh only the
invalidated paths."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from memforest.config import MemForestConfig
from memforest.errors import InputError
from memforest.routing.router import Router
from memforest.state import ChangeSet, UserState


def delete_session(state: UserState, session_id: str, cfg: MemForestConfig, ch: ChangeSet,
                   fact_ids: Iterable[str] | None = None) -> dict[str, Any]:
    """Remove a session, its cells, the occurrences it produced and the facts left without any;
    remove their leaves from every tree (rebalancing) and update the routers. Returns counts.
    `fact_ids`: the facts with an occurrence in the session, when known (else every fact is looked at)."""
    if session_id not in state.sessions:
        raise InputError(f"no session {session_id!r} for user {state.user!r}")
    router = Router(state, cfg, ch)
    router.drop_session_tree(session_id)
    for cid in state.session_cells.pop(session_id, []):
        state.cells.pop(cid, None)
        if cid in state.pending_cells:
            state.pending_cells.discard(cid)
            ch.pending_cells = True
    state.remove_session(session_id)
    ch.deleted_sessions.add(session_id)
    ch.sessions.discard(session_id)
    orphaned, thinned = [], []
    for fid in sorted(state.facts if fact_ids is None else fact_ids):
        fact = state.facts.get(fid)
        if fact is None:
            continue
        kept = [o for o in fact.occurrences if o.session_id != session_id]  # one pass, however many
        if len(kept) == len(fact.occurrences):  # not said in this session
            continue
        if kept:
            fact = state.writable_fact(fid)
            fact.drop_session(kept, session_id)
            ch.facts.add(fact.id)
            thinned.append(fact)
        else:
            orphaned.append(fact)
    for fact in orphaned:
        router.remove_fact(fact)
    router.recount(thinned, session_id)
    return {"session_id": session_id, "facts_removed": len(orphaned), "facts_thinned": len(thinned)}
