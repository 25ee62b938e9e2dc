"""Shipped question subsets: `<name>.txt` beside this file, one instance (question) id per line.

    ablation60  the seed paper's 60-question LongMemEval-S ablation subset, 10 per question type
"""

from __future__ import annotations

from pathlib import Path

SUBSET_DIR = Path(__file__).resolve().parent


def subset_names() -> list[str]:
    return sorted(p.stem for p in SUBSET_DIR.glob("*.txt"))


def subset_ids(name: str) -> list[str]:
    """The ids of a shipped subset, in file order; an unknown name is an error naming the known ones."""
    path = SUBSET_DIR / f"{name}.txt"
    if not path.is_file():
        raise ValueError(f"unknown dataset subset {name!r} (known: {', '.join(subset_names())})")
    ids = [line.split("#", 1)[0].strip() for line in path.read_text(encoding="utf-8").splitlines()]
    return [i for i in ids if i]
