"""Ranking by what a question's wording says beyond its topic: the days its date phrase names, read
against the question's date (a soft prior, never a filter)."""

from __future__ import annotations

from dataclasses import replace
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from memforest.api import MemForest
from memforest.config import MemForestConfig, TreeConfig
from memforest.errors import ConfigError
from memforest.llm.testing import HashEmbedder
from memforest.retrieval.temporal import DAY, question_window
from memforest.timeutil import iso_date, parse_time

REF = "2023/05/30 (Tue) 23:40"  # a Tuesday


def days(question: str, ref: str = REF) -> tuple[str, str] | None:
    """The first and last day of the window `question` names, or None."""
    window = question_window(question, parse_time(ref))
    return None if window is None else (iso_date(window.start), iso_date(window.end))


@pytest.mark.parametrize(("question", "first", "last"), [
    ("What did I cook yesterday?", "2023-05-29", "2023-05-29"),
    ("Where was I the day before yesterday?", "2023-05-28", "2023-05-28"),
    ("What did I buy 3 days ago?", "2023-05-27", "2023-05-27"),
    ("Which book did I finish 10 days ago?", "2023-05-20", "2023-05-20"),
    ("I mentioned cooking something a couple of days ago. What was it?", "2023-05-27", "2023-05-29"),
    ("What gardening did I do two weeks ago?", "2023-05-16", "2023-05-16"),
    ("What was the milestone I mentioned four weeks ago?", "2023-05-02", "2023-05-02"),
    ("Which event did I go to a month ago?", "2023-04-30", "2023-04-30"),  # a calendar month back
    ("What did I see two months ago?", "2023-03-30", "2023-03-30"),
    ("What cocktail did I try last weekend?", "2023-05-27", "2023-05-28"),
    ("Which bike did I fix the past weekend?", "2023-05-27", "2023-05-28"),
    ("Where did I go last week?", "2023-05-22", "2023-05-28"),
    ("What did I start this week?", "2023-05-29", "2023-05-30"),
    ("How many times did I bake in the past two weeks?", "2023-05-16", "2023-05-30"),
    ("What did I read over the past month?", "2023-04-30", "2023-05-30"),
    ("Which certification did I complete last month?", "2023-04-01", "2023-04-30"),
    ("How much did I make this month?", "2023-05-01", "2023-05-30"),
    ("Which trip did I take last year?", "2022-01-01", "2022-12-31"),
    ("What did I do in March?", "2023-03-01", "2023-03-31"),
    ("What did I do in May?", "2023-05-01", "2023-05-30"),  # this month, up to the question
    ("Which BBQ did I go to in June?", "2022-06-01", "2022-06-30"),  # no year: the latest June begun
    ("Which airline did I fly most in March and April?", "2023-03-01", "2023-04-30"),
    ("What did I plant in mid-April?", "2023-04-01", "2023-04-30"),
    ("What happened in October 2021?", "2021-10-01", "2021-10-31"),
    ("Where was I during the last week of August 2022?", "2022-08-01", "2022-08-31"),
    ("What did I read on March 15th?", "2023-03-15", "2023-03-15"),
    ("What did I read on 15 March?", "2023-03-15", "2023-03-15"),
    ("What movie did I watch on 3 June, 2022?", "2022-06-03", "2022-06-03"),
    ("What did I note on 2023-01-05?", "2023-01-05", "2023-01-05"),
    ("What puppy did I get two weeks before May 11, 2023?", "2023-04-27", "2023-05-11"),
    ("I received jewelry last Saturday from whom?", "2023-05-27", "2023-05-27"),
    ("Who did I meet for lunch last Tuesday?", "2023-05-23", "2023-05-23"),  # said on a Tuesday
    ("What did I do on Friday?", "2023-05-26", "2023-05-26"),
    ("What did I fix this Monday?", "2023-05-29", "2023-05-29"),
    ("Which airline did I fly on Valentine's day?", "2023-02-14", "2023-02-14"),
    ("What did I give at Christmas?", "2022-12-25", "2022-12-25"),
    ("Who came for Thanksgiving?", "2022-11-24", "2022-11-24"),
    ("What did we eat at Easter?", "2023-04-09", "2023-04-09"),
    ("What did I get my mom for Mother's Day?", "2023-05-14", "2023-05-14"),
    ("Where did I go on Memorial Day?", "2023-05-29", "2023-05-29"),
    ("What did I do on Father's Day?", "2022-06-19", "2022-06-19"),
    ("Where did I travel last summer?", "2022-06-01", "2022-08-31"),
    ("Which country did I visit in 2021?", "2021-01-01", "2021-12-31"),
])
def test_date_phrases_resolve_against_the_question_date(question: str, first: str, last: str) -> None:
    assert days(question) == (first, last)


@pytest.mark.parametrize("question", [
    "What should I cook tonight?",  # the present
    "How many days ago did I buy a smoker?",  # asks for the distance, names no day
    "Which event happened first, the gala or the bake sale?",
    "What are my plans for next week?",
    "Any tips for the music store visit this weekend?",  # on a Tuesday: the weekend to come
    "What will I do this Friday?",  # on a Tuesday: the Friday to come
    "What time do I wake up on Saturday mornings?",  # a habit, not a day
    "What time do I wake up on Tuesdays and Thursdays?",
    "May I ask what my dog's name is?",
    "What did I say recently about my car?",
])
def test_phrases_naming_no_past_day_give_no_window(question: str) -> None:
    assert days(question) is None


def test_a_weekday_or_month_without_a_year_is_the_latest_one_before_the_question() -> None:
    # said on a Saturday, "last Saturday" is a week back; "on Saturday" a week back as well
    assert days("What did I buy last Saturday?", "2023/05/27 (Sat) 10:00") == ("2023-05-20", "2023-05-20")
    assert days("What did I buy on Thursday?", "2023/05/27 (Sat) 10:00") == ("2023-05-25", "2023-05-25")
    # in January, "in December" is last year's and "last month" too
    assert days("What did I do in December?", "2024/01/10 (Wed) 09:00") == ("2023-12-01", "2023-12-31")
    assert days("What did I do last month?", "2024/01/10 (Wed) 09:00") == ("2023-12-01", "2023-12-31")
    assert days("What did I do last weekend?", "2023/05/28 (Sun) 10:00") == ("2023-05-20", "2023-05-21")


def test_closeness_is_the_confidence_inside_and_falls_off_faster_before_than_after() -> None:
    ref = parse_time(REF)
    window = question_window("What did I cook last Saturday?", ref, lag_days=2.0)
    assert window is not None and window.phrase == "last saturday"
    inside = window.start + DAY / 2
    assert window.closeness(inside) == window.confidence == 0.9
    before, after = window.closeness(window.start - 2 * DAY), window.closeness(window.end + 2 * DAY)
    assert 0.0 < before < after < window.confidence
    assert window.closeness(window.start - 30 * DAY) < 1e-6
    # the farther back, the wider: "two months ago" is that day give or take a few
    near = question_window("What did I bake 3 days ago?", ref)
    far = question_window("What did I bake 3 months ago?", ref)
    assert near is not None and far is not None
    assert far.closeness(far.start - 3 * DAY) > near.closeness(near.start - 3 * DAY)
    vague = question_window("What did I bake a few weeks ago?", ref)
    exact = question_window("What did I bake two weeks ago?", ref)
    assert vague is not None and exact is not None and vague.confidence < exact.confidence


def test_phrases_read_relative_to_the_question_date_count_less_than_named_days() -> None:
    ref = parse_time(REF)
    relative = question_window("What did I bake two weeks ago?", ref, relative_confidence=0.5)
    named = question_window("What did I bake on May 16th?", ref, relative_confidence=0.5)
    assert relative is not None and named is not None
    assert (relative.start, relative.end) == (named.start, named.end)
    assert relative.confidence == 0.5 and named.confidence == 1.0


# ---------------------------------------------------------------- ranking by the window


def session(sid: str, day: str, lines: list[str], replies: list[str] | None = None) -> dict:
    turns = []
    for i, line in enumerate(lines):
        turns += [{"role": "user", "content": line},
                  {"role": "assistant", "content": (replies or [])[i] if replies else f"Noted, point {i}."}]
    return {"session_id": sid, "timestamp": f"{day}T10:00:00", "turns": turns}


def forest(tmp_path: Path, **query: Any) -> MemForest:
    cfg = MemForestConfig(tree=TreeConfig(summary_mode="extractive"))
    cfg = replace(cfg, query=replace(cfg.query, **query))
    return MemForest(tmp_path, cfg, embedder=HashEmbedder(256), generate=False)


def _same_words_on_many_days() -> list[dict]:
    said = ["I baked a loaf of sourdough bread with my neighbour"]
    return [session(f"d{d.isoformat()}", d.isoformat(), said)
            for d in (date(2023, 2, 14), date(2023, 3, 9), date(2023, 4, 22), date(2023, 5, 6),
                      date(2023, 5, 16), date(2023, 5, 27))]


@pytest.mark.parametrize(("question", "expected"), [
    ("What bread did I bake last Saturday?", "d2023-05-27"),
    ("What bread did I bake two weeks ago?", "d2023-05-16"),
    ("What bread did I bake in March?", "d2023-03-09"),
    ("What bread did I bake on Valentine's day?", "d2023-02-14"),
    ("What bread did I bake on April 22nd?", "d2023-04-22"),
])
def test_the_session_in_the_named_window_ranks_first(tmp_path: Path, question: str, expected: str) -> None:
    mf = forest(tmp_path, final_units=6)
    mf.ingest_sessions("u", _same_words_on_many_days())
    ranked = sorted(mf.query("u", question, date=REF, answer=False).evidence, key=lambda e: -e.score)
    assert ranked[0].session_ids == [expected]
    assert ranked[0].score > ranked[1].score
    flat = forest(tmp_path / "flat", final_units=6, date_weight=0.0)
    flat.ingest_sessions("u", _same_words_on_many_days())
    scores = {round(e.score, 6) for e in flat.query("u", question, date=REF, answer=False).evidence}
    assert len(scores) == 1  # without the prior every session scores alike


def test_the_window_is_a_prior_not_a_filter(tmp_path: Path) -> None:
    mf = forest(tmp_path, final_units=3)
    mf.ingest_sessions("u", [
        session("match", "2023-03-02", ["I repaired the garden fence with new cedar boards"]),
        session("dated", "2023-05-27", ["We watched a film about whales at the cinema"]),
    ])
    result = mf.query("u", "How did I repair the garden fence last Saturday?", date=REF, answer=False)
    ranked = sorted(result.evidence, key=lambda e: -e.score)
    assert ranked[0].session_ids == ["match"]  # a far better match outside the window still wins
    window = result.trace["browse"][0]["date_window"]
    confidence = 0.9 * mf.config.query.relative_date_confidence  # read relative to the question's date
    assert window == {"phrase": "last saturday", "from": "2023-05-27", "to": "2023-05-27",
                      "confidence": confidence}


def test_the_options_are_checked() -> None:
    base = MemForestConfig()
    cases: list[dict[str, Any]] = [{"date_lag_days": -1.0}, {"relative_date_confidence": 1.5}]
    for bad in cases:
        with pytest.raises(ConfigError, match=next(iter(bad))):
            replace(base, query=replace(base.query, **bad)).validate()
