"""Errata: versioned corrections to a benchmark's gold labels, applied only when asked for
(`dataset.errata=<file>`; the default leaves the official file untouched).

An errata file (JSON or YAML) holds `version`, `dataset` (a dataset kind, `longmemeval` or `locomo`, or
one dataset name such as `longmemeval_s`) and `entries`, each with `question_id` (LoCoMo:
`<sample_id>:q<index>`, the index in the conversation's full `qa` list), `source` (the public issue
thread or audit the correction comes from, a URL), an optional `note`, and the change: `answer` (the new
gold answer), `evidence` (the new evidence: LongMemEval session ids and `<session>:<index>` turn ids,
LoCoMo dia ids `D<N>:<i>`), or `drop: true` (the question is left out of the run).

Every entry must name a question the dataset file holds (else a one-line `DatasetError`); an entry
whose question is not loaded (a subset, a limit, a LoCoMo category left out) changes nothing. What was
applied is counted (`LoadCounts.errata_*`) and described (`ErrataApplied`: the file, its version and
sha256, each change with the official value it replaced); a question keeps its official gold in
`Question.extra["errata"]`, which `errata_fields` turns into record fields.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from .records import DatasetError, ErrataApplied, Instance, Question, answer_text, json_type, one_line

# (instance, question, an erratum's evidence ids) -> (evidence sessions, evidence turns); a ValueError
# names what is wrong
EvidenceParser = Callable[[Instance, Question, Sequence[str]], tuple[tuple[str, ...], tuple[str, ...]]]
ERRATA_DIR = Path(__file__).resolve().parent / "errata"


@dataclass(frozen=True)
class Erratum:
    question_id: str
    source: str
    answer: str | None = None
    evidence: tuple[str, ...] | None = None
    drop: bool = False
    note: str = ""

    def change_text(self) -> str:
        if self.drop:
            return "drop"
        parts = [f"answer -> {self.answer!r}"] if self.answer is not None else []
        if self.evidence is not None:
            parts.append(f"evidence -> {', '.join(self.evidence)}")
        return "; ".join(parts)


@dataclass(frozen=True)
class Errata:
    path: str
    version: str
    dataset: str
    sha256: str
    entries: tuple[Erratum, ...]

    def applies_to(self, name: str, kind: str) -> bool:
        return self.dataset in (name, kind)


def load_errata(path: str | Path) -> Errata:
    """Read and check an errata file; a malformed one is a one-line DatasetError."""
    path = Path(path).expanduser()
    try:
        raw = path.read_bytes()
        data = json.loads(raw) if path.suffix == ".json" else yaml.safe_load(raw)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise DatasetError(f"errata file {path}: not readable ({one_line(exc)})") from None
    if not isinstance(data, dict) or not {"version", "dataset", "entries"} <= set(data):
        raise DatasetError(f"errata file {path}: expected an object with version, dataset and entries")
    if not isinstance(data["entries"], list):
        found = json_type(data["entries"])
        raise DatasetError(f"errata file {path}: entries must be a list, got a JSON {found}")
    entries = []
    for index, raw_entry in enumerate(data["entries"]):
        try:
            entries.append(_erratum(raw_entry))
        except (KeyError, TypeError, ValueError) as exc:
            raise DatasetError(f"errata file {path}: entry {index}: {one_line(exc)}") from None
    seen: set[str] = set()
    for entry in entries:
        if entry.question_id in seen:
            raise DatasetError(f"errata file {path}: two entries for question {entry.question_id!r}")
        seen.add(entry.question_id)
    return Errata(str(path), str(data["version"]), str(data["dataset"]), hashlib.sha256(raw).hexdigest(),
                  tuple(entries))


def _erratum(raw: Any) -> Erratum:
    if not isinstance(raw, dict):
        raise ValueError(f"an entry must be an object, got a JSON {json_type(raw)}")
    unknown = set(raw) - {"question_id", "source", "answer", "evidence", "drop", "note"}
    if unknown:
        raise ValueError(f"unknown fields {sorted(unknown)}")
    source = str(raw["source"])
    if not source.startswith(("https://", "http://")):
        raise ValueError(f"source must be the URL of the issue or audit it comes from, got {source!r}")
    evidence = raw.get("evidence")
    listed = isinstance(evidence, list) and all(isinstance(e, str) for e in evidence)
    if evidence is not None and not listed:
        raise ValueError("evidence must be a list of ids")
    drop = raw.get("drop", False)
    if not isinstance(drop, bool):
        raise ValueError(f"drop must be true or false, got {drop!r}")
    if drop == ("answer" in raw or evidence is not None):
        raise ValueError("an entry either drops its question or changes its answer and/or evidence")
    return Erratum(str(raw["question_id"]), source, answer_text(raw["answer"]) if "answer" in raw else None,
                   tuple(evidence) if evidence is not None else None, drop, str(raw.get("note") or ""))


def check_known(errata: Errata, question_ids: Collection[str], source: str) -> None:
    """Every entry must name a question of the dataset file: else a one-line DatasetError."""
    missing = [entry.question_id for entry in errata.entries if entry.question_id not in question_ids]
    if missing:
        raise DatasetError(f"errata file {errata.path}: {len(missing)} of its entries name questions "
                           f"{source} does not hold: {', '.join(missing[:5])}")


def apply_errata(instances: Sequence[Instance], errata: Errata, evidence: EvidenceParser
                 ) -> tuple[tuple[Instance, ...], ErrataApplied]:
    """The instances with the errata applied (a dropped question left out, an instance left without a
    question left out), and what was applied."""
    by_id = {entry.question_id: entry for entry in errata.entries}
    changes: list[dict[str, Any]] = []
    out = []
    for instance in instances:
        questions = []
        for question in instance.questions:
            entry = by_id.get(question.question_id)
            if entry is None:
                questions.append(question)
                continue
            changed, change = _apply(instance, question, entry, errata, evidence)
            changes.append(change)
            if changed is not None:
                questions.append(changed)
        if questions:
            out.append(replace(instance, questions=tuple(questions)))
    applied = {c["question_id"] for c in changes}
    not_loaded = tuple(e.question_id for e in errata.entries if e.question_id not in applied)
    record = ErrataApplied(errata.path, errata.version, errata.sha256, errata.dataset, len(errata.entries),
                           tuple(changes), not_loaded)
    return tuple(out), record


def _apply(instance: Instance, question: Question, entry: Erratum, errata: Errata, evidence: EvidenceParser
           ) -> tuple[Question | None, dict[str, Any]]:
    change: dict[str, Any] = {"question_id": entry.question_id, "change": entry.change_text(),
                              "source": entry.source}
    if entry.drop:
        return None, {**change, "drop": True, "answer_official": question.answer}
    official: dict[str, Any] = {}
    updates: dict[str, Any] = {}
    if entry.answer is not None:
        official["answer_official"] = question.answer
        updates.update(answer=entry.answer, answer_type="str")
        change["answer"] = {"official": question.answer, "new": entry.answer}
    if entry.evidence is not None:
        try:
            sessions, turns = evidence(instance, question, entry.evidence)
        except ValueError as exc:
            where = f"errata file {errata.path}: question {entry.question_id}"
            raise DatasetError(f"{where}: {one_line(exc)}") from None
        official.update(evidence_sessions_official=list(question.evidence_sessions),
                        evidence_turns_official=list(question.evidence_turns))
        updates.update(evidence_sessions=sessions, evidence_turns=turns)
        change["evidence"] = {"official_sessions": list(question.evidence_sessions),
                              "official_turns": list(question.evidence_turns),
                              "sessions": list(sessions), "turns": list(turns)}
    note = {**official, "version": errata.version, "sha256": errata.sha256, "source": entry.source}
    return replace(question, **updates, extra={**question.extra, "errata": note}), change


def errata_fields(question: Question) -> dict[str, Any]:
    """The fields a question's answer records carry when an erratum changed it: `answer_official` (the
    official gold it replaced), `evidence_sessions_official` / `evidence_turns_official`, and
    `errata_source` (where the correction comes from); empty for a question no erratum changed."""
    note = question.extra.get("errata")
    if not isinstance(note, dict):
        return {}
    keys = ("answer_official", "evidence_sessions_official", "evidence_turns_official")
    return {**{k: note[k] for k in keys if k in note}, "errata_source": note["source"],
            "errata_version": note["version"]}


def describe_errata(errata: Errata, applied: ErrataApplied | None = None) -> str:
    """What an errata file changes, one entry a line: question id, change, source; with the official
    values each applied change replaced when `applied` is given."""
    done = {c["question_id"]: c for c in applied.changes} if applied is not None else {}
    lines = [f"errata {errata.path}: version {errata.version}, dataset {errata.dataset}, "
             f"sha256 {errata.sha256}, {len(errata.entries)} entries"]
    for entry in errata.entries:
        change = done.get(entry.question_id)
        status = "" if applied is None else (" (not loaded)" if change is None else "")
        was = f" (official: {change['answer']['official']!r})" if change and "answer" in change else ""
        lines.append(f"- {entry.question_id}: {entry.change_text()}{was}{status} [{entry.source}]")
    return "\n".join(lines) + "\n"
