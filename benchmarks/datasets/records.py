"""The record model every dataset loader produces: questions (with their gold answers and evidence) and
instances (the sessions a memory is built from). Sessions and turns are the types a memory system
receives (`baselines.base`): they carry no gold labels."""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, TypeVar

from baselines.base import Session

DatasetKind = Literal["longmemeval", "locomo"]
T = TypeVar("T")

# English names, independent of the process locale (dataset dates and prompts are in English).
MONTH_NAMES = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
               "October", "November", "December")
DAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")

_SPECIAL_TOKEN = re.compile(r"<\|([A-Za-z0-9_]+)\|>")


def sanitize_text(text: str) -> str:
    """Defuse chat-template special tokens: `<|endoftext|>` becomes the visible text `<endoftext>`.

    The words stay readable, but no tokenizer can map them to a control token any more."""
    return _SPECIAL_TOKEN.sub(r"<\1>", text)


def sha256_file(path: str | Path, chunk_size: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk_size):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class Question:
    """A question with its gold answer. `category` is the dataset's own type name."""

    question_id: str
    question: str
    answer: str
    category: str
    question_date: datetime | None
    evidence_sessions: tuple[str, ...] = ()
    evidence_turns: tuple[str, ...] = ()
    abstention: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Instance:
    """One memory to build (its sessions) and the questions asked against it."""

    instance_id: str
    user_id: str
    sessions: tuple[Session, ...]
    questions: tuple[Question, ...]

    @property
    def num_turns(self) -> int:
        return sum(len(session.turns) for session in self.sessions)


@dataclass(frozen=True)
class Dataset:
    """A loaded dataset; `sha256` identifies the exact source file."""

    name: str
    kind: DatasetKind
    instances: tuple[Instance, ...]
    sha256: str
    source: str = ""
    duplicate_sessions_dropped: int = 0  # exact repeats of a session within one instance

    def questions(self) -> Iterator[tuple[Instance, Question]]:
        for instance in self.instances:
            for question in instance.questions:
                yield instance, question

    @property
    def num_questions(self) -> int:
        return sum(len(instance.questions) for instance in self.instances)

    def category_counts(self) -> dict[str, int]:
        return dict(Counter(question.category for _, question in self.questions()))


def read_json_list(path: Path, what: str) -> list[Any]:
    """The JSON array in `path`, which should hold a list of `what`."""
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list of {what}")
    return data


def answer_text(value: Any) -> str:
    """Gold answers are text; the sources sometimes store ints (or None when absent)."""
    if value is None:
        return ""
    return sanitize_text(str(value))


def select(items: list[T], key: Callable[[T], str], limit: int | None, ids: Sequence[str] | None) -> list[T]:
    """Keep the items whose key is in `ids` (in source order), then the first `limit`."""
    if ids is not None:
        wanted = set(ids)
        missing = wanted - {key(item) for item in items}
        if missing:
            raise ValueError(f"unknown instance ids: {sorted(missing)[:5]}")
        items = [item for item in items if key(item) in wanted]
    if limit is not None:
        items = items[: max(limit, 0)]
    return items
