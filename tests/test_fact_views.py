"""What a fact's occurrences imply (sessions, sorted sessions, earliest occurrence) stays exact while
the fact is copied for writing, said again and loses occurrences."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from memforest.state import UserState
from memforest.types import Fact, Occurrence


def occurrence(n: int) -> Occurrence:
    return Occurrence(session_id=f"s{n % 7}", cell_id=f"c{n}", turn_lo=0, turn_hi=1, source_time=float(n % 5),
                      event_start=None, event_end=None)


def brute(fact: Fact) -> tuple:
    occ = fact.occurrences
    first = min(occ, key=lambda o: (o.source_time, o.session_id), default=None)
    return {o.session_id for o in occ}, tuple(sorted({o.session_id for o in occ})), first


def view(fact: Fact) -> tuple:
    return set(fact.sessions), fact.sorted_sessions, fact.first


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["append", "copy", "drop", "drop_session", "read", "load"]),
                          st.integers(0, 40)),
                max_size=30))
def test_fact_views_follow_every_change(steps: list[tuple[str, int]]) -> None:
    fact = Fact("f", "t", "t", "user", "state", [], [], [], "", None, None, "", "", "", [occurrence(99)])
    frozen = []  # versions left behind by a copy: never changed again
    for action, n in steps:
        if action == "append":
            fact.occurrences.append(occurrence(n))
        elif action == "copy":  # the copy-on-write of a new version; the old one must not change
            frozen.append((fact, brute(fact)))
            fact = fact.copy_for_write()
        elif action == "drop":
            fact.occurrences = [o for o in fact.occurrences if o.session_id != f"s{n % 7}"] or [occurrence(n)]
        elif action == "load":  # as a load finds it: the earliest occurrence known, sessions not yet
            fact.knows_first(brute(fact)[2])
        elif action == "drop_session":  # a session deleted: the view follows from the old one
            if n % 2:  # the sorted sessions computed before: carried over, less the session
                assert fact.sorted_sessions == brute(fact)[1]
            kept = [o for o in fact.occurrences if o.session_id != f"s{n % 7}"]
            if kept:
                fact.drop_session(kept, f"s{n % 7}")
        assert view(fact) == brute(fact)
    for old, seen in frozen:
        assert view(old) == seen


def _store_after(was: list[Occurrence], removed: list[Occurrence], appended: list[Occurrence]) -> list | None:
    """The occurrence rows after an edit as the store applies it: each removed occurrence deletes the
    rows of its (session, cell, turns), and the edit is refused (None: written whole) when that
    deletes other rows than the removed ones."""
    key = lambda o: (o.session_id, o.cell_id, o.turn_lo, o.turn_hi)  # noqa: E731
    gone = {key(o) for o in removed}
    rows = [o for o in was if key(o) not in gone]
    return None if len(was) - len(rows) != len(removed) else rows + appended


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 30), max_size=40), st.sets(st.integers(0, 6)),
       st.lists(st.integers(0, 40), max_size=4), st.booleans())
def test_an_occurrence_edit_turns_the_stored_occurrences_into_the_new_ones(
        said: list[int], dropped: set[int], new: list[int], copies: bool) -> None:
    """A fact's sessions deleted (its occurrences from them dropped, order kept) and occurrences
    appended, as deleting and correcting sessions do: the edit written in place gives the new list,
    and removes only what went (never a kept occurrence deleted and written again)."""
    from memforest.store.commit import _occurrence_edit

    was = [occurrence(n) for n in said]
    now = [o for o in was if int(o.session_id[1:]) not in dropped]
    now += [was[n % len(was)]._replace() if copies and was else occurrence(n) for n in new]
    base, state = UserState("u"), UserState("u")
    for st_, occ in ((base, was), (state, now)):
        st_.facts["f"] = Fact("f", "t", "t", "user", "state", [], [], [], "", None, None, "", "", "", occ)
    edit = _occurrence_edit(base, state, "f")
    assert edit is not None  # every removal that keeps the order is an edit
    removed, appended = edit
    rows = _store_after(was, removed, appended)
    kept = [o for o in was if any(o is k for k in now)]
    if rows is not None:
        assert rows == now
    if not copies:  # no more than what went, no more than what came (fewer where a new one equals a gone one)
        assert len(removed) <= len(was) - len(kept) and len(appended) <= len(new)
