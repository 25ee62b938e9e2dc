"""Benchmark datasets behind one loader: `load_dataset(name, ...)` returns a `Dataset`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .errata import Errata, load_errata
from .locomo import load_locomo
from .longmemeval import load_longmemeval
from .records import (
    Dataset,
    DatasetError,
    DatasetKind,
    Instance,
    InstanceFailure,
    LoadCounts,
    Question,
    sanitize_text,
    sha256_file,
)

if TYPE_CHECKING:
    from .download import DatasetUnavailableError, remote_files, resolve_file

# The download module is imported on first use, not with the package: `python -m
# benchmarks.datasets.download` then runs it once, as the command, and not a second time.
_FROM_DOWNLOAD = frozenset({"DatasetUnavailableError", "remote_files", "resolve_file"})


def __getattr__(name: str) -> object:
    if name in _FROM_DOWNLOAD:
        from . import download

        return getattr(download, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


DATASET_NAMES: tuple[str, ...] = ("sample", "longmemeval_s", "longmemeval_oracle", "longmemeval_m", "locomo")


def dataset_kind(name: str) -> DatasetKind:
    """Which format (and so which answer/judge prompts) a registered dataset uses."""
    if name not in DATASET_NAMES:
        raise DatasetError(f"unknown dataset {name!r}; choose one of {', '.join(DATASET_NAMES)}")
    return "locomo" if name == "locomo" else "longmemeval"


def load_dataset(
    name: str,
    path: str | Path | None = None,
    limit: int | None = None,
    instance_ids: Sequence[str] | None = None,
    include_adversarial: bool = False,
    cache_dir: str | Path | None = None,
    errata: str | Path | None = None,
) -> Dataset:
    """Load a registered dataset. `path` overrides the shipped sample, the cache and the download;
    `errata` names an errata file to apply (benchmarks/datasets/errata.py), None the official file."""
    kind = dataset_kind(name)
    corrections = load_errata(errata) if errata is not None else None
    if corrections is not None and not corrections.applies_to(name, kind):
        raise DatasetError(f"errata file {corrections.path} is for {corrections.dataset}, not {name}")
    if name == "sample":
        # Imported late so that `python -m benchmarks.datasets.sample` runs cleanly.
        from .sample import SAMPLE_PATH

        source = Path(path) if path is not None else SAMPLE_PATH
    else:
        from .download import resolve_file

        source = resolve_file(name, path=path, cache_dir=cache_dir)
    if kind == "locomo":
        return load_locomo(source, name, limit, instance_ids, include_adversarial, corrections)
    return load_longmemeval(source, name, limit, instance_ids, corrections)


__all__ = [
    "DATASET_NAMES",
    "Dataset",
    "DatasetError",
    "Errata",
    "DatasetKind",
    "DatasetUnavailableError",
    "Instance",
    "InstanceFailure",
    "LoadCounts",
    "Question",
    "dataset_kind",
    "load_dataset",
    "load_errata",
    "load_locomo",
    "load_longmemeval",
    "remote_files",
    "resolve_file",
    "sanitize_text",
    "sha256_file",
]
