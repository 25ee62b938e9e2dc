"""LoCoMo loader (`locomo10.json`: ten long conversations between two people, with QA).

LoCoMo has no assistant: both speakers are people. Every turn gets role "user", the speaker's name
in `Turn.speaker` and the spoken text alone as content: each adapter attaches the speaker once, in the
form its library takes (a field, or a `Name: ` prefix). A turn that shares an image renders as
`text [shares <blip_caption>]`.
Turn ids are the source `dia_id`s (`D<N>:<i>`), session ids are `session_<N>`, and sessions are
ordered by N. Questions are numbered in source order (`<sample_id>:q<index>`) whether or not
category 5 is loaded. Category 5 (adversarial) questions are marked as abstentions: their `answer`
is usually absent (empty string here) and `extra["adversarial_answer"]` keeps the trap answer.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from baselines.base import Session, Turn

from .records import (
    MONTH_NAMES,
    Dataset,
    Instance,
    Question,
    answer_text,
    read_json_list,
    sanitize_text,
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
    return f"{hour}:{moment.minute:02d} {meridiem} on {moment.day} {MONTH_NAMES[moment.month - 1]}, {moment.year}"


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
    text = str(raw.get("text", "")).strip()
    caption = raw.get("blip_caption")
    if caption:
        text = f"{text} [shares {caption}]".strip()
    elif raw.get("img_url"):
        text = f"{text} [shares an image]".strip()
    return sanitize_text(text)


def parse_sessions(conversation: dict[str, Any]) -> tuple[Session, ...]:
    """Sessions present in a conversation, ordered by their number; date keys alone are ignored."""
    numbers = sorted(
        int(match.group(1))
        for key, value in conversation.items()
        if (match := _SESSION_KEY.match(key)) and isinstance(value, list)
    )
    sessions = []
    for number in numbers:
        date_key = f"session_{number}_date_time"
        if date_key not in conversation:
            raise ValueError(f"session_{number} has no {date_key}")
        timestamp = parse_date(str(conversation[date_key]))
        turns = tuple(
            Turn(
                role="user",
                content=render_turn(raw),
                timestamp=timestamp,
                turn_id=str(raw.get("dia_id") or f"D{number}:{index + 1}"),
                speaker=str(raw.get("speaker", "unknown")),
            )
            for index, raw in enumerate(conversation[f"session_{number}"])
        )
        sessions.append(Session(session_id=f"session_{number}", timestamp=timestamp, turns=turns))
    return tuple(sessions)


def parse_question(sample_id: str, index: int, raw: dict[str, Any]) -> Question:
    category = int(raw["category"])
    turns = extract_dia_ids(raw.get("evidence", []))
    extra: dict[str, Any] = {"category_id": category, "evidence_raw": raw.get("evidence", [])}
    if "adversarial_answer" in raw:
        extra["adversarial_answer"] = answer_text(raw["adversarial_answer"])
    return Question(
        question_id=f"{sample_id}:q{index}",
        question=sanitize_text(str(raw["question"])),
        answer=answer_text(raw.get("answer")),
        category=CATEGORY_NAMES.get(category, f"category-{category}"),
        question_date=None,
        evidence_sessions=tuple(dict.fromkeys(session_of(dia) for dia in turns)),
        evidence_turns=turns,
        abstention=category == ADVERSARIAL,
        extra=extra,
    )


def parse_sample(sample: dict[str, Any], include_adversarial: bool = False) -> Instance:
    """One conversation and the questions asked about it."""
    sample_id = str(sample["sample_id"])
    questions = tuple(
        parse_question(sample_id, index, raw)
        for index, raw in enumerate(sample.get("qa", []))
        if include_adversarial or int(raw["category"]) != ADVERSARIAL
    )
    return Instance(
        instance_id=sample_id,
        user_id=sample_id,
        sessions=parse_sessions(sample["conversation"]),
        questions=questions,
    )


def load_locomo(
    path: str | Path,
    name: str = "locomo",
    limit: int | None = None,
    instance_ids: Sequence[str] | None = None,
    include_adversarial: bool = False,
) -> Dataset:
    """Load a LoCoMo-format JSON list from `path` (categories 1-4 unless `include_adversarial`)."""
    path = Path(path)
    samples = read_json_list(path, "conversations")
    chosen = select(samples, lambda sample: str(sample["sample_id"]), limit, instance_ids)
    instances = tuple(parse_sample(sample, include_adversarial) for sample in chosen)
    return Dataset(name=name, kind="locomo", instances=instances, sha256=sha256_file(path), source=str(path))
