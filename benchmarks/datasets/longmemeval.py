"""LongMemEval loader (files `longmemeval_{s,oracle,m}` share one format; one instance per question).

Each entry holds `question_id` (suffix `_abs` marks an abstention question), `question_type`,
`question`, `answer` (sometimes an int), `question_date`, and the haystack: parallel lists
`haystack_session_ids`, `haystack_dates`, `haystack_sessions` (lists of `{role, content, has_answer?}`),
plus `answer_session_ids`.

Text is passed through `sanitize_text`: `<|endoftext|>` and similar special-token strings in the
source become visible placeholders such as `<endoftext>`, so they can never reach a model as control
tokens. Sessions are ordered by date (stable for equal dates); sessions dated after the question are
kept, as in the benchmark. A haystack that lists one session twice with the same date and content (13
haystacks of longmemeval_s do) keeps it once; the same id with other content is an error.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from baselines.base import Session, Turn

from .records import (
    Dataset,
    Instance,
    Question,
    answer_text,
    read_json_list,
    sanitize_text,
    select,
    sha256_file,
)

_DATE = re.compile(r"^\s*(\d{4})/(\d{1,2})/(\d{1,2})(?:\s*\([A-Za-z]+\))?(?:\s+(\d{1,2}):(\d{2}))?\s*$")
_WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
ABSTENTION_SUFFIX = "_abs"


def parse_date(text: str) -> datetime:
    """Parse `2023/05/30 (Tue) 23:40` (weekday and time optional)."""
    match = _DATE.match(text)
    if match is None:
        raise ValueError(f"unrecognised LongMemEval date: {text!r}")
    year, month, day, hour, minute = match.groups()
    return datetime(int(year), int(month), int(day), int(hour or 0), int(minute or 0))


def format_date(moment: datetime) -> str:
    """Inverse of `parse_date` (locale independent)."""
    return f"{moment:%Y/%m/%d} ({_WEEKDAYS[moment.weekday()]}) {moment:%H:%M}"


def parse_entry(entry: dict[str, Any]) -> tuple[Instance, int]:
    """One LongMemEval entry as an Instance holding its single question, and how many exact duplicate
    sessions were dropped from its haystack."""
    qid = str(entry["question_id"])
    ids, dates, raw_sessions, dropped = _unique_sessions(
        qid, [str(sid) for sid in entry["haystack_session_ids"]], entry["haystack_dates"], entry["haystack_sessions"])
    sessions = [
        _session(sid, parse_date(date), turns)
        for sid, date, turns in zip(ids, dates, raw_sessions, strict=True)
    ]
    sessions.sort(key=lambda session: session.timestamp)
    flagged = {f"{sid}:{index}" for sid, turns in zip(ids, raw_sessions, strict=True)
               for index, raw in enumerate(turns) if raw.get("has_answer")}
    evidence_turns = tuple(turn.turn_id for session in sessions for turn in session.turns if turn.turn_id in flagged)
    question = Question(
        question_id=qid,
        question=sanitize_text(str(entry["question"])),
        answer=answer_text(entry.get("answer")),
        category=str(entry["question_type"]),
        question_date=parse_date(entry["question_date"]) if entry.get("question_date") else None,
        evidence_sessions=tuple(str(sid) for sid in entry.get("answer_session_ids") or ()),
        evidence_turns=evidence_turns,
        abstention=qid.endswith(ABSTENTION_SUFFIX),
        extra={
            "question_type": entry["question_type"],
            "answer_was_int": isinstance(entry.get("answer"), int),
        },
    )
    return Instance(instance_id=qid, user_id=qid, sessions=tuple(sessions), questions=(question,)), dropped


def _unique_sessions(qid: str, ids: list[str], dates: list[Any], raw_sessions: list[Any]
                     ) -> tuple[list[str], list[Any], list[Any], int]:
    if not len(ids) == len(dates) == len(raw_sessions):
        raise ValueError(f"{qid}: haystack ids, dates and sessions differ in length")
    seen: dict[str, tuple[Any, Any]] = {}
    kept: list[int] = []
    for index, (sid, date, turns) in enumerate(zip(ids, dates, raw_sessions, strict=True)):
        if sid not in seen:
            seen[sid] = (date, turns)
            kept.append(index)
        elif seen[sid] != (date, turns):
            raise ValueError(f"{qid}: session {sid!r} appears twice with different dates or turns")
    return ([ids[i] for i in kept], [dates[i] for i in kept], [raw_sessions[i] for i in kept],
            len(ids) - len(kept))


def _session(session_id: str, timestamp: datetime, raw_turns: list[dict[str, Any]]) -> Session:
    turns = tuple(
        Turn(
            role=str(raw["role"]),
            content=sanitize_text(str(raw.get("content", ""))),
            timestamp=timestamp,
            turn_id=f"{session_id}:{index}",
        )
        for index, raw in enumerate(raw_turns)
    )
    return Session(session_id=session_id, timestamp=timestamp, turns=turns)


def load_longmemeval(
    path: str | Path,
    name: str = "longmemeval_s",
    limit: int | None = None,
    instance_ids: Sequence[str] | None = None,
) -> Dataset:
    """Load a LongMemEval-format JSON array from `path`."""
    path = Path(path)
    entries = read_json_list(path, "questions")
    chosen = select(entries, lambda entry: str(entry["question_id"]), limit, instance_ids)
    parsed = [parse_entry(entry) for entry in chosen]
    return Dataset(
        name=name, kind="longmemeval", instances=tuple(i for i, _ in parsed), sha256=sha256_file(path),
        source=str(path), duplicate_sessions_dropped=sum(n for _, n in parsed)
    )
