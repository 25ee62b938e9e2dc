"""Entity scopes: one `entity:user` tree for user-origin facts, and a tree per entity label once the
label has been seen in enough facts from enough sessions (then back-filled with all its facts)."""

from __future__ import annotations

import re
from collections.abc import Set as AbstractSet

from memforest.config import EntityConfig
from memforest.state import UserState
from memforest.types import EntityStat, Fact

USER_TREE = "entity:user"
_NON_ALNUM = re.compile(r"[^0-9a-z]+")
_ROLE_WORDS = frozenset(
    ["user", "assistant", "the_user", "the_assistant", "i", "me", "my", "mine", "you", "your", "yours", "we",
     "us", "our", "they", "them", "their", "he", "him", "his", "she", "her", "it", "its", "someone",
     "somebody", "everyone", "people", "person", "speaker", "narrator", "ai", "bot", "chatbot", "model",
     "human", "friend", "friends", "family"]
)
_DATE_WORDS = frozenset(
    ["today", "yesterday", "tomorrow", "tonight", "morning", "evening", "week", "month", "year", "weekend",
     "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday", "january", "february",
     "march", "april", "may", "june", "july", "august", "september", "october", "november", "december", "jan",
     "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec", "spring", "summer",
     "autumn", "fall", "winter"]
)
_DATE = re.compile(r"^(\d{1,4}(st|nd|rd|th)?_?)+$|^\d{4}_\d{1,2}(_\d{1,2})?$")


def normalize_label(raw: str, max_words: int) -> str | None:
    """A label key for an entity mention, or None when it names a role, a date, a number or is too long."""
    if len(raw.split()) > max_words:
        return None
    label = _NON_ALNUM.sub("_", raw.lower()).strip("_")
    if not label or label.isdigit() or label in _ROLE_WORDS or _DATE.match(label):
        return None
    if all(part in _DATE_WORDS or part.isdigit() for part in label.split("_")):
        return None
    return label


def fact_labels(fact: Fact, cfg: EntityConfig) -> set[str]:
    labels = (normalize_label(e, cfg.max_label_words) for e in fact.entities)
    return {label for label in labels if label}


def record_mentions(state: UserState, fact: Fact, cfg: EntityConfig,
                    moved: tuple[AbstractSet[str], AbstractSet[str]]) -> dict[str, bool]:
    """Count `fact` against its labels, given the sessions it gained and lost in this operation
    (`moved`; a fact new to the memory gained all of its own); return each label whose stats changed,
    and whether the fact is new to that label. The fact's sessions are read only for a label it is
    new to (a fact said in thousands of sessions is counted by what moved, not by all of them)."""
    changed: dict[str, bool] = {}
    for label in fact_labels(fact, cfg):
        if label not in state.entities:
            state.entities[label] = EntityStat(label)
        stat = state.writable_entity(label)
        is_new = fact.id not in stat.facts
        stat.add_fact(fact.id)
        if is_new:
            _count(stat, fact.sessions, +1)
        else:
            _count(stat, moved[0], +1)
            _count(stat, moved[1], -1)
        changed[label] = is_new
    return changed


def forget_fact(state: UserState, fact: Fact, cfg: EntityConfig) -> set[str]:
    """Remove a fact from its labels' stats; return the labels touched."""
    touched = set()
    for label in fact_labels(fact, cfg):
        if label in state.entities and fact.id in state.entities[label].facts:
            stat = state.writable_entity(label)
            stat.discard_fact(fact.id)
            _count(stat, fact.sessions, -1)
            touched.add(label)
    return touched


def _count(stat: EntityStat, sessions: AbstractSet[str], delta: int) -> None:
    for sid in sessions:
        stat.count(sid, delta)


def is_active(stat: EntityStat, cfg: EntityConfig) -> bool:
    return len(stat.facts) >= cfg.min_facts and len(stat.sessions) >= cfg.min_sessions


def session_counts(state: UserState, stat: EntityStat) -> dict[str, int]:
    counts: dict[str, int] = {}
    for fid in stat.facts:
        fact = state.facts.get(fid)
        for sid in fact.sessions if fact else ():
            counts[sid] = counts.get(sid, 0) + 1
    return counts
