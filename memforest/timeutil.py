"""Parsing and formatting of timestamps and of the relative expressions facts carry."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

from memforest.errors import InputError, shown

# The times a memory accepts: dialogue happens between these years (an input outside is an error; a
# model's event time outside is dropped, so the fact keeps its source time).
EARLIEST = datetime(1900, 1, 1, tzinfo=timezone.utc).timestamp()
LATEST = datetime(2200, 1, 1, tzinfo=timezone.utc).timestamp()


def in_range(t: float) -> bool:
    return EARLIEST <= t < LATEST

_FORMATS = (
    "%Y-%m-%dT%H:%M:%S",
    "%Y-%m-%dT%H:%M",
    "%Y-%m-%d %H:%M:%S",
    "%Y-%m-%d %H:%M",
    "%Y-%m-%d",
    "%Y/%m/%d (%a) %H:%M",
    "%Y/%m/%d %H:%M",
    "%Y/%m/%d",
    "%I:%M %p on %d %B, %Y",
    "%I:%M %p on %d %b, %Y",
)


def parse_time(value: str | float | int | datetime, what: str = "timestamp") -> float:
    """Epoch seconds (UTC) from an ISO string, a LongMemEval/LoCoMo date string, a number or a datetime,
    between the years 1900 and 2200."""
    t = _parse_time(value, what)
    if not in_range(t):
        raise InputError(f"{what}: {shown(value)} is outside the years 1900-2199")
    return t


def _parse_time(value: str | float | int | datetime, what: str) -> float:
    if isinstance(value, bool):
        raise InputError(f"{what}: expected a date, got {shown(value)}")
    if isinstance(value, (int, float)):
        if value != value or value in (float("inf"), float("-inf")):
            raise InputError(f"{what}: {shown(value)} is not a valid time")
        return float(value)
    if isinstance(value, datetime):
        dt = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
        return dt.timestamp()
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{what}: expected a date string, got {shown(value)}")
    text = value.strip()
    if len(text) > 64:
        raise InputError(f"{what}: cannot parse {shown(value)} as a date")
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        parsed: datetime | None = None
        for fmt in _FORMATS:
            try:
                parsed = datetime.strptime(text, fmt)
                break
            except ValueError:
                continue
        if parsed is None:
            raise InputError(f"{what}: cannot parse {shown(value)} as a date") from None
        dt = parsed
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    try:
        return dt.timestamp()
    except (ValueError, OverflowError) as e:
        raise InputError(f"{what}: {shown(value)} is out of range: {e}") from None


def to_datetime(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=timezone.utc)


def iso_date(t: float | None) -> str:
    return "" if t is None else to_datetime(t).strftime("%Y-%m-%d")


def iso_minute(t: float) -> str:
    return to_datetime(t).strftime("%Y-%m-%d %H:%M")


def month_label(t: float) -> str:
    return to_datetime(t).strftime("%b %Y")


def interval_header(t_lo: float, t_hi: float, label: str) -> str:
    """The `[Mon YYYY – Mon YYYY | label]` prefix of an interval summary."""
    lo, hi = month_label(t_lo), month_label(t_hi)
    span = lo if lo == hi else f"{lo} – {hi}"
    return f"[{span} | {label}]"


_RELATIVE = [
    (re.compile(r"\btoday\b|\bthis morning\b|\btonight\b|\bthis evening\b"), lambda m: timedelta(0)),
    (re.compile(r"\byesterday\b"), lambda m: timedelta(days=-1)),
    (re.compile(r"\btomorrow\b"), lambda m: timedelta(days=1)),
    (re.compile(r"\blast week\b"), lambda m: timedelta(weeks=-1)),
    (re.compile(r"\bnext week\b"), lambda m: timedelta(weeks=1)),
    (re.compile(r"\blast month\b"), lambda m: timedelta(days=-30)),
    (re.compile(r"\bnext month\b"), lambda m: timedelta(days=30)),
    (re.compile(r"\blast year\b"), lambda m: timedelta(days=-365)),
    (re.compile(r"\bnext year\b"), lambda m: timedelta(days=365)),
    (re.compile(r"\b(\d+) days? ago\b"), lambda m: timedelta(days=-int(m.group(1)))),
    (re.compile(r"\b(\d+) weeks? ago\b"), lambda m: timedelta(weeks=-int(m.group(1)))),
    (re.compile(r"\b(\d+) months? ago\b"), lambda m: timedelta(days=-30 * int(m.group(1)))),
    (re.compile(r"\b(\d+) years? ago\b"), lambda m: timedelta(days=-365 * int(m.group(1)))),
    (re.compile(r"\bin (\d+) days?\b"), lambda m: timedelta(days=int(m.group(1)))),
]


_NUMBER_WORDS = {"a": 1, "an": 1, "one": 1, "a couple of": 2, "couple of": 2, "two": 2, "three": 3, "four": 4,
                 "a few": 3, "few": 3, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10,
                 "eleven": 11, "twelve": 12}
_NUMBER = re.compile(r"\b(" + "|".join(sorted(_NUMBER_WORDS, key=len, reverse=True))
                     + r")\b(?= (day|week|month|year)s? ago)")


def relative_delta(text: str) -> timedelta | None:
    """The offset a relative expression names ("three weeks ago", "a month ago", "yesterday", "in 2
    days"), number words included; None when the text holds none."""
    text = _NUMBER.sub(lambda m: str(_NUMBER_WORDS[m.group(1)]), text.lower()[:200])
    for pattern, delta in _RELATIVE:
        m = pattern.search(text)
        if m:
            try:
                return delta(m)
            except OverflowError:  # "in 99999999999 days"
                return None
    return None


def resolve_event_time(iso: str, time_text: str, source_time: float) -> float | None:
    """The event time a fact asserts: the model's ISO date when it parses, else a relative
    expression resolved against the source time, else None (the fact inherits its source time)."""
    iso = (iso or "").strip()
    if iso:
        try:
            return parse_time(iso[:19])
        except InputError:  # unparsable or out of range: try the relative expression
            pass
    delta = relative_delta(time_text or "")
    if delta is None:
        return None
    try:
        t = (to_datetime(source_time) + delta).timestamp()
    except (OverflowError, ValueError):  # beyond the calendar
        return None
    return t if in_range(t) else None
