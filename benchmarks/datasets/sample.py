"""A small invented dataset in LongMemEval format, shipped as `sample.json` beside this module.

Six questions, one memory instance each, about invented people: a knowledge update (a user moving
Boston -> Davis -> Miami), two temporal questions, a multi-session count, a single-session fact and
one abstention (`_abs`). Filler sessions about unrelated chores make retrieval non-trivial.
Regenerate the file with `python -m benchmarks.datasets.sample`; a test keeps it in sync.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from .longmemeval import format_date

SAMPLE_PATH = Path(__file__).with_name("sample.json")


@dataclass(frozen=True)
class _Spec:
    when: datetime
    turns: tuple[str, ...]
    evidence: tuple[int, ...] = ()


FILLERS: tuple[tuple[str, ...], ...] = (
    (
        "My bread keeps coming out dense. I let the dough rise for about three hours. What am I doing wrong?",
        "Dense loaves usually mean under-proofing or a weak starter. Try a warmer spot and check that the "
        "dough has grown by about half.",
        "The kitchen is pretty cold, maybe 17 degrees. Would the oven light help?",
        "Yes, an oven with only the light on is often a few degrees warmer, which speeds up the rise.",
    ),
    (
        "Can you suggest a packing list for a one-night hike in the hills? I have never camped overnight.",
        "Start with shelter, a sleeping bag rated for the night's low, a headlamp, water treatment, a "
        "first-aid kit and layers.",
        "Is a stove really necessary for one night?",
        "Not strictly. Cold meals like wraps and nuts work fine, though a hot drink helps on "
        "a chilly morning.",
        "Good point, I will bring a small thermos instead.",
        "That works well. Fill it with boiling water right before you leave and it will stay warm for hours.",
    ),
    (
        "How do I remove duplicates from a Python list but keep the original order?",
        "Use dict.fromkeys: list(dict.fromkeys(items)) keeps the first occurrence of each element in order.",
        "Does that work for lists of dictionaries?",
        "No, dictionaries are not hashable. Convert each one to a tuple of sorted items first, or track "
        "seen keys yourself.",
    ),
    (
        "The leaves on my monstera are turning yellow near the bottom. Should I worry?",
        "Lower leaves yellowing is often overwatering. Let the top few centimetres of soil dry out "
        "between waterings.",
        "I water it every four days. Is that too much?",
        "Probably, for most homes. Check the soil with a finger instead of following a fixed schedule.",
        "Thanks, I will try that and see if the new leaves stay green.",
        "Good plan. Also make sure the pot drains freely.",
    ),
    (
        "Recommend me a few science-fiction novels with slow, thoughtful pacing.",
        "You might enjoy books that focus on first contact or generation ships, where the tension comes from "
        "ideas rather than battles.",
        "I prefer standalone books over long series.",
        "Then look for single-volume novels; many award shortlists are a good place to find them.",
    ),
    (
        "I want to build a monthly budget spreadsheet. What columns should it have?",
        "Date, description, category, amount, and whether the item is fixed or variable are a solid start.",
        "How do I see totals per category?",
        "A pivot table with category as rows and the sum of amount as values does exactly that.",
    ),
    (
        "What is a good way to memorise Spanish vocabulary every day?",
        "Spaced-repetition flashcards for ten minutes a day beat long irregular sessions.",
        "Should I learn words in isolation or in sentences?",
        "Sentences help: you remember the word together with its grammar and a context.",
    ),
)


def _filler(index: int, when: datetime) -> _Spec:
    return _Spec(when, FILLERS[index % len(FILLERS)])


def _entry(
    qid: str, qtype: str, question: str, answer: str | int, asked: datetime, specs: list[_Spec]
) -> dict[str, Any]:
    ids = [f"{qid}_session_{n}" for n in range(1, len(specs) + 1)]
    sessions = []
    for spec in specs:
        turns = [
            {"role": "user" if i % 2 == 0 else "assistant", "content": text}
            | ({"has_answer": True} if i in spec.evidence else {})
            for i, text in enumerate(spec.turns)
        ]
        sessions.append(turns)
    return {
        "question_id": qid,
        "question_type": qtype,
        "question": question,
        "answer": answer,
        "question_date": format_date(asked),
        "haystack_dates": [format_date(spec.when) for spec in specs],
        "haystack_session_ids": ids,
        "haystack_sessions": sessions,
        "answer_session_ids": [sid for sid, spec in zip(ids, specs, strict=True) if spec.evidence],
    }


def _moves(
    qid: str, qtype: str, question: str, answer: str, cities: tuple[str, str, str], year: int
) -> dict[str, Any]:
    first, second, third = cities
    specs = [
        _Spec(
            datetime(year, 1, 14, 9, 5),
            (
                f"I need a proper winter coat. I just moved into a flat in {first} and the "
                "wind here is brutal.",
                "Look for a long parka with a hood and synthetic or down insulation; a windproof "
                "shell matters most.",
                "Something under 200 dollars if possible.",
                "Several outdoor brands have parkas in that range during end-of-season sales.",
            ),
            (0,),
        ),
        _filler(0, datetime(year, 2, 3, 18, 30)),
        _Spec(
            datetime(year, 3, 20, 12, 0),
            (
                f"We finished moving to {second} last weekend. How do I find good bike routes around town?",
                "Local cycling clubs and route-sharing apps usually list safe routes; quiet residential "
                "streets are a good start.",
                "Do I need lights if I only ride during the day?",
                "Lights are cheap insurance; daytime running lights make you much easier to see.",
                "Fair, I will get a set.",
                "Rechargeable ones save money in the long run.",
            ),
            (0,),
        ),
        _filler(3, datetime(year, 4, 11, 20, 15)),
        _Spec(
            datetime(year, 6, 2, 8, 45),
            (
                f"Big news: my partner took a job offer, so at the end of May we relocated to {third}.",
                "Congratulations! How are you settling in?",
                "Mostly fine, but the humidity is a shock. Any tips for keeping the apartment dry?",
                "A dehumidifier and running the air conditioning regularly help; keep closets ventilated.",
            ),
            (0,),
        ),
        _filler(5, datetime(year, 6, 9, 19, 0)),
        _filler(6, datetime(year, 6, 15, 21, 30)),  # later than the question, as in LongMemEval
    ]
    return _entry(qid, qtype, question, answer, datetime(year, 6, 15, 10, 0), specs)


def _days_between() -> dict[str, Any]:
    specs = [
        _filler(2, datetime(2023, 3, 2, 14, 0)),
        _Spec(
            datetime(2023, 4, 8, 17, 20),
            (
                "Today I adopted a retired greyhound called Pickle from the Fenwick rescue. What "
                "should I buy first?",
                "A soft bed, a martingale collar, a lead, and a coat if your winters are cold: "
                "greyhounds feel the chill.",
                "Does he need a lot of exercise?",
                "Less than people think: two walks a day and a safe place to sprint now and then.",
            ),
            (0,),
        ),
        _filler(4, datetime(2023, 4, 20, 21, 10)),
        _Spec(
            datetime(2023, 5, 1, 19, 40),
            (
                "Today was my first day as a data analyst at Larkspur Analytics. I am exhausted.",
                "Congratulations on the new job! First days are tiring; what was the hardest part?",
                "Remembering everyone's names, honestly.",
                "Jot names down after each meeting with a detail about the person; it helps a lot.",
            ),
            (0,),
        ),
        _filler(6, datetime(2023, 5, 12, 7, 55)),
    ]
    question = "How many days passed between the day I adopted Pickle and my first day at Larkspur Analytics?"
    return _entry(
        "sample_tr_002", "temporal-reasoning", question, "23 days", datetime(2023, 5, 20, 9, 0), specs
    )


def _races() -> dict[str, Any]:
    specs = [
        _Spec(
            datetime(2023, 3, 12, 16, 0),
            (
                "I ran the Harbor Lights 5K this morning for the food bank. My legs are jelly.",
                "Well done! Gentle stretching and a short walk this evening will help.",
                "Should I take an ice bath?",
                "Not needed after a 5K; rest, water and sleep are enough.",
            ),
            (0,),
        ),
        _filler(1, datetime(2023, 3, 30, 11, 0)),
        _Spec(
            datetime(2023, 4, 23, 15, 30),
            (
                "Finished the Maple Run charity 5K today, two minutes faster than last month!",
                "That is a big improvement in a few weeks. What changed?",
                "I added one interval session a week.",
                "Intervals are great for speed; keep the other runs easy.",
            ),
            (0,),
        ),
        _filler(5, datetime(2023, 5, 6, 10, 0)),
        _Spec(
            datetime(2023, 5, 21, 13, 10),
            (
                "Did the Riverbend 5K for the animal shelter this morning. I also signed up for a July race, "
                "but that one is still ahead.",
                "Three charity races this spring, nice. What is the July one?",
                "A trail 10K in the hills.",
                "Trail races are slower, so judge your effort rather than your pace.",
            ),
            (0,),
        ),
    ]
    question = "How many charity 5K races have I run in total so far?"
    return _entry("sample_ms_001", "multi-session", question, 3, datetime(2023, 6, 1, 8, 0), specs)


def _cello(qid: str, question: str, answer: str) -> dict[str, Any]:
    specs = [
        _filler(6, datetime(2023, 8, 3, 9, 15)),
        _filler(3, datetime(2023, 8, 19, 18, 0)),
        _Spec(
            datetime(2023, 9, 6, 20, 30),
            (
                "I signed up for a beginner cello class at the Wrenfield community centre. Any advice for "
                "an adult learner?",
                "Practise little and often, fifteen minutes a day, and record yourself to hear your "
                "intonation improve.",
                "My fingers hurt after the first lesson.",
                "That is normal; calluses form within a few weeks.",
                "Should I rent or buy?",
                "Rent for the first months; many shops let rent count towards buying.",
            ),
            (0,),
        ),
        _filler(0, datetime(2023, 9, 25, 12, 0)),
        _filler(2, datetime(2023, 10, 2, 16, 45)),
    ]
    return _entry(qid, "single-session-user", question, answer, datetime(2023, 10, 10, 18, 0), specs)


def build_sample() -> list[dict[str, Any]]:
    """The sample dataset as LongMemEval JSON records (deterministic)."""
    return [
        _moves(
            "sample_ku_001",
            "knowledge-update",
            "Which city do I live in now?",
            "Miami",
            ("Boston", "Davis", "Miami"),
            2023,
        ),
        _moves(
            "sample_tr_001",
            "temporal-reasoning",
            "Where did I live right before I moved to Miami?",
            "Boise",
            ("Pittsburgh", "Boise", "Miami"),
            2022,
        ),
        _days_between(),
        _races(),
        _cello("sample_ssu_001", "Which instrument am I learning at the community centre?", "The cello"),
        _cello(
            "sample_ssu_002_abs",
            "Which instrument is my sister learning?",
            "Not answerable: the chats say the user is learning the cello, but nothing about a sister "
            "learning an instrument.",
        ),
    ]


def write_sample(path: Path = SAMPLE_PATH) -> Path:
    path.write_text(json.dumps(build_sample(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


if __name__ == "__main__":
    print(f"wrote {write_sample()}")
