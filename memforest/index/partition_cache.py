"""The partitions and rows of a committed version's large vector tables, cached beside the database.

Past its exact bound a vector table is partitioned by k-means (`memforest.resident.partitions`), which on a
large memory is the largest single cost of loading it. The cache holds each partitioned table's
centroids, its partitions' keys (integer keys as an array, string keys packed: `PackedKeys`, looked
up in the map rather than made into a Python string and a dict entry each), and their
vectors (followed by zero rows to append to: `vector_table.slack_rows`) and row meta in that
order. A loaded version takes the partitions of the process that wrote them instead of training
new ones, and its tables search the cache's memory map (copy-on-write) instead of reading every
vector from the store into memory. It is read only for the store version it was written for and
after its checksums match; a table takes the partitions only when their keys are exactly its own
(`VectorTable.fill`), else it trains its own. `memforest check` compares the cached rows with the
store's."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path

import numpy as np

from memforest.resident.cache_file import CacheMiss, MappedFiles, read_arrays, write_arrays
from memforest.resident.packed_keys import IntKeys, PackedKeys
from memforest.resident.prefetch import will_need
from memforest.resident.vector_table import SavedPartitions

KIND = "partitions"
FORMAT = 4  # 2: one fact table, keyed by fact id; 3: the rows' vectors and meta; 4: string keys packed
FILE_NAME = "partitions.cache"


def write_partitions(path: Path, stamp: str, tables: Mapping[str, SavedPartitions]) -> int:
    """Write the partitions of `tables` (by table name) for committed version `stamp`; returns bytes."""
    arrays: dict[str, np.ndarray] = {}
    for name, saved in tables.items():
        arrays[f"{name}/centroids"] = np.asarray(saved.centroids, np.float32)
        arrays[f"{name}/bounds"] = np.asarray(saved.bounds, np.int64)
        keys = saved.keys
        if isinstance(keys, PackedKeys):
            arrays.update(keys.arrays(f"{name}/keys"))
        elif isinstance(keys, IntKeys):
            arrays[f"{name}/int_keys"] = keys.array
        elif all(isinstance(k, int) for k in keys):
            arrays[f"{name}/int_keys"] = np.asarray(keys, np.int64)
        else:
            arrays.update(PackedKeys.pack([str(k) for k in keys]).arrays(f"{name}/keys"))
        if saved.vecs is not None:
            arrays[f"{name}/vecs"] = np.asarray(saved.vecs, np.float32)
        if saved.meta is not None:
            arrays[f"{name}/meta"] = np.asarray(saved.meta, np.float64)
    return write_arrays(path, KIND, FORMAT, stamp, arrays)


def read_partitions(path: Path, stamp: str, watch: MappedFiles | None = None,
                    verify: bool = False) -> dict[str, SavedPartitions] | CacheMiss:
    """The cached partitions by table name for committed version `stamp`, or why there are none; their
    vectors are writable (of a large file: copy-on-write views of its map, added to `watch`, read a
    page a fault and a probe's runs of rows ahead: `memforest.resident.prefetch`)."""
    found = read_arrays(path, KIND, FORMAT, stamp, writable=True, watch=watch, random_access=True,
                        verify=verify)
    if isinstance(found, CacheMiss):
        return found
    for name, array in found.items():  # what an open reads whole, or looks keys up in, asked for at once
        if not name.endswith("/vecs"):  # (not a page a fault)
            will_need(array, [(0, len(array))])
    out = {}
    try:
        for name in sorted({k.split("/")[0] for k in found}):
            keys: Sequence[Hashable]
            if f"{name}/int_keys" in found:
                keys = IntKeys(found[f"{name}/int_keys"])
            else:
                keys = PackedKeys.of_arrays(found, f"{name}/keys")
            bounds, centroids = found[f"{name}/bounds"], found[f"{name}/centroids"]
            if (len(bounds) != len(centroids) + 1 or int(bounds[0]) != 0 or int(bounds[-1]) != len(keys)
                    or bool((np.diff(bounds) < 0).any())):
                return CacheMiss(f"{path.name}: the partitions of {name} do not fit their keys")
            vecs, meta = found.get(f"{name}/vecs"), found.get(f"{name}/meta")
            if ((vecs is not None and (vecs.ndim != 2 or len(vecs) <= len(keys)
                                       or vecs.shape[1] != centroids.shape[1]))
                    or (meta is not None and meta.shape != (len(keys), 2))):
                return CacheMiss(f"{path.name}: the rows of {name} do not fit their keys")
            out[name] = SavedPartitions(centroids, keys, bounds, vecs, meta)
    except (KeyError, ValueError, UnicodeDecodeError) as e:
        return CacheMiss(f"{path.name}: inconsistent arrays ({type(e).__name__}: {e})")
    return out
