"""Where a question points in time: its date phrases read against the question's date.

`question_window` turns the first date phrase of a question into a `TimeWindow`, the interval of days
the event it asks about lies in, with a tolerance on either side and a confidence. Phrases, most
specific first:
- holidays and explicit dates: "on Valentine's day", "March 15th", "3 June, 2023", "2023-03-15",
  and offsets from a date: "two weeks before August 11, 2023" (the days between);
- counts: "yesterday", "10 days ago", "two weeks ago", "a month ago", "a couple of days ago";
- calendar units: "last weekend", "last week", "this week", "the past week", "in the past three
  months", "last month", "this month", "last year";
- weekdays: "last Saturday", "on Tuesday" (not "on Saturday mornings", a habit);
- month names and seasons: "in March", "in March and April", "in June 2022", "last summer";
- years: "in 2022".
A month or weekday without a year is the latest one not after the question's date. A phrase naming
only the future ("next week", "tonight", "this weekend" on a Wednesday) gives no window.

A window is a soft prior for ranking (`memforest.retrieval.hybrid`): `closeness` is its confidence
inside the interval and falls off outside it, faster before it than after it, since a session is
usually dated on or a little after the event it mentions (`after_days`)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone

from memforest.timeutil import to_datetime

DAY = 86400.0
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
MONTHS = {name: i + 1 for i, name in enumerate(
    ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
     "november", "december"))}
MONTHS.update({name[:3]: i for name, i in list(MONTHS.items())})
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
            "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "fifteen": 15, "twenty": 20,
            "thirty": 30}
_VAGUE = {  # "a few weeks ago": (nearest, farthest) units back
    "a couple of": (1.0, 3.0), "couple of": (1.0, 3.0), "a few": (2.0, 5.0), "few": (2.0, 5.0),
    "several": (3.0, 8.0)}
_UNIT_DAYS = {"day": 1.0, "week": 7.0, "month": 30.44, "year": 365.25}
AGO_TOLERANCE = 0.07  # "four weeks ago": that day, give or take 7% of the distance (2 days)
_SEASONS = {"spring": 3, "summer": 6, "fall": 9, "autumn": 9, "winter": 12}  # first month (north)


@dataclass(frozen=True)
class TimeWindow:
    """The interval [start, end] (epoch seconds) a question's event lies in, how many days the prior
    falls off over before it (`before_days`) and after it (`after_days`), and how sure the reading is
    (`confidence`, 0 to 1); `phrase` is the wording it was read from."""

    start: float
    end: float
    before_days: float
    after_days: float
    confidence: float = 1.0
    phrase: str = ""

    def closeness(self, t: float) -> float:
        if t < self.start:
            off = (self.start - t) / DAY / self.before_days
        elif t > self.end:
            off = (t - self.end) / DAY / self.after_days
        else:
            return self.confidence
        return self.confidence * math.exp(-0.5 * off * off)


@dataclass(frozen=True)
class _Span:
    """Days first..last (inclusive) read from a phrase, the tolerance in days and the confidence."""

    first: date
    last: date
    tolerance: float
    confidence: float


_Reader = Callable[[re.Match[str], date], "_Span | None"]


def question_window(question: str, ref: float, lag_days: float = 1.0,
                    relative_confidence: float = 1.0) -> TimeWindow | None:
    """The window of the first date phrase of `question` (most specific kind first) against the
    reference time `ref` (epoch seconds); None when it names none, or only days after `ref`.
    `lag_days`: how many days after an event a session mentioning it is still usually dated;
    `relative_confidence`: how much a phrase read relative to `ref` ("two weeks ago", "last
    Saturday") counts, against one naming its day or month ("March 15th, 2023", "in June")."""
    text = " ".join(question.lower().replace("\u2019", "'").split())[:400]
    now = to_datetime(ref)
    today = now.date()
    for pattern, read, relative in _READERS:
        for m in pattern.finditer(text):
            try:
                span = read(m, today)
            except (ValueError, OverflowError):  # "9999999 years ago": beyond the calendar
                continue
            if span is None or span.first > today:
                continue
            last = min(span.last, today)
            start = _midnight(span.first)
            end = min(_midnight(last + timedelta(days=1)) - 1.0, ref)
            confidence = span.confidence * (relative_confidence if relative else 1.0)
            return TimeWindow(start, end, span.tolerance, span.tolerance + lag_days, confidence, m.group(0))
    return None


def _midnight(d: date) -> float:
    return datetime(d.year, d.month, d.day, tzinfo=timezone.utc).timestamp()


def _latest(month: int, day: int, today: date, year: int | None = None) -> date | None:
    """The date `month`/`day` in `year`, or (no year) the latest one not after `today`."""
    try:
        if year is not None:
            return date(year, month, day)
        found = date(today.year, month, day)
        return found if found <= today else date(today.year - 1, month, day)
    except ValueError:  # 30 February, or a year out of range
        return None


def _month_span(month: int, today: date, year: int | None = None) -> tuple[date, date]:
    """The first and last day of `month` in `year`, or (no year) the latest such month begun by `today`."""
    if year is None:
        year = today.year if month <= today.month else today.year - 1
    first = date(year, month, 1)
    nxt = date(year + (month == 12), month % 12 + 1, 1)
    return first, nxt - timedelta(days=1)


def _months_back(d: date, n: int) -> date:
    """`d` moved `n` calendar months back (the day clipped to the month's length)."""
    y, m = divmod(d.year * 12 + d.month - 1 - n, 12)
    first, last = _month_span(m + 1, d, y)
    return min(first + timedelta(days=d.day - 1), last)


def _count(word: str) -> int | None:
    return int(word) if word.isdigit() else _NUMBERS.get(word)


def _back(today: date, n: float, unit: str) -> date:
    """`today` moved `n` units back: whole calendar months and years, else days."""
    if unit in ("month", "year") and n == int(n):
        return _months_back(today, int(n) * (12 if unit == "year" else 1))
    return today - timedelta(days=round(n * _UNIT_DAYS[unit]))


# ---------------------------------------------------------------- readers, most specific first

_HOLIDAYS = (r"valentine'?s(?: day)?|christmas eve|christmas(?: day)?|new year'?s eve|new year'?s(?: day)?|"
             r"halloween|thanksgiving|independence day|(?:the )?(?:fourth|4th) of july|easter(?: sunday)?|"
             r"mother'?s day|father'?s day|memorial day|labor day|st\.? patrick'?s day|black friday")


def _nth_weekday(year: int, month: int, weekday: int, n: int) -> date:
    """The `n`th `weekday` (0 = Monday) of the month; n = -1: the last one."""
    first, last = _month_span(month, date(year, month, 1), year)
    if n > 0:
        return first + timedelta(days=(weekday - first.weekday()) % 7 + 7 * (n - 1))
    return last - timedelta(days=(last.weekday() - weekday) % 7)


def _easter(year: int) -> date:
    """Western Easter Sunday (the anonymous Gregorian computus)."""
    a, b, c = year % 19, year // 100, year % 100
    d, e = divmod(b, 4)
    g = (8 * b + 13) // 25
    h = (19 * a + b - d - g + 15) % 30
    i, k = divmod(c, 4)
    m = (32 + 2 * e + 2 * i - h - k) % 7
    n = (a + 11 * h + 22 * m) // 451
    month, day = divmod(h + m - 7 * n + 114, 31)
    return date(year, month, day + 1)


def _holiday_in(name: str, year: int) -> date:
    name = name.replace("'", "")
    fixed = {"valentine": (2, 14), "christmas eve": (12, 24), "christmas": (12, 25),
             "new years eve": (12, 31), "new year": (1, 1), "halloween": (10, 31), "independence": (7, 4),
             "of july": (7, 4), "patrick": (3, 17)}
    for key, (month, day) in fixed.items():
        if key in name:
            return date(year, month, day)
    if "easter" in name:
        return _easter(year)
    if "thanksgiving" in name or "black friday" in name:
        return _nth_weekday(year, 11, 3, 4) + timedelta(days=1 if "black" in name else 0)
    rule = {"mother": (5, 6, 2), "father": (6, 6, 3), "memorial": (5, 0, -1), "labor": (9, 0, 1)}
    for key, (month, weekday, n) in rule.items():
        if key in name:
            return _nth_weekday(year, month, weekday, n)
    raise ValueError(name)


def _holiday(m: re.Match[str], today: date) -> _Span:
    name = m.group(0)
    day = _holiday_in(name, today.year)
    if day > today:
        day = _holiday_in(name, today.year - 1)
    return _Span(day, day, 1.5, 1.0)


_MONTH = r"(jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sept?(?:ember)?|" \
         r"oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(?:,?\s*((?:19|20)\d\d))?"
_OFFSET = re.compile(r"(?:(\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten) (day|week|month)s?|"
                     r"(?:the|last|that) (day|week|weekend|month)) (before|after) $")


def _dated(day: date | None, m: re.Match[str]) -> _Span | None:
    """A day, or the days between it and an offset before or after it that the text ends with
    ("two weeks before August 11, 2023")."""
    if day is None:
        return None
    offset = _OFFSET.search(m.string[: m.start()])
    if offset is None:
        return _Span(day, day, 1.5, 1.0)
    n = _count(offset.group(1)) if offset.group(1) else 1
    unit = offset.group(2) or {"weekend": "week"}.get(offset.group(3), offset.group(3))
    days = timedelta(days=round((n or 1) * _UNIT_DAYS[unit]))
    first, last = (day - days, day) if offset.group(4) == "before" else (day, day + days)
    return _Span(first, last, 2.0, 0.9)


def _month_day(m: re.Match[str], today: date) -> _Span | None:
    month, day, year = MONTHS[m.group(1)[:3]], int(m.group(2)), m.group(3)
    return _dated(_latest(month, day, today, int(year) if year else None), m)


def _day_month(m: re.Match[str], today: date) -> _Span | None:
    day, month, year = int(m.group(1)), MONTHS[m.group(2)[:3]], m.group(3)
    return _dated(_latest(month, day, today, int(year) if year else None), m)


def _iso(m: re.Match[str], today: date) -> _Span | None:
    try:
        return _dated(date(int(m.group(1)), int(m.group(2)), int(m.group(3))), m)
    except ValueError:
        return None


def _relative_day(m: re.Match[str], today: date) -> _Span:
    back = 2 if m.group(0).startswith("the day before") else 1
    day = today - timedelta(days=back)
    return _Span(day, day, 1.0, 1.0)


def _ago(m: re.Match[str], today: date) -> _Span | None:
    n, unit = _count(m.group(1)), m.group(2)
    if n is None:
        return None
    day = _back(today, n, unit)
    days = n * _UNIT_DAYS[unit]
    return _Span(day, day, max(1.0, AGO_TOLERANCE * days), 0.7 if unit == "year" else 1.0)


def _vague_ago(m: re.Match[str], today: date) -> _Span:
    near, far = _VAGUE[m.group(1)]
    unit = _UNIT_DAYS[m.group(2)]
    return _Span(today - timedelta(days=round(far * unit)), today - timedelta(days=round(near * unit)),
                 max(1.0, 0.2 * near * unit), 0.8)


def _weekend(m: re.Match[str], today: date) -> _Span | None:
    saturday = today - timedelta(days=(today.weekday() - 5) % 7)  # the latest Saturday, today included
    if today.weekday() >= 5:  # last weekend, said on a weekend: the one before
        saturday -= timedelta(days=7)
    return _Span(saturday, saturday + timedelta(days=1), 1.5, 0.9)


def _week(m: re.Match[str], today: date) -> _Span:
    monday = today - timedelta(days=today.weekday())
    if m.group(1) in ("last", "previous"):
        return _Span(monday - timedelta(days=7), monday - timedelta(days=1), 2.0, 0.9)
    if m.group(1) == "this":
        return _Span(monday, today, 2.0, 0.9)
    return _Span(today - timedelta(days=7), today, 2.0, 0.9)  # the past week


def _past_units(m: re.Match[str], today: date) -> _Span | None:
    n = _count(m.group(1)) if m.group(1) else 1
    if n is None:
        return None
    first = _back(today, n, m.group(2))
    return _Span(first, today, 1.0 + 0.05 * (today - first).days, 0.8)


def _month_relative(m: re.Match[str], today: date) -> _Span:
    which = m.group(1)
    if which in ("last", "previous"):
        first, last = _month_span(_months_back(today, 1).month, today, _months_back(today, 1).year)
        return _Span(first, last, 3.0, 0.9)
    if which == "this":
        return _Span(today.replace(day=1), today, 3.0, 0.9)
    return _Span(today - timedelta(days=31), today, 3.0, 0.8)  # the past month


def _year_relative(m: re.Match[str], today: date) -> _Span:
    which = m.group(1)
    if which in ("last", "previous"):
        return _Span(date(today.year - 1, 1, 1), date(today.year - 1, 12, 31), 20.0, 0.7)
    if which == "this":
        return _Span(date(today.year, 1, 1), today, 20.0, 0.7)
    return _Span(today - timedelta(days=365), today, 20.0, 0.6)


def _weekday(m: re.Match[str], today: date) -> _Span | None:
    which, weekday = m.group(1), WEEKDAYS.index(m.group(2))
    if which == "this" and weekday > today.weekday():
        return None  # this coming Saturday
    back = (today.weekday() - weekday) % 7
    if which != "this" and back == 0:
        back = 7  # (last) Saturday, said on a Saturday
    day = today - timedelta(days=back)
    return _Span(day, day, 1.0, 0.7 if which == "on" else 0.9)


def _months(m: re.Match[str], today: date) -> _Span:
    names = _MONTH_NAME.findall(m.group(0))
    year = _YEAR_NAME.search(m.group(0))
    spans = [_month_span(MONTHS[n[:3]], today, int(year.group(0)) if year else None) for n in names]
    return _Span(min(s[0] for s in spans), max(s[1] for s in spans), 5.0, 0.8)


def _season(m: re.Match[str], today: date) -> _Span:
    start = _SEASONS[m.group(2)]
    first = date(today.year if date(today.year, start, 1) <= today else today.year - 1, start, 1)
    last = _months_back(first, -3) - timedelta(days=1)
    if m.group(1) == "last" and today <= last:  # last summer, said in the summer: the one before
        first, last = date(first.year - 1, start, 1), _months_back(last, 12)
    return _Span(first, last, 10.0, 0.7)


def _year(m: re.Match[str], today: date) -> _Span:
    year = int(m.group(1))
    return _Span(date(year, 1, 1), date(year, 12, 31), 20.0, 0.7)


_MONTH_NAME = re.compile(r"\b" + _MONTH + r"\b")
_YEAR_NAME = re.compile(r"\b(?:19|20)\d\d\b")
_COUNT = r"(\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|thirty)"
_WEEKDAY = "(" + "|".join(WEEKDAYS) + ")"
_NOT_OF = r"(?! of\b)"  # "the last week of August" is read as August
# (pattern, reader, read relative to the question's date); most specific first
_READERS: tuple[tuple[re.Pattern[str], _Reader, bool], ...] = tuple((re.compile(p), r, rel) for p, r, rel in (
    (rf"\b(?:{_HOLIDAYS})\b", _holiday, False),
    (r"\b((?:19|20)\d\d)[-/](\d{1,2})[-/](\d{1,2})\b", _iso, False),
    (rf"\b{_MONTH} {_DAY}\b(?! ?%){_YEAR}", _month_day, False),
    (rf"\b{_DAY} (?:of )?{_MONTH}\b{_YEAR}", _day_month, False),
    (r"\b(?:the day before yesterday|yesterday)\b", _relative_day, True),
    (r"\b(a couple of|couple of|a few|few|several) (day|week|month|year)s? ago\b", _vague_ago, True),
    (rf"\b{_COUNT} (day|week|month|year)s? ago\b", _ago, True),
    (rf"\b(?:in|over|during|within|for) the (?:last|past) (?:{_COUNT} )?(day|week|month|year)s?\b{_NOT_OF}",
     _past_units, True),
    (rf"\b(?:the )?(?:last|past) {_COUNT} (day|week|month|year)s?\b{_NOT_OF}", _past_units, True),
    (rf"\b(last|past|previous) weekend\b{_NOT_OF}", _weekend, True),  # "this weekend" is mostly one to come
    (rf"\b(last|previous|this|past) week\b{_NOT_OF}", _week, True),
    (r"\b(last|previous|this|past) month\b", _month_relative, True),
    (r"\b(last|previous|this|past) year\b", _year_relative, True),
    (rf"\b(last|past|previous|this|on) {_WEEKDAY}\b(?! (?:morning|night|evening|afternoon)s)", _weekday,
     True),
    (rf"\b(?:in|during|since|(?<!as )of|early|late|mid|around|through)[ -]{_MONTH}"
     rf"(?:(?:,| and| or|-| to) {_MONTH})*\b(?:,? (?:19|20)\d\d\b)?", _months, False),
    (r"\b(last|this|in the|during the|over the) (spring|summer|fall|autumn|winter)\b", _season, True),
    (r"\b(?:in|during|since|of) ((?:19|20)\d\d)\b", _year, False),
))
