"""Validation of incoming sessions: every problem is an InputError naming it."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from memforest.errors import InputError
from memforest.timeutil import parse_time
from memforest.types import ROLES, Session, Turn

_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@+-]{0,127}$")


def check_id(value: Any, what: str) -> str:
    """A user or session id: letters, digits and `_.:@+-`, not starting with punctuation."""
    if not isinstance(value, str) or not _SAFE_ID.match(value) or ".." in value:
        raise InputError(f"unsafe or empty {what} {value!r}: use letters, digits and _.:@+- only")
    return value


def parse_session(raw: Mapping[str, Any]) -> Session:
    """A Session from `{session_id, timestamp, turns: [{role, content, timestamp?}]}`."""
    if not isinstance(raw, Mapping):
        raise InputError(f"a session must be an object, got {type(raw).__name__}")
    sid = check_id(raw.get("session_id"), "session id")
    if raw.get("timestamp") in (None, ""):
        raise InputError(f"session {sid}: missing timestamp")
    t0 = parse_time(raw["timestamp"], f"session {sid} timestamp")
    turns_raw = raw.get("turns")
    if not isinstance(turns_raw, list) or not turns_raw:
        raise InputError(f"session {sid}: 'turns' must be a non-empty list")
    turns = [_parse_turn(sid, i, t, t0) for i, t in enumerate(turns_raw)]
    return Session(sid, t0, turns)


def _parse_turn(sid: str, i: int, raw: Any, session_time: float) -> Turn:
    where = f"session {sid} turn {i}"
    if not isinstance(raw, Mapping):
        raise InputError(f"{where}: a turn must be an object")
    role = raw.get("role")
    if role not in ROLES:
        raise InputError(f"{where}: unknown role {role!r} (expected one of {', '.join(ROLES)})")
    content = raw.get("content")
    if not isinstance(content, str) or not content.strip():
        raise InputError(f"{where}: empty or missing content")
    ts = raw.get("timestamp")
    t = session_time if ts in (None, "") else parse_time(ts, f"{where} timestamp")
    return Turn(role, content, t)


def parse_sessions(raws: Iterable[Mapping[str, Any]]) -> list[Session]:
    """Several sessions; duplicate ids within the batch are an error."""
    if isinstance(raws, (str, bytes, Mapping)):
        raise InputError("expected a list of sessions")
    sessions = [parse_session(r) for r in raws]
    seen: set[str] = set()
    for s in sessions:
        if s.session_id in seen:
            raise InputError(f"duplicate session id {s.session_id!r}")
        seen.add(s.session_id)
    return sessions
