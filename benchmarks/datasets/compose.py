"""Composed memories: each instance's haystack together with the haystacks of the next N - 1
instances (cyclically), so that one memory holds about N instances' worth of sessions. The query
latency experiment reads 1/2/4/8 composed forests this way (by writing the sessions into one memory,
not by merging stored forests). Questions, gold evidence and the instance's own session ids are
unchanged; the added sessions get the prefix `c<k>-` so that repeated sessions stay distinct."""

from __future__ import annotations

from dataclasses import replace

from benchmarks.datasets.records import Dataset


def compose(dataset: Dataset, n: int) -> Dataset:
    if n < 1:
        raise ValueError(f"dataset.compose must be at least 1, got {n}")
    if n == 1:
        return dataset
    pool = dataset.instances
    if len(pool) < n:
        raise ValueError(f"dataset.compose={n} needs at least {n} instances, the dataset has {len(pool)}")
    out = []
    for i, instance in enumerate(pool):
        extra = []
        for k in range(1, n):
            other = pool[(i + k) % len(pool)]
            extra += [replace(s, session_id=f"c{k}-{s.session_id}") for s in other.sessions]
        sessions = tuple(sorted((*instance.sessions, *extra), key=lambda s: (s.timestamp, s.session_id)))
        out.append(replace(instance, sessions=sessions))
    return replace(dataset, name=dataset.name, instances=tuple(out))
