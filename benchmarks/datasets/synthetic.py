"""Generators of invented files with the real shape of LongMemEval and LoCoMo (counts, fields, quirks).

They contain no benchmark text. Tests use them to check loaders at full question counts; size tests can
scale `sessions` and `turns` up to the real per-instance volume.
"""

from __future__ import annotations

import argparse
import json
import random
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from .locomo import format_date as format_locomo_date
from .longmemeval import format_date
from .synthetic_haystack import SharedPool, locomo_conversation, longmemeval_entry

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
        conversation[f"session_{n}_date_time"] = format_locomo_date(start
                                                                    + timedelta(days=9 * n, minutes=7 * n))
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


# ------------------------------------------------------- full-size stand-ins with realistic retrieval


# The real LongMemEval-S lists one (never evidence) session twice, same id and content, in 13 of its
# haystacks; every 38th haystack here does the same (13 of 500).
REPEAT_EVERY = 38


def _list_one_session_twice(entry: dict[str, Any], rng: random.Random) -> None:
    gold = set(entry["answer_session_ids"])
    n = rng.choice([i for i, sid in enumerate(entry["haystack_session_ids"]) if sid not in gold])
    at = rng.randint(0, len(entry["haystack_session_ids"]))
    for key in ("haystack_session_ids", "haystack_dates", "haystack_sessions"):
        entry[key].insert(at, entry[key][n])


def write_longmemeval_s_sized(path: str | Path, questions: int = 500, sessions: int = 48, turns: int = 10,
                              seed: int = 0) -> Path:
    """Stream a LongMemEval-S-sized file (500 questions of ~48 sessions of ~10 turns: about 250 MiB) in
    the real type and abstention counts, evidence buried among near misses, sessions repeated across
    haystacks (see `synthetic_haystack`) and, in 13 haystacks, one session listed twice."""
    rng = random.Random(seed)
    kinds = [(qtype, k < LONGMEMEVAL_ABSTENTION_COUNTS.get(qtype, 0))
             for qtype, total in LONGMEMEVAL_TYPE_COUNTS.items() for k in range(total)]
    order = list(range(len(kinds)))
    random.Random(seed + 1).shuffle(order)  # any prefix of the file mixes the question types
    pool = SharedPool(seed, turns, datetime(2023, 1, 1, 8, 0))
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        handle.write("[")
        for index in range(questions):
            qtype, abstention = kinds[order[index % len(kinds)]]
            entry = longmemeval_entry(index, qtype, abstention, rng, pool, sessions, turns)
            if index % REPEAT_EVERY == REPEAT_EVERY // 5:
                _list_one_session_twice(entry, random.Random(seed * 7907 + index))
            handle.write(("," if index else "") + json.dumps(entry))
        handle.write("]")
    tmp.replace(path)
    return path


def write_locomo_like(path: str | Path, conversations: int = 10, sessions: int = 24, turns: int = 22,
                      seed: int = 0) -> Path:
    """LoCoMo-format conversations between two friends with planted facts and category 1-4 questions."""
    return write_json([locomo_conversation(n, sessions, turns, seed) for n in range(conversations)], path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write a synthetic LongMemEval-S-sized (or "
                                                 "LoCoMo-like) file.")
    parser.add_argument("out")
    parser.add_argument("questions", nargs="?", type=int, default=500)
    parser.add_argument("--sessions", type=int, default=48, help="sessions per haystack (LongMemEval)")
    parser.add_argument("--turns", type=int, default=10, help="turns per session")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--locomo", type=int, metavar="CONVERSATIONS",
                        help="write LoCoMo-like conversations instead")
    args = parser.parse_args(argv)
    if args.locomo:
        out = write_locomo_like(args.out, args.locomo, seed=args.seed)
    else:
        out = write_longmemeval_s_sized(args.out, args.questions, args.sessions, args.turns, args.seed)
    print(f"{out}: {out.stat().st_size / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
