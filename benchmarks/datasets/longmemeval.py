"""LongMemEval loader (files `longmemeval_{s,oracle,m}` share one format; one instance per question).

Each entry holds `question_id` (suffix `_abs` marks an abstention question), `question_type`,
`question`, `answer` (sometimes an int), `question_date`, and the haystack: parallel lists
`haystack_session_ids`, `haystack_dates`, `haystack_sessions` (lists of `{role, content, has_answer?}`),
plus `answer_session_ids`.

Text is passed through `sanitize_text`: `<|endoftext|>` and similar special-token strings in the
source become visible placeholders such as `<endoftext>`, so they can never reach a model as control
tokens. Sessions are ordered by date (stable for equal dates); sessions dated after the question are
kept, as in the benchmark.

Real files list some sessions twice in one haystack. A repeat with the same date and turns is kept
once (counted); a repeat with another date or other turns is kept as its own session under the derived
id `<id>#2` (`#3`, ... in file order), with turn ids `<id>#2:<index>` and its own `has_answer` flags;
`Instance.session_aliases` maps it back to `<id>` for scoring. Turns with nothing readable (empty, or
only a zero-width space) are dropped with a count, and so is a session left with none; turn ids stay
the source positions, so gold evidence ids still resolve. An entry that cannot be read (a missing field,
a bad date, a wrong type) becomes a `load` failure of that question, and the others load.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from baselines.base import Session, Turn

from .errata import Errata, apply_errata, check_known
from .records import (
    Dataset,
    Instance,
    LoadCounts,
    Question,
    answer_text,
    clean_sessions,
    entry_id,
    json_type,
    parse_entries,
    read_json_list,
    sanitize_text,
    scalar_text,
    select,
    sha256_file,
)

_DATE = re.compile(r"^\s*(\d{4})/(\d{1,2})/(\d{1,2})(?:\s*\([A-Za-z]+\))?(?:\s+(\d{1,2}):(\d{2}))?\s*$")
_WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
ABSTENTION_SUFFIX = "_abs"


def parse_date(text: Any) -> datetime:
    """Parse `2023/05/30 (Tue) 23:40` (weekday and time optional)."""
    match = _DATE.match(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"unrecognised LongMemEval date: {text!r}")
    year, month, day, hour, minute = match.groups()
    return datetime(int(year), int(month), int(day), int(hour or 0), int(minute or 0))


def format_date(moment: datetime) -> str:
    """Inverse of `parse_date` (locale independent)."""
    return f"{moment:%Y/%m/%d} ({_WEEKDAYS[moment.weekday()]}) {moment:%H:%M}"


def parse_entry(entry: Any) -> Instance:
    """One LongMemEval entry as an Instance holding its single question."""
    if not isinstance(entry, dict):
        raise ValueError(f"an entry must be a JSON object, got a JSON {json_type(entry)}")
    qid = scalar_text(entry["question_id"], "question_id")
    haystack, aliases, duplicates = _haystack(entry)
    raw_sessions = [_session(sid, parse_date(date), turns) for sid, date, turns in haystack]
    sessions, counts = clean_sessions(sorted(raw_sessions, key=lambda session: session.timestamp))
    flagged = {f"{sid}:{index}" for sid, _, turns in haystack for index, raw in enumerate(turns)
               if raw.get("has_answer")}
    evidence_turns = tuple(turn.turn_id for session in sessions for turn in session.turns
                           if turn.turn_id in flagged)
    answer = entry.get("answer")
    question = Question(
        question_id=qid,
        question=sanitize_text(scalar_text(entry["question"], "question")),
        answer=answer_text(answer),
        category=scalar_text(entry["question_type"], "question_type"),
        question_date=parse_date(entry["question_date"]) if entry.get("question_date") else None,
        evidence_sessions=tuple(str(sid) for sid in _list(entry, "answer_session_ids", required=False)),
        evidence_turns=evidence_turns,
        abstention=qid.endswith(ABSTENTION_SUFFIX),
        extra={"question_type": entry["question_type"], "answer_was_int": json_type(answer) == "int"},
        answer_type=json_type(answer),
    )
    repeats = LoadCounts(duplicate_sessions_dropped=duplicates, sessions_renamed=len(aliases))
    return Instance(instance_id=qid, user_id=qid, sessions=tuple(sessions), questions=(question,),
                    session_aliases=aliases, counts=counts + repeats)


def _list(entry: dict[str, Any], key: str, required: bool = True) -> list[Any]:
    value = entry[key] if required else entry.get(key)
    if value is None and not required:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{key} must be a list, got a JSON {json_type(value)}")
    return value


def _haystack(entry: dict[str, Any]) -> tuple[list[tuple[str, Any, list[Any]]], dict[str, str], int]:
    """The haystack as (session id, date, raw turns), each repeat with the same date and turns dropped
    and each repeat with another date or turns under a derived id; the derived ids -> their source ids;
    the number of repeats dropped."""
    ids = [scalar_text(sid, "a haystack session id") for sid in _list(entry, "haystack_session_ids")]
    dates, raw_sessions = _list(entry, "haystack_dates"), _list(entry, "haystack_sessions")
    if not len(ids) == len(dates) == len(raw_sessions):
        raise ValueError(f"haystack ids, dates and sessions differ in length "
                         f"({len(ids)}, {len(dates)}, {len(raw_sessions)})")
    taken = set(ids)
    occurrences: dict[str, list[tuple[Any, Any]]] = {}
    kept: list[tuple[str, Any, list[Any]]] = []
    aliases: dict[str, str] = {}
    for sid, date, turns in zip(ids, dates, raw_sessions, strict=True):
        if not isinstance(turns, list):
            raise ValueError(f"session {sid!r} must be a list of turns, got a JSON {json_type(turns)}")
        seen = occurrences.setdefault(sid, [])
        if (date, turns) in seen:
            continue
        seen.append((date, turns))
        kept_id = sid if len(seen) == 1 else _derived_id(sid, len(seen), taken)
        if kept_id != sid:
            aliases[kept_id] = sid
            taken.add(kept_id)
        kept.append((kept_id, date, turns))
    return kept, aliases, len(ids) - len(kept)


def _derived_id(session_id: str, occurrence: int, taken: set[str]) -> str:
    """`<id>#<n>` for the n-th distinct occurrence, the next free n when the file holds that id too."""
    n = occurrence
    while f"{session_id}#{n}" in taken:
        n += 1
    return f"{session_id}#{n}"


def _session(session_id: str, timestamp: datetime, raw_turns: list[Any]) -> Session:
    turns = []
    for index, raw in enumerate(raw_turns):
        where = f"session {session_id!r} turn {index}"
        if not isinstance(raw, dict):
            raise ValueError(f"{where} must be a JSON object, got a JSON {json_type(raw)}")
        turns.append(Turn(
            role=scalar_text(raw["role"], f"{where} role"),
            content=sanitize_text(scalar_text(raw.get("content"), f"{where} content")),
            timestamp=timestamp,
            turn_id=f"{session_id}:{index}",
        ))
    return Session(session_id=session_id, timestamp=timestamp, turns=tuple(turns))


def load_longmemeval(
    path: str | Path,
    name: str = "longmemeval_s",
    limit: int | None = None,
    instance_ids: Sequence[str] | None = None,
    errata: Errata | None = None,
) -> Dataset:
    """Load a LongMemEval-format JSON array from `path`, with `errata` applied when given."""
    path = Path(path)
    entries = read_json_list(path, "questions")
    pairs = [(entry_id(entry, "question_id", i), entry) for i, entry in enumerate(entries)]
    if errata is not None:
        check_known(errata, {iid for iid, _ in pairs}, str(path))
    instances, failures = parse_entries(select(pairs, lambda pair: pair[0], limit, instance_ids), parse_entry)
    applied = None
    if errata is not None:
        instances, applied = apply_errata(instances, errata, errata_evidence)
    return Dataset(name=name, kind="longmemeval", instances=instances, sha256=sha256_file(path),
                   source=str(path), failures=failures, errata=applied)


def errata_evidence(instance: Instance, question: Question, ids: Sequence[str]
                    ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """An erratum's evidence: session ids and `<session>:<index>` turn ids of the haystack. Without turn
    ids, the turn evidence is the question's flagged turns within the new sessions."""
    turns = tuple(dict.fromkeys(i for i in ids if ":" in i))
    named = [i for i in ids if ":" not in i]
    sessions = tuple(dict.fromkeys([*named, *(t.rpartition(":")[0] for t in turns)]))
    known = {s.session_id for s in instance.sessions} | set(instance.session_aliases.values())
    unknown = [sid for sid in sessions if sid not in known]
    if unknown:
        raise ValueError(f"evidence names sessions the haystack does not hold: {', '.join(unknown[:5])}")
    if not turns:
        turns = tuple(t for t in question.evidence_turns
                      if instance.source_turn(t).rpartition(":")[0] in sessions)
    return sessions, turns
