"""Exact inner-product vector indexes (FAISS) keyed by int64 ids, updated row by row."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from memforest.errors import ConfigError

_configured = False


def _faiss():
    """The faiss module, set to one OpenMP thread: every search here is a single query over at most
    tens of thousands of rows, where thread wake-ups cost milliseconds and the scan microseconds."""
    global _configured
    try:
        import faiss
    except ImportError as e:
        raise ConfigError("faiss is missing: pip install 'memforest[cpu]' (or faiss-gpu)") from e
    if not _configured:
        faiss.omp_set_num_threads(1)
        _configured = True
    return faiss


class VectorIndex:
    """IndexIDMap2 over IndexFlatIP: upsert and remove by id, exact top-k search."""

    def __init__(self, dim: int) -> None:
        faiss = _faiss()
        self.dim = dim
        self.index = faiss.IndexIDMap2(faiss.IndexFlatIP(dim))
        self.ids: set[int] = set()
        self._owner: object = None

    def __len__(self) -> int:
        return len(self.ids)

    def upsert(self, ids: list[int], vecs: np.ndarray) -> None:
        if not ids:
            return
        self.remove([i for i in ids if i in self.ids])
        self.index.add_with_ids(np.ascontiguousarray(vecs, dtype=np.float32), np.asarray(ids, dtype=np.int64))
        self.ids.update(ids)

    def remove(self, ids: list[int]) -> None:
        present = [i for i in ids if i in self.ids]
        if present:
            self.index.remove_ids(np.asarray(present, dtype=np.int64))
            self.ids.difference_update(present)

    def search(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(ids, scores) of the top-k rows for one query vector."""
        if not self.ids or k <= 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        scores, ids = self.index.search(np.ascontiguousarray(query.reshape(1, -1), dtype=np.float32),
                                        min(k, len(self.ids)))
        keep = ids[0] >= 0
        return ids[0][keep], scores[0][keep]

    def copy(self) -> VectorIndex:
        out = VectorIndex(self.dim)
        out.index = _faiss().clone_index(self.index)
        out.ids = set(self.ids)
        return out

    def save(self, path: Path) -> None:
        faiss = _faiss()
        tmp = path.with_suffix(path.suffix + ".tmp")
        faiss.write_index(self.index, str(tmp))
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path, dim: int) -> VectorIndex:
        faiss = _faiss()
        index = faiss.read_index(str(path))
        if index.d != dim:
            raise ValueError(f"{path}: dimension {index.d}, expected {dim}")
        out = cls(dim)
        out._owner = index  # the downcast wrapper does not own the C++ object
        out.index = faiss.downcast_index(index)
        out.ids = set(faiss.vector_to_array(out.index.id_map).tolist())
        return out
