"""95% intervals for accuracy and recall figures: a percentile bootstrap over questions.

Every figure the harness and the paper report is a mean of per-question values (a question's
pass@1 fraction, its recall@k, its nDCG@k). Its interval comes from resampling those questions
with replacement, `Bootstrap.resamples` times, from `numpy.random.default_rng(Bootstrap.seed)`,
and reading the `(1 - level) / 2` and `1 - (1 - level) / 2` quantiles of the resampled means.

Questions of one conversation share a memory, so their outcomes are correlated. With
`unit="conversation"` and `clusters` mapping each question to its conversation, whole
conversations are drawn instead (a cluster bootstrap): each resample's figure is the mean over
all questions of the drawn conversations, which widens the interval by as much as the
correlation warrants.

All resamples are drawn as one matrix of draw counts per unit (resamples x units, in chunks
that bound memory) and each figure is a matrix product with it, so 1,540 questions x 2,000
resamples takes about a tenth of a second. Keys are sorted before drawing, so the interval depends
on the values and the seed only, not on the mappings' order.

Shared with the harness: numpy and the standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass

import numpy as np

UNITS = ("question", "conversation")
_CHUNK_CELLS = 4_000_000  # draw-count cells per chunk of resamples (about 32 MB of float64)


@dataclass(frozen=True)
class Interval:
    """A figure with its interval: `value` is the plain mean, `low`/`high` the bootstrap bounds."""

    value: float
    low: float
    high: float
    n: int  # questions the figure is a mean over


@dataclass(frozen=True)
class Bootstrap:
    """How intervals are drawn; recorded in the summary beside the intervals it produced."""

    resamples: int = 2000
    seed: int = 0
    level: float = 0.95
    unit: str = "question"  # or "conversation": resample whole conversations

    def __post_init__(self) -> None:
        if self.resamples < 1:
            raise ValueError(f"resamples must be at least 1, got {self.resamples}")
        if not 0.0 < self.level < 1.0:
            raise ValueError(f"level must lie strictly between 0 and 1, got {self.level}")
        if self.unit not in UNITS:
            raise ValueError(f"unit must be one of {UNITS}, got {self.unit!r}")


def bootstrap_mean(
    values: Mapping[str, float],
    bootstrap: Bootstrap = Bootstrap(),
    clusters: Mapping[str, str] | None = None,
) -> Interval | None:
    """The mean of `values` (question -> value) with its percentile-bootstrap interval.

    `clusters` (question -> conversation) is used only with `unit="conversation"`; a question
    it does not name is a conversation of its own. None when there are no values.
    """
    if not values:
        return None
    keys = sorted(values)
    column = np.array([float(values[key]) for key in keys])
    replicates = _replicate_sums(np.column_stack([column, np.ones_like(column)]), keys, bootstrap, clusters)
    return _interval(float(column.mean()), replicates[:, 0] / replicates[:, 1], len(keys), bootstrap)


def paired_difference(
    a: Mapping[str, float],
    b: Mapping[str, float],
    bootstrap: Bootstrap = Bootstrap(),
    clusters: Mapping[str, str] | None = None,
) -> Interval | None:
    """mean(a - b) over the questions both have, resampling those questions jointly.

    Pairing removes the variance the two systems share (which questions are hard), so the
    interval of the difference is narrower than the two intervals side by side suggest.
    None when the two share no question.
    """
    shared = a.keys() & b.keys()
    return bootstrap_mean({key: float(a[key]) - float(b[key]) for key in shared}, bootstrap, clusters)


def bootstrap_mean_columns(
    rows: Mapping[str, Mapping[str, float]],
    bootstrap: Bootstrap = Bootstrap(),
    clusters: Mapping[str, str] | None = None,
) -> dict[str, Interval]:
    """Several figures over the same questions (question -> {figure: value}), one interval each.

    All columns share one set of resamples, drawn once: the draws depend on the questions, the
    clusters and the seed only, so each interval equals `bootstrap_mean` of its column alone.
    Every row must name the columns of the first; empty for no rows.
    """
    if not rows:
        return {}
    keys = sorted(rows)
    names = list(rows[keys[0]])
    table = np.array([[float(rows[key][name]) for name in names] for key in keys]).reshape(
        len(keys), len(names)
    )
    replicates = _replicate_sums(np.column_stack([table, np.ones(len(keys))]), keys, bootstrap, clusters)
    means = replicates[:, :-1] / replicates[:, -1:]
    return {
        name: _interval(float(table[:, column].mean()), means[:, column], len(keys), bootstrap)
        for column, name in enumerate(names)
    }


def bootstrap_group_average(
    values: Mapping[str, float],
    groups: Mapping[str, Hashable],
    bootstrap: Bootstrap = Bootstrap(),
    clusters: Mapping[str, str] | None = None,
) -> Interval | None:
    """The unweighted mean over groups of each group's mean (LoCoMo's task average), with its interval.

    Questions are resampled as in `bootstrap_mean` and the group means recomputed on each
    resample; a group a resample happens to miss is left out of that resample's average.
    Questions without a group are ignored. None when no question has a group.
    """
    keys = sorted(key for key in values if key in groups)
    if not keys:
        return None
    labels = sorted({groups[key] for key in keys}, key=repr)
    position = {label: index for index, label in enumerate(labels)}
    members = np.zeros((len(keys), len(labels)))
    members[np.arange(len(keys)), [position[groups[key]] for key in keys]] = 1.0
    column = np.array([float(values[key]) for key in keys])
    table = np.column_stack([members * column[:, None], members])
    replicates = _replicate_sums(table, keys, bootstrap, clusters)
    sums, counts = replicates[:, : len(labels)], replicates[:, len(labels) :]
    with np.errstate(invalid="ignore", divide="ignore"):
        averages = np.nanmean(np.where(counts > 0, sums / counts, np.nan), axis=1)
    value = float(np.mean((members * column[:, None]).sum(axis=0) / members.sum(axis=0)))
    return _interval(value, averages, len(keys), bootstrap)


def bootstrap_replicates(
    values: Mapping[str, float],
    bootstrap: Bootstrap = Bootstrap(),
    clusters: Mapping[str, str] | None = None,
) -> np.ndarray:
    """The resampled means themselves, shape `(bootstrap.resamples,)`; empty for no values."""
    if not values:
        return np.empty(0)
    keys = sorted(values)
    column = np.array([float(values[key]) for key in keys])
    replicates = _replicate_sums(np.column_stack([column, np.ones_like(column)]), keys, bootstrap, clusters)
    return np.asarray(replicates[:, 0] / replicates[:, 1])


def format_interval(iv: Interval | None, percent: bool = True) -> str:
    """`81.2% [79.1, 83.2]` (or `0.812 [0.791, 0.832]` with `percent=False`); `–` for None."""
    if iv is None or math.isnan(iv.value):
        return "–"
    if percent:
        return f"{100 * iv.value:.1f}% [{100 * iv.low:.1f}, {100 * iv.high:.1f}]"
    return f"{iv.value:.3f} [{iv.low:.3f}, {iv.high:.3f}]"


def _replicate_sums(
    table: np.ndarray,
    keys: list[str],
    bootstrap: Bootstrap,
    clusters: Mapping[str, str] | None,
) -> np.ndarray:
    """Column sums of `table` (one row per key) over each resample: shape (resamples, columns).

    Rows are first summed per resampling unit (a question, or a conversation), then each chunk
    of resamples is a matrix of how often each unit was drawn, multiplied into the unit sums.
    """
    unit_of = _units(keys, bootstrap, clusters)
    units = int(unit_of.max()) + 1
    unit_sums = np.zeros((units, table.shape[1]))
    np.add.at(unit_sums, unit_of, table)
    rng = np.random.default_rng(bootstrap.seed)
    chunk = max(1, _CHUNK_CELLS // units)
    parts = []
    for start in range(0, bootstrap.resamples, chunk):
        rows = min(chunk, bootstrap.resamples - start)
        draws = rng.integers(0, units, size=(rows, units))
        flat = (draws + units * np.arange(rows)[:, None]).ravel()
        counts = np.bincount(flat, minlength=rows * units).reshape(rows, units)
        parts.append(counts @ unit_sums)
    return np.concatenate(parts)


def _units(keys: list[str], bootstrap: Bootstrap, clusters: Mapping[str, str] | None) -> np.ndarray:
    """Each key's resampling unit as an index: itself, or its conversation."""
    if bootstrap.unit == "question":
        return np.arange(len(keys))
    if clusters is None:
        raise ValueError("a conversation bootstrap needs clusters (question -> conversation)")
    names = [clusters.get(key, f"\0{key}") for key in keys]
    index = {name: position for position, name in enumerate(sorted(set(names)))}
    return np.array([index[name] for name in names])


def _interval(value: float, replicates: np.ndarray, n: int, bootstrap: Bootstrap) -> Interval:
    """The percentile interval of the replicates, widened where needed to hold the figure itself (a
    percentile interval of a very skewed figure can miss it by a resample's worth)."""
    tail = (1.0 - bootstrap.level) / 2.0
    low, high = np.nanquantile(replicates, [tail, 1.0 - tail])
    return Interval(value=value, low=float(min(low, value)), high=float(max(high, value)), n=n)
