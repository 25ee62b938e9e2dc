"""The bootstrap intervals: against the binomial case, under a seed, paired, clustered, and their cost."""

from __future__ import annotations

import math
from dataclasses import asdict

import numpy as np
import pytest

from analysis.intervals import (
    Bootstrap,
    Interval,
    bootstrap_group_average,
    bootstrap_mean,
    bootstrap_mean_columns,
    bootstrap_replicates,
    format_interval,
    paired_difference,
)


def _binary(correct: int, total: int) -> dict[str, float]:
    return {f"q{i:04d}": float(i < correct) for i in range(total)}


def test_matches_the_normal_interval_of_a_binomial_proportion() -> None:
    iv = bootstrap_mean(_binary(800, 1000))
    assert iv is not None
    half = 1.96 * math.sqrt(0.8 * 0.2 / 1000)
    assert iv.value == pytest.approx(0.8)
    assert iv.n == 1000
    assert iv.low == pytest.approx(0.8 - half, abs=0.004)
    assert iv.high == pytest.approx(0.8 + half, abs=0.004)


def test_no_values_give_no_interval() -> None:
    assert bootstrap_mean({}) is None
    assert paired_difference({"a": 1.0}, {"b": 1.0}) is None
    assert bootstrap_group_average({"a": 1.0}, {}) is None
    assert bootstrap_replicates({}).shape == (0,)


def test_deterministic_under_a_seed_and_independent_of_key_order() -> None:
    values = {f"q{i}": float(i % 3 == 0) for i in range(300)}
    reordered = dict(reversed(list(values.items())))
    assert bootstrap_mean(values) == bootstrap_mean(reordered)
    assert bootstrap_mean(values, Bootstrap(seed=7)) == bootstrap_mean(values, Bootstrap(seed=7))
    assert bootstrap_mean(values, Bootstrap(seed=7)) != bootstrap_mean(values, Bootstrap(seed=8))


def test_a_single_question_has_a_point_interval() -> None:
    assert bootstrap_mean({"q": 0.5}) == Interval(value=0.5, low=0.5, high=0.5, n=1)


def test_the_paired_difference_of_identical_systems_is_zero() -> None:
    values = {f"q{i}": float(i % 2) for i in range(500)}
    assert paired_difference(values, dict(values)) == Interval(value=0.0, low=0.0, high=0.0, n=500)


def test_a_paired_difference_recovers_a_known_shift() -> None:
    rng = np.random.default_rng(3)
    a = {f"q{i}": float(x) for i, x in enumerate(rng.random(800))}
    b = {key: value - 0.1 + 0.01 * rng.standard_normal() for key, value in a.items()}
    b["only_b"] = 5.0
    iv = paired_difference(a, b)
    assert iv is not None
    assert iv.n == 800
    assert iv.value == pytest.approx(0.1, abs=0.002)
    assert iv.low < 0.1 < iv.high
    assert iv.high - iv.low < 0.005  # pairing cancels the questions' own spread
    unpaired = bootstrap_mean(a)
    assert unpaired is not None and unpaired.high - unpaired.low > 0.02


def test_resampling_conversations_widens_the_interval_when_their_questions_agree() -> None:
    # 30 conversations of 40 questions; a conversation's questions are all right or all wrong.
    values, clusters = {}, {}
    for conversation in range(30):
        correct = float(conversation % 3 != 0)
        for question in range(40):
            key = f"c{conversation}q{question}"
            values[key], clusters[key] = correct, f"c{conversation}"
    by_question = bootstrap_mean(values, Bootstrap(), clusters)
    by_conversation = bootstrap_mean(values, Bootstrap(unit="conversation"), clusters)
    assert by_question is not None and by_conversation is not None
    assert by_question.value == by_conversation.value == pytest.approx(2 / 3)
    assert by_conversation.high - by_conversation.low > 2.5 * (by_question.high - by_question.low)
    # 30 binary conversations: about 2/3 +- 1.96 * sqrt(2/9 / 30)
    assert by_conversation.high - by_conversation.low == pytest.approx(
        2 * 1.96 * math.sqrt(2 / 9 / 30), abs=0.05
    )


def test_a_conversation_bootstrap_needs_clusters() -> None:
    with pytest.raises(ValueError, match="clusters"):
        bootstrap_mean({"q": 1.0}, Bootstrap(unit="conversation"))


@pytest.mark.parametrize("settings", [{"resamples": 0}, {"level": 1.0}, {"level": 0.0}, {"unit": "session"}])
def test_bootstrap_settings_are_checked(settings: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        Bootstrap(**settings)  # type: ignore[arg-type]


def test_the_settings_are_recordable() -> None:
    assert asdict(Bootstrap()) == {"resamples": 2000, "seed": 0, "level": 0.95, "unit": "question"}


def test_the_group_average_weights_groups_equally() -> None:
    # group a: 100 questions all right; group b: 10 questions all wrong -> task average 0.5
    values = {f"a{i}": 1.0 for i in range(100)} | {f"b{i}": 0.0 for i in range(10)}
    groups = {key: key[0] for key in values}
    iv = bootstrap_group_average(values, groups)
    assert iv is not None
    assert iv.value == pytest.approx(0.5)
    assert iv.low <= 0.5 <= iv.high
    assert iv.n == 110


def test_the_locomo_sized_bootstrap_stays_one_matrix_of_draws() -> None:
    # LoCoMo: 1,540 questions x 2,000 resamples, drawn in bounded chunks and reduced to one mean each
    rng = np.random.default_rng(0)
    values = {f"q{i}": float(x) for i, x in enumerate(rng.random(1540) < 0.7)}
    replicates = bootstrap_replicates(values)
    assert replicates.shape == (2000,)
    assert np.all((replicates >= 0.0) & (replicates <= 1.0))
    iv = bootstrap_mean(values)
    assert iv is not None and iv.n == 1540
    assert iv.low == pytest.approx(float(np.quantile(replicates, 0.025)))


def test_format_interval() -> None:
    iv = Interval(value=0.8123, low=0.7912, high=0.8321, n=10)
    assert format_interval(iv) == "81.2% [79.1, 83.2]"
    assert format_interval(iv, percent=False) == "0.812 [0.791, 0.832]"
    assert format_interval(None) == "–"


def test_columns_share_the_draws_of_one_column_alone() -> None:
    rng = np.random.default_rng(2)
    rows = {f"q{i}": {"a": float(rng.random() < 0.5), "b": float(rng.random())} for i in range(200)}
    clusters = {key: f"c{i % 7}" for i, key in enumerate(rows)}
    for bootstrap in (Bootstrap(), Bootstrap(unit="conversation", seed=3)):
        together = bootstrap_mean_columns(rows, bootstrap, clusters)
        assert set(together) == {"a", "b"}
        for name in ("a", "b"):
            alone = bootstrap_mean({key: row[name] for key, row in rows.items()}, bootstrap, clusters)
            assert alone is not None
            assert together[name].value == pytest.approx(alone.value)
            assert (together[name].low, together[name].high) == pytest.approx((alone.low, alone.high))
    assert bootstrap_mean_columns({}) == {}
