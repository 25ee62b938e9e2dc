"""BM25 over leaf items, and the relative dates questions name."""

from __future__ import annotations

from datetime import timedelta

import pytest

from memforest.index.lexical import LexicalIndex, stem, terms
from memforest.timeutil import relative_delta

DOCS = {
    "a": "user: we adopted a whippet from the rescue centre and called her Maple",
    "b": "user: the rescue centre near us is always looking for volunteers",
    "c": "user: I bought new running shoes for the trail race",
    "d": "assistant: here are some tips for training a puppy to walk on a leash",
}


def test_terms_drop_stopwords_and_fold_plurals() -> None:
    assert terms("The user adopted two Whippets!") == ["adopt", "two", "whippet"]
    assert stem("centres") == "centre" and stem("class") == "class" and stem("stories") == "story"


def test_rare_terms_outrank_common_ones() -> None:
    index = LexicalIndex(DOCS)
    scores = index.scores("What is my whippet from the rescue called?")
    assert max(scores, key=lambda d: scores[d]) == "a"
    assert set(scores) == {"a", "b"} and scores["a"] > scores["b"] > 0
    assert index.scores("quantum chromodynamics") == {}
    assert len(index) == 4 and LexicalIndex({}).scores("anything") == {}


@pytest.mark.parametrize(("text", "days"), [
    ("Which band did I see about ten days ago?", -10), ("two weeks ago", -14), ("a month ago", -30),
    ("yesterday", -1), ("3 days ago", -3), ("a couple of weeks ago", -14),
])
def test_relative_dates_with_number_words(text: str, days: int) -> None:
    assert relative_delta(text) == timedelta(days=days)


def test_no_relative_date() -> None:
    assert relative_delta("How many days ago did I renew my passport?") is None
