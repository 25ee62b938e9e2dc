"""BM25 over leaf items, and the relative dates questions name."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memforest.index.lexical import LexicalIndex, stem, terms
from memforest.index.lexical_versions import VersionedLexical
from memforest.timeutil import relative_delta

DOCS = {
    "a": "user: we adopted a whippet from the rescue centre and called her Maple",
    "b": "user: the rescue centre near us is always looking for volunteers",
    "c": "user: I bought new running shoes for the trail race",
    "d": "assistant: here are some tips for training a puppy to walk on a leash",
}
WORDS = ["whippet", "rescue", "centre", "maple", "volunteer", "shoes", "trail", "race", "puppy", "leash"]


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


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.lists(st.integers(0, 30), max_size=6),
                          st.lists(st.sampled_from(WORDS), max_size=8)),
                min_size=1, max_size=12),
       st.lists(st.sampled_from(WORDS), min_size=1, max_size=3))
def test_versioned_bm25_equals_a_fresh_index_of_the_live_documents(steps: list[tuple[list[int], list[str]]],
                                                                   query: list[str]) -> None:
    """Each step removes some documents and adds (or replaces) one; every version scores exactly as a
    fresh index over its live documents, and earlier versions keep their scores."""
    live: dict[str, str] = {}
    versions: list[tuple[VersionedLexical, dict[str, str]]] = []
    index = VersionedLexical()
    for n, (removed, words) in enumerate(steps):
        gone = sorted({f"d{r}" for r in removed if f"d{r}" in live})
        doc = (f"d{n % 9}", " ".join(words))
        index = index.next_version(gone, [doc])
        for d in gone:
            live.pop(d)
        live[doc[0]] = doc[1]
        versions.append((index, dict(live)))
    text = " ".join(query)
    for version, docs in versions:
        want = LexicalIndex(docs).scores(text)
        got = version.scores(text)
        assert len(version) == len(docs) and len(got) == len([v for v in want.values() if v > 0])
        assert dict(got.items()) == pytest.approx({d: v for d, v in want.items() if v > 0})
        # the best three by score: a tie within rounding (equal scores summed in another order, a unit
        # in the last place apart) may be broken either way, so scores are compared, and each document
        ranked = sorted((d for d in want if want[d] > 0), key=lambda d: (-round(want[d], 9), d))
        top = got.top(3)
        assert [round(v, 9) for _, v in top] == [round(want[d], 9) for d in ranked[:3]]
        assert all(round(v, 9) == round(want[d], 9) for d, v in top)


@pytest.mark.parametrize("base", [400, 12_000])
def test_top_k_over_segments_with_removals_is_the_prefix_of_the_full_ranking(base: int) -> None:
    """Segments of several sizes, removals in the largest (its mask in use): every top(k), including
    ties at the k-th score, is the start of the full ranking of a fresh index (ties by id). The larger
    base segment has more blocks than k, so its block maxima bound the k-th best."""
    rng = random.Random(7)
    docs = {f"d{i:05d}": " ".join(rng.choices(WORDS, k=rng.randint(1, 9))) for i in range(base + 90)}
    index = VersionedLexical(list(docs.items())[:base])
    for lo in range(base, base + 90, 30):
        index = index.next_version([], list(docs.items())[lo:lo + 30])
    gone = [f"d{i:05d}" for i in range(0, base, 7)]
    index = index.next_version(gone, [])
    for d in gone:
        docs.pop(d)
    assert len(index.segments) > 1 and any(index.dead.values())
    for query in ("whippet rescue", "maple", "trail race puppy leash", "volunteer shoes shoes"):
        want = LexicalIndex(docs).scores(query)
        ranking = sorted(want, key=lambda d: (-round(want[d], 9), d))
        got = index.scores(query)
        assert len(got) == len(ranking) and got.best == pytest.approx(want[ranking[0]])
        for k in (1, 3, 50, 200, len(ranking), len(ranking) + 5):
            top = got.top(k)
            assert [round(v, 9) for _, v in top] == [round(want[d], 9) for d in ranking[:k]]
            assert [d for d, _ in sorted(top, key=lambda p: (-round(p[1], 9), p[0]))] == ranking[:k]
        assert (got.get_many(ranking[:5] + ["d00000"]).tolist()
                == pytest.approx([want[d] for d in ranking[:5]] + [0.0]))


def test_scores_held_at_once_keep_their_own_arrays_and_dropped_ones_are_reused() -> None:
    """Scores borrow their arrays (`BUFFERS`): scores still held are never overwritten by a later
    query, whatever the queries in between, and the arrays of dropped scores are lent again."""
    rng = random.Random(3)
    docs = {f"d{i:04d}": " ".join(rng.choices(WORDS, k=rng.randint(1, 9))) for i in range(3000)}
    index = VersionedLexical(list(docs.items()))
    fresh = LexicalIndex(docs)
    queries = ["whippet rescue", "maple", "trail race puppy leash", "volunteer shoes"]
    held = [(q, index.scores(q)) for q in queries]
    for _ in range(5):  # queries scored and dropped while the others are held
        index.scores(rng.choice(queries))
    for query, got in held:
        want = {d: v for d, v in fresh.scores(query).items() if v > 0}
        assert dict(got.items()) == pytest.approx(want)
    lent = {id(a.base) for _, got in held for a in got._acc.values()}
    assert len(lent) == len(held)  # one array each, none shared
    del got, held
    again = index.scores("maple")
    assert {id(a.base) for a in again._acc.values()} <= lent
