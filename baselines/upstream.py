"""What the adapters of systems driven in a user's own checkout (LightMem, EverMemOS) need to know
about that checkout: the commit it is at, and whether its layout is the one the worker supports.

A worker targets one upstream layout, named by a pinned commit. A checkout whose files are not where
that layout puts them is refused with one line saying what was expected; a checkout at another commit
with the right layout runs, and its commit is recorded beside the pin in the build statistics.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from baselines.base import SystemUnavailable


@dataclass(frozen=True)
class Pin:
    """The upstream revision a worker is written against, and files that revision must have."""

    repository: str
    commit: str
    date: str
    required: tuple[str, ...]
    hint: str = ""  # what to do on another layout

    def check(self, system: str, checkout: Path) -> None:
        missing = [p for p in self.required if not (checkout / p).exists()]
        if missing:
            raise SystemUnavailable(
                f"{system}: {checkout} does not have the layout of {self.repository}@{self.commit[:12]} "
                f"({self.date}): missing {', '.join(missing)}{'; ' + self.hint if self.hint else ''}")

    def record(self, checkout: Path) -> dict[str, Any]:
        at = checkout_commit(checkout)
        return {"upstream": self.repository, "pinned_commit": self.commit, "checkout_commit": at,
                "at_pin": at == self.commit if at else None}


def checkout_commit(checkout: Path) -> str | None:
    """The commit a git checkout's HEAD points at, read from its files (no git needed); None when
    `checkout` is not a git work tree or the ref cannot be resolved."""
    git = checkout / ".git"
    if git.is_file():  # a worktree: "gitdir: <path>"
        text = git.read_text(encoding="utf-8", errors="replace").strip()
        git = (checkout / text.removeprefix("gitdir:").strip()).resolve()
    head = git / "HEAD"
    if not head.is_file():
        return None
    ref = head.read_text(encoding="utf-8", errors="replace").strip()
    if not ref.startswith("ref:"):
        return ref or None
    name = ref.removeprefix("ref:").strip()
    for root in _git_dirs(git):
        loose = root / name
        if loose.is_file():
            return loose.read_text(encoding="utf-8").strip() or None
        packed = root / "packed-refs"
        if packed.is_file():
            for line in packed.read_text(encoding="utf-8", errors="replace").splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[1] == name:
                    return parts[0]
    return None


def _git_dirs(git: Path) -> Sequence[Path]:
    common = git / "commondir"
    if common.is_file():
        return [git, (git / common.read_text(encoding="utf-8").strip()).resolve()]
    return [git]
