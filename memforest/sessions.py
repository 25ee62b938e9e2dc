"""Validation of incoming sessions, before anything is written: every problem is an InputError
naming it, with the offending value shown cut short.

A turn with nothing readable in it (only whitespace, control or format characters: `readable`) is
data, not an error: it is kept blank in its place, so every turn keeps the index it was given, and
no cell holds it. A session is refused only when none of its turns is readable."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from memforest.config import LimitsConfig
from memforest.errors import InputError, shown
from memforest.timeutil import parse_time
from memforest.types import ROLES, Session, Turn

_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@+-]{0,127}$")
SESSION_KEYS = ("session_id", "timestamp", "turns")
TURN_KEYS = ("role", "content", "timestamp")
_INVISIBLE = ("Cc", "Cf")  # control characters; format characters (U+200B, U+FEFF, U+00AD, U+2060, ...)


def check_id(value: Any, what: str) -> str:
    """A user or session id: letters, digits and `_.:@+-`, not starting with punctuation."""
    if not isinstance(value, str) or not _SAFE_ID.match(value) or ".." in value:
        raise InputError(f"unsafe or empty {what} {shown(value)}: use letters, digits and _.:@+- only "
                         "(at most 128)")
    return value


def readable(text: str) -> bool:
    """Whether `text` has a character to read: one that is not whitespace, a control character
    (Unicode category Cc) or a format character (Cf: zero-width spaces and joiners, byte-order
    marks, soft hyphens, word joiners)."""
    return any(not ch.isspace() and unicodedata.category(ch) not in _INVISIBLE for ch in text)


def check_text(text: Any, where: str, limit: int) -> str:
    """Turn content: a string of valid Unicode, without NUL, within `limit` characters (it may have
    nothing readable: `readable`)."""
    if not isinstance(text, str):
        raise InputError(f"{where}: content must be a string, got {type(text).__name__}")
    if len(text) > limit:
        raise InputError(f"{where}: content has {len(text)} characters, more than limits.turn_chars={limit}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InputError(f"{where}: content is not valid Unicode ({e.reason} at {e.start})") from None
    if "\x00" in text:
        raise InputError(f"{where}: content contains a NUL character")
    return text


def _unknown_keys(raw: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
    unknown = [k for k in raw if k not in allowed]
    if unknown:
        raise InputError(f"{where}: unknown key(s) {', '.join(shown(k, 40) for k in unknown[:5])} "
                         f"(expected {', '.join(allowed)})")


def parse_session(raw: Mapping[str, Any] | Session, limits: LimitsConfig) -> Session:
    """A Session from `{session_id, timestamp, turns: [{role, content, timestamp?}]}` (or a Session
    checked the same way), within `limits`. Turns with nothing readable are kept blank (content "")."""
    if isinstance(raw, Session):
        return _check_session(raw, limits)
    if not isinstance(raw, Mapping):
        raise InputError(f"a session must be an object, got {type(raw).__name__}")
    sid = check_id(raw.get("session_id"), "session id")
    _unknown_keys(raw, SESSION_KEYS, f"session {sid}")
    if raw.get("timestamp") in (None, ""):
        raise InputError(f"session {sid}: missing timestamp")
    t0 = parse_time(raw["timestamp"], f"session {sid} timestamp")
    turns_raw = raw.get("turns")
    if not isinstance(turns_raw, list) or not turns_raw:
        raise InputError(f"session {sid}: 'turns' must be a non-empty list")
    _check_turn_count(sid, len(turns_raw), limits)
    turns = [_parse_turn(sid, i, t, t0, limits) for i, t in enumerate(turns_raw)]
    _check_readable(sid, turns)
    return Session(sid, t0, turns)


def _parse_turn(sid: str, i: int, raw: Any, session_time: float, limits: LimitsConfig) -> Turn:
    where = f"session {sid} turn {i}"
    if not isinstance(raw, Mapping):
        raise InputError(f"{where}: a turn must be an object")
    _unknown_keys(raw, TURN_KEYS, where)
    role = raw.get("role")
    if role not in ROLES:
        raise InputError(f"{where}: unknown role {shown(role, 40)} (expected one of {', '.join(ROLES)})")
    if raw.get("content") is None:
        raise InputError(f"{where}: missing content")
    content = check_text(raw.get("content"), where, limits.turn_chars)
    ts = raw.get("timestamp")
    t = session_time if ts in (None, "") else parse_time(ts, f"{where} timestamp")
    return Turn(role, content if readable(content) else "", t)


def _check_session(session: Session, limits: LimitsConfig) -> Session:
    """A Session built by the caller, held to the same rules as one parsed from JSON."""
    sid = check_id(session.session_id, "session id")
    if not session.turns:
        raise InputError(f"session {sid}: 'turns' must be a non-empty list")
    _check_turn_count(sid, len(session.turns), limits)
    turns = []
    for i, turn in enumerate(session.turns):
        where = f"session {sid} turn {i}"
        if turn.role not in ROLES:
            raise InputError(f"{where}: unknown role {shown(turn.role, 40)} (expected one of "
                             f"{', '.join(ROLES)})")
        content = check_text(turn.content, where, limits.turn_chars)
        turns.append(turn if readable(content) or not content else replace(turn, content=""))
    _check_readable(sid, turns)
    return Session(sid, session.time, turns)


def _check_turn_count(sid: str, n: int, limits: LimitsConfig) -> None:
    if n > limits.turns_per_session:
        raise InputError(f"session {sid}: {n} turns, more than "
                         f"limits.turns_per_session={limits.turns_per_session}")


def _check_readable(sid: str, turns: list[Turn]) -> None:
    if not any(t.content for t in turns):
        raise InputError(f"session {sid}: nothing readable in any turn (only whitespace, control or format "
                         "characters)")


def parse_sessions(raws: Iterable[Mapping[str, Any] | Session], limits: LimitsConfig) -> list[Session]:
    """Several sessions (objects or Sessions) within `limits`; duplicate ids within the batch are an error."""
    if isinstance(raws, (str, bytes, Mapping)) or not isinstance(raws, Iterable):
        raise InputError("expected a list of sessions")
    raws = list(raws)
    if len(raws) > limits.sessions_per_call:
        raise InputError(f"{len(raws)} sessions in one call, more than limits.sessions_per_call="
                         f"{limits.sessions_per_call}")
    sessions = [parse_session(r, limits) for r in raws]
    seen: set[str] = set()
    for s in sessions:
        if s.session_id in seen:
            raise InputError(f"duplicate session id {shown(s.session_id)}")
        seen.add(s.session_id)
    return sessions
