"""Generators of invented files with the real shape of LongMemEval and LoCoMo (counts, fields, quirks).

They contain no benchmark text. Tests use them to check loaders at full question counts; size tests can
scale `sessions` and `turns` up to the real per-instance volume.
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from .locomo import format_date as format_locomo_date
from .longmemeval import format_date

LONGMEMEVAL_TYPE_COUNTS: dict[str, int] = {
    "single-session-user": 70,
    "single-session-assistant": 56,
    "single-session-preference": 30,
    "multi-session": 133,
    "knowledge-update": 78,
    "temporal-reasoning": 133,
}
# 30 abstention questions in all; how they split across types here is illustrative only.
LONGMEMEVAL_ABSTENTION_COUNTS: dict[str, int] = {
    "single-session-user": 6,
    "multi-session": 12,
    "knowledge-update": 6,
    "temporal-reasoning": 6,
}
# 32 integer answers in all, among counting and date-arithmetic questions.
LONGMEMEVAL_INT_COUNTS: dict[str, int] = {"multi-session": 20, "temporal-reasoning": 12}
LOCOMO_CATEGORY_COUNTS: dict[int, int] = {1: 282, 2: 321, 3: 96, 4: 841, 5: 446}
LOCOMO_CONVERSATIONS = 10


def write_json(records: list[dict[str, Any]], path: str | Path) -> Path:
    path = Path(path)
    path.write_text(json.dumps(records), encoding="utf-8")
    return path


def _haystack(index: int, sessions: int, turns: int, start: datetime) -> dict[str, Any]:
    ids = [f"q{index:03d}_s{n}" for n in range(sessions)]
    dates = [format_date(start + timedelta(days=3 * n, hours=n % 5)) for n in range(sessions)]
    haystack = []
    for n in range(sessions):
        session = []
        for t in range(turns):
            turn: dict[str, Any] = {
                "role": "user" if t % 2 == 0 else "assistant",
                "content": f"Synthetic message {t} of session {n} for question {index}.",
            }
            if n == 0 and t == 0:
                turn["has_answer"] = True
            session.append(turn)
        haystack.append(session)
    return {
        "haystack_session_ids": ids,
        "haystack_dates": dates,
        "haystack_sessions": haystack,
        "answer_session_ids": ids[:1],
    }


def longmemeval_shaped(sessions: int = 2, turns: int = 2) -> list[dict[str, Any]]:
    """500 LongMemEval-format questions with the real type, abstention and int-answer counts."""
    records: list[dict[str, Any]] = []
    start = datetime(2023, 1, 2, 9, 0)
    for qtype, count in LONGMEMEVAL_TYPE_COUNTS.items():
        n_abs = LONGMEMEVAL_ABSTENTION_COUNTS.get(qtype, 0)
        n_int = LONGMEMEVAL_INT_COUNTS.get(qtype, 0)
        for k in range(count):
            index = len(records)
            abstention = k < n_abs
            answer: str | int = n_abs + k if n_abs <= k < n_abs + n_int else f"answer {index}"
            entry: dict[str, Any] = {
                "question_id": f"synth{index:04d}" + ("_abs" if abstention else ""),
                "question_type": qtype,
                "question": f"Synthetic question {index} of type {qtype}?",
                "answer": answer,
                "question_date": format_date(start + timedelta(days=3 * sessions)),
            }
            entry.update(_haystack(index, sessions, turns, start))
            records.append(entry)
    return records


def _conversation(sample: int, sessions: int, turns: int) -> dict[str, Any]:
    names = (f"Ari{sample}", f"Bea{sample}")
    conversation: dict[str, Any] = {"speaker_a": names[0], "speaker_b": names[1]}
    start = datetime(2023, 5, 8, 13, 56)
    for n in range(1, sessions + 1):
        conversation[f"session_{n}_date_time"] = format_locomo_date(start + timedelta(days=9 * n, minutes=7 * n))
        conversation[f"session_{n}"] = [
            {
                "speaker": names[t % 2],
                "dia_id": f"D{n}:{t + 1}",
                "text": f"Synthetic line {t + 1} of session {n}.",
            }
            for t in range(turns)
        ]
    # The real file has date keys with no session behind them.
    conversation[f"session_{sessions + 1}_date_time"] = format_locomo_date(
        start + timedelta(days=9 * (sessions + 1))
    )
    return conversation


def _qa(sample: int, category: int, k: int, sessions: int, turns: int) -> dict[str, Any]:
    dia = f"D{k % sessions + 1}:{k % turns + 1}"
    item: dict[str, Any] = {
        "question": f"Synthetic question {k} (category {category})?",
        "evidence": [dia],
        "category": category,
    }
    if category == 5:
        item["adversarial_answer"] = f"trap {k}"
    else:
        item["answer"] = 2000 + k if k % 7 == 0 else f"answer {sample}.{k}"
    return item


def locomo_shaped(sessions: int = 3, turns: int = 2) -> list[dict[str, Any]]:
    """Ten LoCoMo-format conversations holding 1,986 questions in the real category counts."""
    samples = []
    for sample in range(LOCOMO_CONVERSATIONS):
        qa: list[dict[str, Any]] = []
        for category, total in LOCOMO_CATEGORY_COUNTS.items():
            share, rest = divmod(total, LOCOMO_CONVERSATIONS)
            qa.extend(_qa(sample, category, k, sessions, turns) for k in range(share + (sample < rest)))
        samples.append(
            {
                "sample_id": f"conv-synth-{sample}",
                "conversation": _conversation(sample, sessions, turns),
                "qa": qa,
                "event_summary": {},
                "observation": {},
                "session_summary": {},
            }
        )
    return samples


# ---------------------------------------------------------------- full-size LongMemEval-S stand-in

_WORDS = ["time", "year", "people", "way", "day", "man", "thing", "woman", "life", "child", "world", "school", "state", "family", "student", "group", "country", "problem", "hand", "part", "place", "case", "week", "company", "system", "program", "question", "work", "government", "number", "night", "point", "home", "water", "room", "mother", "area", "money", "story", "fact", "month", "lot", "right", "study", "book", "eye", "job", "word", "business", "issue", "side", "kind", "head", "house", "service", "friend", "father", "power", "hour", "game", "line", "end", "member", "law", "car", "city", "community", "name", "president", "team", "minute", "idea", "kid", "body", "information", "back", "parent", "face", "others", "level", "office", "door", "health", "person", "art", "war", "history", "party", "result", "change", "morning", "reason", "research", "girl", "guy", "moment", "air", "teacher", "force", "education", "garden", "recipe", "trip", "budget", "plan", "schedule", "project", "meeting", "dinner", "flight", "hotel", "camera", "phone", "laptop", "course", "lesson", "market", "price", "weekend", "concert", "movie", "museum", "library", "always", "usually", "often", "really", "quite", "rather", "maybe", "probably", "almost", "already", "still", "just", "also", "even", "good", "new", "first", "last", "long", "great", "little", "own", "other", "old", "right", "big", "high", "different", "small", "large", "next", "early", "young", "important", "few", "public", "bad", "same", "able", "quick", "careful", "simple", "useful", "cheap", "warm", "bright", "make", "know", "think", "take", "see", "come", "want", "look", "use", "find", "give", "tell", "ask", "work", "seem", "feel", "try", "leave", "call", "keep", "start", "show", "hear", "play", "run", "move", "like", "live", "believe", "hold", "bring", "happen", "write", "provide", "sit", "stand", "lose", "pay", "meet", "include", "continue", "set", "learn", "lead", "understand", "watch", "follow", "stop", "create", "speak", "read", "allow", "add", "spend", "grow", "open", "walk", "win", "offer", "remember", "love", "consider", "appear", "buy", "wait", "serve", "die", "send", "expect", "build", "stay", "the", "a", "of", "to", "and", "in", "that", "for", "with", "on", "at", "from", "by", "about", "as", "into", "like", "through", "after", "over", "between", "out", "against", "during", "without", "before", "under", "around", "among", "because", "while", "although", "since", "if", "when", "so", "then"]
_SYLLABLES = ("ka", "lo", "ve", "tri", "mar", "sen", "dor", "ia", "ul", "bex", "no", "qua", "rin", "zel", "pha")
_THINGS = ("bicycle", "painting", "guitar", "sofa", "tent", "watch", "kettle", "jacket", "telescope", "rug")
_COLOURS = ("red", "green", "blue", "yellow", "purple", "orange", "silver", "black", "white", "teal")


def _sentence(rng: random.Random, low: int = 8, high: int = 22) -> str:
    words = rng.choices(_WORDS, k=rng.randint(low, high))
    return " ".join(words).capitalize() + rng.choice(".!?.")


def _text(rng: random.Random, chars: int) -> str:
    parts: list[str] = []
    size = 0
    while size < chars:
        parts.append(_sentence(rng))
        size += len(parts[-1]) + 1
    return " ".join(parts)


def _name(rng: random.Random) -> str:
    return "".join(rng.choices(_SYLLABLES, k=rng.randint(2, 4))).capitalize()


def _sized_entry(index: int, qtype: str, abstention: bool, rng: random.Random, sessions: int,
                 turns: int) -> dict[str, Any]:
    """One question over a haystack of realistic size; 1-3 sessions hold a planted answer turn."""
    shop, thing, colour = _name(rng), rng.choice(_THINGS), rng.choice(_COLOURS)
    count = rng.randint(sessions - 4, sessions + 4)
    start = datetime(2023, 1, 1, 8, 0) + timedelta(days=rng.randint(0, 200))
    gold = set(rng.sample(range(count), k=rng.randint(1, 3)))
    ids = [f"sized{index:04d}_{n}" for n in range(count)]
    dates, haystack = [], []
    for n in range(count):
        moment = start + timedelta(days=7 * n + rng.randint(0, 5), hours=rng.randint(0, 12))
        dates.append(format_date(moment))
        session = []
        for t in range(max(2, turns + rng.randint(-2, 2))):
            user = t % 2 == 0
            content = _text(rng, rng.randint(200, 600) if user else rng.randint(800, 2500))
            turn: dict[str, Any] = {"role": "user" if user else "assistant", "content": content}
            if n in gold and t == 0:
                turn["content"] = f"Last week I bought a {colour} {thing} from {shop}. " + content
                turn["has_answer"] = True
            session.append(turn)
        haystack.append(session)
    return {
        "question_id": f"sized{index:04d}" + ("_abs" if abstention else ""),
        "question_type": qtype,
        "question": f"What colour was the {thing} I bought from {shop}?",
        "answer": colour,
        "question_date": format_date(start + timedelta(days=7 * count + 3)),
        "haystack_session_ids": ids,
        "haystack_dates": dates,
        "haystack_sessions": haystack,
        "answer_session_ids": [ids[n] for n in sorted(gold)],
    }


def write_longmemeval_s_sized(path: str | Path, questions: int = 500, sessions: int = 48, turns: int = 10,
                              seed: int = 0) -> Path:
    """Stream a LongMemEval-S-sized file (500 questions, ~48 sessions of ~10 turns, user turns of
    200-600 and assistant turns of 800-2,500 characters: about 260 MB) of invented filler text.

    Each question plants its answer in 1-3 sessions; retrieval figures on it test the plumbing only."""
    rng = random.Random(seed)
    kinds = [(qtype, k < LONGMEMEVAL_ABSTENTION_COUNTS.get(qtype, 0))
             for qtype, total in LONGMEMEVAL_TYPE_COUNTS.items() for k in range(total)]
    path = Path(path)
    with path.open("w", encoding="utf-8") as handle:
        handle.write("[")
        for index in range(questions):
            qtype, abstention = kinds[index % len(kinds)]
            handle.write(("," if index else "") + json.dumps(_sized_entry(index, qtype, abstention, rng,
                                                                            sessions, turns)))
        handle.write("]")
    return path


if __name__ == "__main__":
    import sys

    if len(sys.argv) < 2:
        sys.exit("usage: python -m benchmarks.datasets.synthetic OUT.json [QUESTIONS]")
    out = write_longmemeval_s_sized(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 500)
    print(f"{out}: {out.stat().st_size / 2**20:.1f} MiB")
