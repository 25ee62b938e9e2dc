"""What a fact's occurrences imply (sessions, sorted sessions, earliest occurrence) stays exact while
the fact is copied for writing, said again and loses occurrences."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

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
@given(st.lists(st.tuples(st.sampled_from(["append", "copy", "drop", "drop_session", "read"]), st.integers(0, 40)),
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
        elif action == "drop_session":  # a session deleted: the view follows from the old one
            if n % 2:  # the sorted sessions computed before: carried over, less the session
                assert fact.sorted_sessions == brute(fact)[1]
            kept = [o for o in fact.occurrences if o.session_id != f"s{n % 7}"]
            if kept:
                fact.drop_session(kept, f"s{n % 7}")
        assert view(fact) == brute(fact)
    for old, seen in frozen:
        assert view(old) == seen
