"""Partitions of a large vector table: rows grouped by their nearest centroid (an inverted file whose
lists split as they grow), so a search scores the rows of the few partitions nearest the query
instead of every row.

A partition holds at most `max_size` rows; one that grows past it is split in two by 2-means over its
live rows, so the number of partitions follows the table and a probe costs O(candidates + partitions)
with a small constant for the second term. Member arrays are never changed in place: a version that
edits a `Partitions` works on its own `copy()` (a list of references), so a published version never
changes. Training and splitting are deterministic (no random initialisation)."""

from __future__ import annotations

import numpy as np

_ITERATIONS = 6
_TRAIN_PER_CENTROID = 32
_PROBE_FIRST = 16  # nearest partitions a probe selects before sorting them all


def _normalise(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return np.where(norms > 0, x / np.maximum(norms, 1e-12), x).astype(np.float32)


def _assign(vecs: np.ndarray, centroids: np.ndarray, chunk: int = 8192) -> np.ndarray:
    out = np.empty(len(vecs), np.int64)
    for lo in range(0, len(vecs), chunk):
        out[lo: lo + chunk] = np.argmax(vecs[lo: lo + chunk] @ centroids.T, axis=1)
    return out


def _kmeans(vecs: np.ndarray, k: int, iterations: int = _ITERATIONS) -> np.ndarray:
    """Spherical k-means (inner product), started from evenly spaced rows."""
    centroids = vecs[np.linspace(0, len(vecs) - 1, k).astype(np.int64)].copy()
    for _ in range(iterations):
        labels = _assign(vecs, centroids)
        sums = np.zeros_like(centroids)
        np.add.at(sums, labels, vecs)
        filled = np.bincount(labels, minlength=k) > 0
        centroids[filled] = _normalise(sums[filled])
    return centroids


class Partitions:
    def __init__(self, centroids: np.ndarray, members: list[np.ndarray], max_size: int,
                 sizes: np.ndarray | None = None) -> None:
        self.centroids = centroids
        self.members = members
        self.max_size = max_size
        self.sizes = np.array([len(m) for m in members], np.int64) if sizes is None else sizes

    @classmethod
    def build(cls, all_vecs: np.ndarray, rows: np.ndarray, live: np.ndarray, max_size: int) -> Partitions:
        """Partitions of `rows` (row numbers into `all_vecs`, live in the mask `live`) with about
        max_size / 2 rows each, trained on a sample of the rows; none holds more than max_size."""
        vecs = all_vecs[rows]
        k = max(1, -(-2 * len(rows) // max_size))
        sample = np.linspace(0, len(rows) - 1, min(len(rows), k * _TRAIN_PER_CENTROID)).astype(np.int64)
        centroids = _kmeans(_normalise(vecs[sample]), k)
        labels = _assign(vecs, centroids)
        order = np.argsort(labels, kind="stable")
        bounds = np.searchsorted(labels[order], np.arange(k + 1))
        members = [rows[order[bounds[i]: bounds[i + 1]]] for i in range(k)]
        out = cls(centroids, members, max_size)
        for p in range(k):
            out._fit(p, all_vecs, live)
        return out

    def __len__(self) -> int:
        return len(self.members)

    def copy(self) -> Partitions:
        return Partitions(self.centroids, list(self.members), self.max_size, self.sizes.copy())

    def add(self, rows: np.ndarray, all_vecs: np.ndarray, live: np.ndarray) -> None:
        """Add `rows` (their vectors are `all_vecs[rows]`) to their nearest partitions, splitting any
        that grows past max_size. `live` is the table's live mask (dead rows are dropped on a split)."""
        if not len(rows):
            return
        labels = _assign(all_vecs[rows], self.centroids)
        for p in np.unique(labels).tolist():
            self.members[p] = np.concatenate([self.members[p], rows[labels == p]])
            self.sizes[p] = len(self.members[p])
            self._fit(p, all_vecs, live)

    def _fit(self, p: int, all_vecs: np.ndarray, live: np.ndarray) -> None:
        """Split partition `p`, and the halves again, until every part holds at most max_size rows."""
        todo = [p]
        while todo:
            q = todo.pop()
            if len(self.members[q]) > self.max_size:
                todo.extend(self._split(q, all_vecs, live))

    def _split(self, p: int, all_vecs: np.ndarray, live: np.ndarray) -> list[int]:
        """Split partition `p` in two (dropping its dead rows); the partitions that changed."""
        rows = self.members[p]
        rows = rows[live[rows]]
        if len(rows) <= self.max_size // 2:  # mostly dead rows: dropping them is enough
            self.members[p] = rows
            self.sizes[p] = len(rows)
            return []
        vecs = all_vecs[rows]
        first = vecs[0]
        second = vecs[int(np.argmin(vecs @ first))]
        centroids = _normalise(np.stack([first, second]))
        for _ in range(_ITERATIONS):
            labels = np.argmax(vecs @ centroids.T, axis=1)
            if labels.all() or not labels.any():
                break
            centroids = _normalise(np.stack([vecs[labels == 0].sum(0), vecs[labels == 1].sum(0)]))
        labels = np.argmax(vecs @ centroids.T, axis=1)
        if labels.all() or not labels.any():  # identical vectors: halves in row order
            labels = (np.arange(len(rows)) >= len(rows) // 2).astype(np.int64)
            centroids = _normalise(np.stack([vecs[labels == 0].sum(0), vecs[labels == 1].sum(0)]))
        self.centroids = np.concatenate([self.centroids, centroids[1:]])
        self.centroids[p] = centroids[0]
        self.members[p] = rows[labels == 0]
        self.members.append(rows[labels == 1])
        self.sizes = np.append(self.sizes, 0)
        self.sizes[p], self.sizes[-1] = len(self.members[p]), len(self.members[-1])
        return [p, len(self.members) - 1]

    def probe(self, centroid_scores: np.ndarray, candidates: int) -> np.ndarray:
        """Row numbers (live or not) of the partitions nearest a query (given its scores against the
        centroids), nearest first (ties by partition number), until at least `candidates` rows are
        gathered. The `_PROBE_FIRST` nearest are selected first, without sorting every partition;
        when the partitions taken all score above the last of them, they are the sorted order's."""
        neg = -centroid_scores
        m = min(len(neg), _PROBE_FIRST)
        if m < len(neg):
            first = np.argpartition(neg, m - 1)[:m]
            first = first[np.lexsort((first, neg[first]))]
            take = int(np.searchsorted(np.cumsum(self.sizes[first]), candidates)) + 1
            if take < m and neg[first[take - 1]] < neg[first[m - 1]]:
                return np.concatenate([self.members[p] for p in first[:take].tolist()])
        order = np.argsort(neg, kind="stable")
        take = int(np.searchsorted(np.cumsum(self.sizes[order]), candidates)) + 1
        return np.concatenate([self.members[p] for p in order[:take].tolist()])

    def remap(self, new_row: np.ndarray) -> None:
        """Renumber rows after a compaction (`new_row[old] = new`, -1 for a row dropped)."""
        members = [new_row[m] for m in self.members]
        self.members = [m[m >= 0] for m in members]
        self.sizes = np.array([len(m) for m in self.members], np.int64)
