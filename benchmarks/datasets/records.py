"""The record model every dataset loader produces: questions (with their gold answers and evidence) and
instances (the sessions a memory is built from). Sessions and turns are the types a memory system
receives (`baselines.base`): they carry no gold labels.

What a loader changes in the source is counted (`LoadCounts`), and an entry it cannot read becomes an
`InstanceFailure` of that entry alone; only a file that is not a JSON list stops a load
(`DatasetError`)."""

from __future__ import annotations

import gzip
import hashlib
import json
import lzma
import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import datetime
from pathlib import Path
from typing import IO, Any, Literal, TypeVar

from baselines.base import Session, Turn
from memforest.sessions import readable

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


class DatasetError(ValueError):
    """The dataset cannot be loaded at all: the file is not a JSON list, or the selection names ids the
    file does not hold. (One unreadable entry is never this: it becomes an `InstanceFailure`.)"""


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
    answer_type: str = "str"  # the JSON type of the source's gold answer: str, int, float, bool or null


@dataclass(frozen=True)
class LoadCounts:
    """What a loader changed in the source, so that every compared system receives the same input."""

    duplicate_sessions_dropped: int = 0  # a session listed again with the same date and turns: kept once
    sessions_renamed: int = 0  # listed again with another date or turns: kept as `<id>#2`, `<id>#3`...
    unreadable_turns_dropped: int = 0  # nothing readable: empty, whitespace, zero-width characters
    instances_with_unreadable_turns: int = 0
    empty_sessions_dropped: int = 0  # sessions left without a readable turn
    # an errata file's changes (benchmarks/datasets/errata.py; none unless dataset.errata names one)
    errata_answers_changed: int = 0
    errata_evidence_changed: int = 0
    errata_questions_dropped: int = 0

    def __add__(self, other: LoadCounts) -> LoadCounts:
        return LoadCounts(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class InstanceFailure:
    """An entry of the source that could not be loaded (stage `load`), or an instance whose run failed."""

    instance_id: str
    stage: str
    reason: str  # one line

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


@dataclass(frozen=True)
class ErrataApplied:
    """What an errata file changed in a loaded dataset (run.json's `dataset.errata`)."""

    file: str
    version: str
    sha256: str
    dataset: str
    entries: int
    changes: tuple[dict[str, Any], ...]  # per applied entry: question_id, change, source, official values
    not_loaded: tuple[str, ...]  # entries whose question the run does not load

    @property
    def counts(self) -> LoadCounts:
        return LoadCounts(
            errata_answers_changed=sum("answer" in c for c in self.changes),
            errata_evidence_changed=sum("evidence" in c for c in self.changes),
            errata_questions_dropped=sum(bool(c.get("drop")) for c in self.changes),
        )

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "version": self.version, "sha256": self.sha256, "dataset": self.dataset,
                "entries": self.entries,
                **{k: v for k, v in self.counts.to_dict().items() if k.startswith("errata_")},
                "changes": list(self.changes),
                "not_loaded": list(self.not_loaded)}


@dataclass(frozen=True)
class Instance:
    """One memory to build (its sessions) and the questions asked against it."""

    instance_id: str
    user_id: str
    sessions: tuple[Session, ...]
    questions: tuple[Question, ...]
    # a session kept under a derived id (`<id>#2`) -> the source id it repeats; retrieving the derived
    # session counts as retrieving the source one
    session_aliases: Mapping[str, str] = field(default_factory=dict)
    counts: LoadCounts = field(default_factory=LoadCounts)

    @property
    def num_turns(self) -> int:
        return sum(len(session.turns) for session in self.sessions)

    def source_session(self, session_id: str) -> str:
        """The source id of a session id (itself unless it is a derived id)."""
        return self.session_aliases.get(session_id, session_id)

    def source_turn(self, turn_id: str) -> str:
        """A turn id `<session>:<index>` with its session part mapped to the source id."""
        session, sep, index = turn_id.rpartition(":")
        if not sep or session not in self.session_aliases:
            return turn_id
        return f"{self.session_aliases[session]}:{index}"


@dataclass(frozen=True)
class Dataset:
    """A loaded dataset; `sha256` identifies the exact source file."""

    name: str
    kind: DatasetKind
    instances: tuple[Instance, ...]
    sha256: str
    source: str = ""
    failures: tuple[InstanceFailure, ...] = ()  # entries that could not be loaded, in source order
    errata: ErrataApplied | None = None  # the errata applied after loading (dataset.errata), if any

    @property
    def counts(self) -> LoadCounts:
        applied = self.errata.counts if self.errata is not None else LoadCounts()
        return sum((instance.counts for instance in self.instances), applied)

    @property
    def duplicate_sessions_dropped(self) -> int:
        return self.counts.duplicate_sessions_dropped

    def questions(self) -> Iterator[tuple[Instance, Question]]:
        for instance in self.instances:
            for question in instance.questions:
                yield instance, question

    @property
    def num_questions(self) -> int:
        return sum(len(instance.questions) for instance in self.instances)

    def category_counts(self) -> dict[str, int]:
        return dict(Counter(question.category for _, question in self.questions()))


_XZ_MAGIC, _GZIP_MAGIC = b"\xfd7zXZ\x00", b"\x1f\x8b"


def open_text(path: Path) -> IO[str]:
    """`path` as UTF-8 text, unpacked on the fly when it is xz or gzip (told by its first bytes)."""
    with open(path, "rb") as handle:
        head = handle.read(6)
    if head.startswith(_XZ_MAGIC):
        return lzma.open(path, "rt", encoding="utf-8")
    if head.startswith(_GZIP_MAGIC):
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def read_json_list(path: Path, what: str) -> list[Any]:
    """The JSON array in `path` (plain, `.xz` or `.gz`), which should hold a list of `what`."""
    try:
        with open_text(path) as handle:
            data = json.load(handle)
    except (OSError, EOFError, lzma.LZMAError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DatasetError(f"{path}: not a readable JSON file ({one_line(exc)})") from None
    if not isinstance(data, list):
        raise DatasetError(f"{path}: expected a JSON list of {what}, found a JSON {type(data).__name__}")
    return data


def one_line(exc: BaseException, limit: int = 300) -> str:
    """An exception as one short line: `missing field 'x'` for a KeyError, else `Type: message`."""
    if isinstance(exc, KeyError) and exc.args:
        text = f"missing field {exc.args[0]!r}"
    else:
        text = f"{type(exc).__name__}: {exc}"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def json_type(value: Any) -> str:
    """The JSON name of a value's type: str, int, float, bool, null, list or object."""
    if value is None:
        return "null"
    names = {bool: "bool", int: "int", float: "float", str: "str", list: "list", dict: "object"}
    return names.get(type(value), type(value).__name__)


def answer_text(value: Any) -> str:
    """Gold answers are text; the sources sometimes store ints (or None when absent)."""
    if value is None:
        return ""
    return sanitize_text(str(value))


def scalar_text(value: Any, what: str) -> str:
    """A text field that a source may also store as a number; None is empty; a list or object is an
    error naming `what`."""
    if value is None:
        return ""
    if isinstance(value, (str, int, float)):
        return str(value)
    raise ValueError(f"{what} must be text, got a JSON {json_type(value)}")


def readable_turns(turns: Sequence[Turn]) -> tuple[Turn, ...]:
    """The turns with something to read (`memforest.sessions.readable`): a turn of only whitespace,
    control or format characters (a zero-width space, a BOM, a soft hyphen) reaches no system."""
    return tuple(turn for turn in turns if readable(turn.content))


def clean_sessions(sessions: Sequence[Session]) -> tuple[list[Session], LoadCounts]:
    """Sessions without their unreadable turns (turn ids unchanged), less those left with none."""
    kept, turns_dropped, sessions_dropped = [], 0, 0
    for session in sessions:
        turns = readable_turns(session.turns)
        turns_dropped += len(session.turns) - len(turns)
        if turns:
            kept.append(replace(session, turns=turns))
        else:
            sessions_dropped += 1
    counts = LoadCounts(unreadable_turns_dropped=turns_dropped,
                        instances_with_unreadable_turns=int(turns_dropped > 0),
                        empty_sessions_dropped=sessions_dropped)
    return kept, counts


def entry_id(entry: Any, key: str, position: int) -> str:
    """An entry's id (`entry[key]`), or `entry <position>` when it has none to read."""
    if isinstance(entry, dict) and isinstance(entry.get(key), (str, int)) and str(entry[key]):
        return str(entry[key])
    return f"entry {position}"


def parse_entries(entries: Sequence[tuple[str, Any]], parse: Callable[[Any], Instance]
                  ) -> tuple[tuple[Instance, ...], tuple[InstanceFailure, ...]]:
    """Each (id, entry) parsed on its own: an entry that raises becomes a `load` failure of its id, and
    the others load. A second entry with an id already loaded is a failure too."""
    instances: list[Instance] = []
    failures: list[InstanceFailure] = []
    seen: set[str] = set()
    for iid, entry in entries:
        if iid in seen:
            failures.append(InstanceFailure(iid, "load", "another entry of the file has the same id"))
            continue
        try:
            instance = parse(entry)
        except Exception as exc:  # one bad entry never ends a load: it is that entry's failure
            failures.append(InstanceFailure(iid, "load", one_line(exc)))
            continue
        seen.add(iid)
        instances.append(instance)
    return tuple(instances), tuple(failures)


def select(items: list[T], key: Callable[[T], str], limit: int | None, ids: Sequence[str] | None) -> list[T]:
    """Keep the items whose key is in `ids` (in source order), then the first `limit`."""
    if ids is not None:
        wanted = set(ids)
        missing = wanted - {key(item) for item in items}
        if missing:
            raise DatasetError(f"unknown instance ids: {sorted(missing)[:5]}")
        items = [item for item in items if key(item) in wanted]
    if limit is not None:
        items = items[: max(limit, 0)]
    return items
