"""LoCoMo loader (`locomo10.json`: ten long conversations between two people, with QA).

LoCoMo has no assistant: both speakers are people. Every turn gets role "user", the speaker's name
in `Turn.speaker` and the spoken text alone as content: each adapter attaches the speaker once, in the
form its library takes (a field, or a `Name: ` prefix). A turn that shares an image renders as
`text [shares <blip_caption>]`.
Every session carries the conversation's `speaker_a` and `speaker_b`, in that order, as
`Session.speakers` (speaker_a does not always speak first: adapters that treat the two apart read the
order from there); a conversation without them leaves `speakers` empty.
Turn ids are the source `dia_id`s (`D<N>:<i>`), session ids are `session_<N>`, and sessions are
ordered by N. Questions are numbered in source order (`<sample_id>:q<index>`) whether or not
category 5 is loaded. Category 5 (adversarial) questions are marked as abstentions: their `answer`
is usually absent (empty string here) and `extra["adversarial_answer"]` keeps the trap answer.
Turns with nothing readable are dropped with a count (their dia ids stay unused), and so is a session
left with none. A conversation that cannot be read becomes a `load` failure of its sample id; a question
that cannot be read is left out as a `load` failure of its conversation, naming the question.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from baselines.base import Session, Turn

from .errata import Errata, apply_errata, check_known
from .records import (
    MONTH_NAMES,
    Dataset,
    Instance,
    InstanceFailure,
    Question,
    answer_text,
    clean_sessions,
    entry_id,
    json_type,
    one_line,
    parse_entries,
    read_json_list,
    sanitize_text,
    scalar_text,
    select,
    sha256_file,
)

CATEGORY_NAMES: dict[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}
ADVERSARIAL = 5
DIA_ID = re.compile(r"D\d+:\d+")
_SESSION_KEY = re.compile(r"^session_(\d+)$")
_DATE = re.compile(r"(\d{1,2}):(\d{2})\s*([ap]m)\s+on\s+(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})", re.IGNORECASE)
_MONTHS = tuple(name[:3].lower() for name in MONTH_NAMES)


def parse_date(text: str) -> datetime:
    """Parse `1:56 pm on 8 May, 2023`."""
    match = _DATE.search(text)
    if match is None or match.group(5)[:3].lower() not in _MONTHS:
        raise ValueError(f"unrecognised LoCoMo date: {text!r}")
    hour, minute, meridiem, day, month, year = match.groups()
    hour24 = int(hour) % 12 + (12 if meridiem.lower() == "pm" else 0)
    return datetime(int(year), _MONTHS.index(month[:3].lower()) + 1, int(day), hour24, int(minute))


def format_date(moment: datetime) -> str:
    """Inverse of `parse_date`: `1:56 pm on 8 May, 2023`, independent of the locale."""
    hour = moment.hour % 12 or 12
    meridiem = "am" if moment.hour < 12 else "pm"
    return (f"{hour}:{moment.minute:02d} {meridiem} on {moment.day} {MONTH_NAMES[moment.month - 1]}, "
            f"{moment.year}")


def extract_dia_ids(evidence: Any) -> tuple[str, ...]:
    """Dialogue ids found in an evidence list, tolerant of strings like "D1:3; D2:1" or "D1:3D2:1"."""
    items = evidence if isinstance(evidence, list) else [evidence]
    found = [dia for item in items if item is not None for dia in DIA_ID.findall(str(item))]
    return tuple(dict.fromkeys(found))


def session_of(dia_id: str) -> str:
    """`D3:7` -> `session_3`."""
    return f"session_{int(dia_id[1:].split(':')[0])}"


def render_turn(raw: dict[str, Any]) -> str:
    """The turn's text, plus `[shares <caption>]` when the turn carries an image (no speaker)."""
    text = scalar_text(raw.get("text"), "a turn's text").strip()
    caption = scalar_text(raw.get("blip_caption"), "a turn's blip_caption")
    if caption:
        text = f"{text} [shares {caption}]".strip()
    elif raw.get("img_url"):
        text = f"{text} [shares an image]".strip()
    return sanitize_text(text)


def parse_sessions(conversation: dict[str, Any]) -> tuple[Session, ...]:
    """Sessions present in a conversation, ordered by their number; date keys alone are ignored."""
    if not isinstance(conversation, dict):
        raise ValueError(f"conversation must be a JSON object, got a JSON {json_type(conversation)}")
    numbers = sorted(
        int(match.group(1))
        for key, value in conversation.items()
        if (match := _SESSION_KEY.match(key)) and isinstance(value, list)
    )
    speakers = conversation_speakers(conversation)
    sessions = []
    for number in numbers:
        date_key = f"session_{number}_date_time"
        if date_key not in conversation:
            raise ValueError(f"session_{number} has no {date_key}")
        timestamp = parse_date(str(conversation[date_key]))
        raw_turns = conversation[f"session_{number}"]
        turns = tuple(_turn(number, index, raw, timestamp) for index, raw in enumerate(raw_turns))
        sessions.append(Session(session_id=f"session_{number}", timestamp=timestamp, turns=turns,
                                speakers=speakers))
    return tuple(sessions)


def conversation_speakers(conversation: dict[str, Any]) -> tuple[str, ...]:
    """(`speaker_a`, `speaker_b`) as the conversation names them; empty unless both are named."""
    names = tuple(scalar_text(conversation.get(key), key).strip() for key in ("speaker_a", "speaker_b"))
    return names if all(names) else ()


def _turn(number: int, index: int, raw: Any, timestamp: datetime) -> Turn:
    if not isinstance(raw, dict):
        raise ValueError(f"session_{number} turn {index} must be a JSON object, got a JSON {json_type(raw)}")
    return Turn(
        role="user",
        content=render_turn(raw),
        timestamp=timestamp,
        turn_id=scalar_text(raw.get("dia_id"), "dia_id") or f"D{number}:{index + 1}",
        speaker=scalar_text(raw.get("speaker"), "speaker") or "unknown",
    )


def parse_question(sample_id: str, index: int, raw: dict[str, Any]) -> Question:
    if not isinstance(raw, dict):
        raise ValueError(f"a question must be a JSON object, got a JSON {json_type(raw)}")
    category = int(raw["category"])
    turns = extract_dia_ids(raw.get("evidence", []))
    extra: dict[str, Any] = {"category_id": category, "evidence_raw": raw.get("evidence", [])}
    if "adversarial_answer" in raw:
        extra["adversarial_answer"] = answer_text(raw["adversarial_answer"])
    return Question(
        question_id=f"{sample_id}:q{index}",
        question=sanitize_text(scalar_text(raw["question"], "question")),
        answer=answer_text(raw.get("answer")),
        category=CATEGORY_NAMES.get(category, f"category-{category}"),
        question_date=None,
        evidence_sessions=tuple(dict.fromkeys(session_of(dia) for dia in turns)),
        evidence_turns=turns,
        abstention=category == ADVERSARIAL,
        extra=extra,
        answer_type=json_type(raw.get("answer")),
    )


def parse_sample(sample: Any, include_adversarial: bool = False) -> tuple[Instance, list[InstanceFailure]]:
    """One conversation and the questions asked about it; a question that cannot be read is left out
    and returned as a failure of the conversation."""
    if not isinstance(sample, dict):
        raise ValueError(f"an entry must be a JSON object, got a JSON {json_type(sample)}")
    sample_id = scalar_text(sample["sample_id"], "sample_id")
    sessions, counts = clean_sessions(parse_sessions(sample["conversation"]))
    qa = sample.get("qa") or []
    if not isinstance(qa, list):
        raise ValueError(f"qa must be a list, got a JSON {json_type(qa)}")
    questions, failures = [], []
    for index, raw in enumerate(qa):
        try:
            if include_adversarial or _category(raw) != ADVERSARIAL:
                questions.append(parse_question(sample_id, index, raw))
        except Exception as exc:  # this question only: the conversation's other questions load
            failures.append(InstanceFailure(sample_id, "load", f"question {index}: {one_line(exc)}"))
    instance = Instance(instance_id=sample_id, user_id=sample_id, sessions=tuple(sessions),
                        questions=tuple(questions), counts=counts)
    return instance, failures


def _category(raw: Any) -> int:
    return int(raw["category"]) if isinstance(raw, dict) else 0


def load_locomo(
    path: str | Path,
    name: str = "locomo",
    limit: int | None = None,
    instance_ids: Sequence[str] | None = None,
    include_adversarial: bool = False,
    errata: Errata | None = None,
) -> Dataset:
    """Load a LoCoMo-format JSON list from `path` (categories 1-4 unless `include_adversarial`), with
    `errata` applied when given."""
    path = Path(path)
    samples = read_json_list(path, "conversations")
    pairs = [(entry_id(sample, "sample_id", i), sample) for i, sample in enumerate(samples)]
    if errata is not None:
        check_known(errata, file_question_ids(pairs), str(path))
    question_failures: list[InstanceFailure] = []

    def parse(sample: Any) -> Instance:
        instance, failures = parse_sample(sample, include_adversarial)
        question_failures.extend(failures)
        return instance

    instances, failures = parse_entries(select(pairs, lambda pair: pair[0], limit, instance_ids), parse)
    applied = None
    if errata is not None:
        instances, applied = apply_errata(instances, errata, errata_evidence)
    return Dataset(name=name, kind="locomo", instances=instances, sha256=sha256_file(path), source=str(path),
                   failures=(*failures, *question_failures), errata=applied)


def file_question_ids(pairs: Sequence[tuple[str, Any]]) -> set[str]:
    """The id of every question in the file (`<sample_id>:q<index>`), loaded or not."""
    return {f"{sid}:q{index}" for sid, sample in pairs if isinstance(sample, dict)
            for index in range(len(sample.get("qa") or []) if isinstance(sample.get("qa"), list) else 0)}


def errata_evidence(instance: Instance, question: Question, ids: Sequence[str]
                    ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """An erratum's evidence: dia ids `D<N>:<i>` of the conversation."""
    turns = extract_dia_ids(list(ids))
    if len(turns) != len(set(ids)):
        raise ValueError(f"evidence must be dia ids D<N>:<i>, got {', '.join(ids)}")
    sessions = tuple(dict.fromkeys(session_of(dia) for dia in turns))
    known = {session.session_id for session in instance.sessions}
    unknown = [sid for sid in sessions if sid not in known]
    if unknown:
        raise ValueError(f"evidence names sessions the conversation does not hold: {', '.join(unknown)}")
    return sessions, turns
