"""A run's dataset: loaded as its configuration node says (a subset, instance ids, composed memories),
and described for run.json: the file, its sizes, what the loader changed and what it could not load."""

from __future__ import annotations

from typing import Any

from benchmarks.datasets import Dataset, load_dataset
from benchmarks.datasets.compose import compose
from benchmarks.datasets.subsets import subset_ids
from benchmarks.harness.schema import DatasetNode


def load_benchmark_dataset(node: DatasetNode) -> Dataset:
    """The dataset a run's `dataset` node names; a file that cannot be read raises `DatasetError` or
    `DatasetUnavailableError`, an entry that cannot be read is one of `Dataset.failures`."""
    ids = node.instance_ids
    if node.subset:
        chosen = subset_ids(node.subset)
        ids = [i for i in chosen if i in set(ids)] if ids is not None else chosen
    dataset = load_dataset(node.name, path=node.path, limit=node.limit,
                           instance_ids=list(ids) if ids is not None else None,
                           include_adversarial=node.include_adversarial, cache_dir=node.cache_dir,
                           errata=node.errata)
    return compose(dataset, node.compose or 1)


def dataset_metadata(dataset: Dataset) -> dict[str, Any]:
    """The loaded dataset in run.json: its file, sizes, what the loader changed, and the entries that
    could not be loaded."""
    return {"name": dataset.name, "kind": dataset.kind, "sha256": dataset.sha256, "source": dataset.source,
            "instances": len(dataset.instances), "questions": dataset.num_questions,
            **dataset.counts.to_dict(), "failures": [failure.to_dict() for failure in dataset.failures],
            **({"errata": dataset.errata.to_dict()} if dataset.errata else {})}
