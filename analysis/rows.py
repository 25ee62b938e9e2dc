"""Result rows, the mean and the pass@k estimator, on the standard library only: the one definition that both
the paper's analysis and the harness's own report use (the harness imports it from here, since
analysis imports no project package)."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable
from pathlib import Path
from statistics import fmean
from typing import Any

log = logging.getLogger(__name__)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """All complete rows of a JSONL file (none if it does not exist); a line torn by an interrupted
    write is skipped with a warning."""
    if not path.exists():
        return []
    rows = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                log.warning("%s:%d: skipping a torn line", path, number)
    return rows


def mean(values: Iterable[float]) -> float | None:
    """The arithmetic mean (`statistics.fmean`), None when there are no values."""
    values = list(values)
    return fmean(values) if values else None


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct: 1 - C(n-c, k) / C(n, k)."""
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)
