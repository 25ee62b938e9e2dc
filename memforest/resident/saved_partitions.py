"""A vector table's partitions as a cache keeps them (`SavedPartitions`), and their conversion from
and to a table's rows.

A partitioned table's rows can be kept in a cache in its layout, partition by partition
(`VectorTable.saved_partitions(rows=True)`), followed by zero rows to append to; a table filled from
such a cache keeps its vectors in the cache's copy-on-write memory map, so only the rows a search or
a write reaches become resident."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from memforest.resident.partitions import Partitions

_MIN_SLACK = 1024  # as many as a new table has room for


def slack_rows(n: int) -> int:
    """Zero rows kept after `n` saved rows, so a table filled from them appends in place."""
    return max(_MIN_SLACK, n // 4)


@dataclass(frozen=True)
class SavedPartitions:
    """A table's partitions by key (as `VectorTable.saved_partitions` gives them, for a cache): the
    centroids, and the keys of partition i's live rows at keys[bounds[i]:bounds[i + 1]]; optionally
    the rows themselves: `vecs`, their vectors in `keys` order followed by zero rows (`slack_rows`)
    a table filled from them appends to (writable: a private, copy-on-write map of the cache), and
    `meta`, their row numbers."""

    centroids: np.ndarray
    keys: Sequence[Hashable]  # (`PackedKeys` as a cache holds string keys)
    bounds: np.ndarray
    vecs: np.ndarray | None = None
    meta: np.ndarray | None = None


def saved_order(keys: Sequence[Hashable], saved: SavedPartitions) -> np.ndarray | None:
    """The positions in `keys` of `saved`'s keys, in the saved order; None when the saved keys are
    not exactly `keys`, each once."""
    n = len(keys)
    position = dict(zip(keys, range(n)))
    if len(position) != n or len(saved.keys) != n:
        return None
    order = list(map(position.get, saved.keys))
    if None in order:
        return None
    at = np.asarray(order, np.int64)
    if n and int(np.bincount(at, minlength=n).max()) != 1:  # each key once
        return None
    return at


def restore_partitions(saved: SavedPartitions, rows: np.ndarray | None, max_size: int) -> Partitions:
    """The partitions `saved` describes, over table rows `rows` (row i holding saved key i; None:
    the saved keys' rows are 0, 1, ... in the saved order)."""
    bounds = saved.bounds.tolist()
    if rows is None:
        members = [np.arange(lo, hi, dtype=np.int64) for lo, hi in zip(bounds[:-1], bounds[1:])]
    else:
        members = [rows[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:])]
    return Partitions(np.array(saved.centroids, np.float32), members, max_size)


def partitions_over(saved: SavedPartitions, slot: Mapping[Hashable, int], max_size: int) -> Partitions | None:
    """The partitions `saved` describes over the rows `slot` maps the table's keys to; None unless
    the saved keys are exactly the table's, each on a row of its own."""
    slots = [slot.get(k) for k in saved.keys]
    if len(slots) != len(slot) or None in slots or len(set(slots)) != len(slots):
        return None
    return restore_partitions(saved, np.asarray(slots, np.int64), max_size)


def save_partitions(parts: Partitions, live: np.ndarray, keys: Sequence[Hashable], vecs: np.ndarray | None,
          meta: np.ndarray, dim: int) -> SavedPartitions:
    """`parts` by key: `live` is the mask of live rows, `keys` the key of each row; with `vecs`
    (the table's rows), their vectors too, in that order, followed by `slack_rows` zero rows, and
    the rows of `meta` in the same order."""
    members = [m[live[m]] for m in parts.members]
    flat = [keys[r] for m in members for r in m.tolist()]
    bounds = np.cumsum([0, *(len(m) for m in members)]).astype(np.int64)
    if vecs is None:
        return SavedPartitions(parts.centroids.copy(), flat, bounds)
    order = np.concatenate(members) if members else np.zeros(0, np.int64)
    out = np.zeros((len(order) + slack_rows(len(order)), dim), np.float32)
    np.take(vecs, order, axis=0, out=out[: len(order)])
    return SavedPartitions(parts.centroids.copy(), flat, bounds, out, meta[order])
