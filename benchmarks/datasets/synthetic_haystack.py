"""Synthetic LongMemEval- and LoCoMo-format files whose retrieval behaves like the real ones.

LongMemEval-like: each question's haystack (~48 sessions of ~10 turns, user turns of 200-600 and
assistant turns of 800-2,500 characters) mixes fresh sessions, sessions drawn from a pool shared by
all haystacks (about a fifth of all sessions repeat across haystacks, as in the real file), and the
evidence sessions: a fact said once in the middle of a user turn, a list inside a long assistant turn,
a value that changes later, an event on a date, a preference. Questions ask in other words than the
evidence; sessions on the same topic are near misses. LoCoMo-like: two named friends chatting over
dated sessions, facts said by one of them, questions about them in the third person with `D<s>:<t>`
evidence ids, in categories 1-4.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Any

from . import synthetic_facts as facts
from .locomo import format_date as format_locomo_date
from .longmemeval import format_date
from .synthetic_text import TOPIC_NAMES, assistant_text, chat_line, insert_sentence, topic, user_text

Turn = dict[str, Any]
SHARED_POOL = 800  # sessions shared across haystacks; 12 of them per haystack repeat ~21% of sessions
SHARED_PER_HAYSTACK = 12
NEAR_MISSES = 3  # extra sessions on the evidence's topic per haystack
_AGO = ((14, "two weeks ago"), (21, "three weeks ago"), (10, "about ten days ago"), (30, "a month ago"),
        (42, "six weeks ago"))


def filler_session(rng: random.Random, topic_name: str, turns: int) -> list[Turn]:
    top = topic(topic_name)
    return [{"role": "user", "content": user_text(rng, top, rng.randint(200, 600))} if t % 2 == 0 else
            {"role": "assistant", "content": assistant_text(rng, top, rng.randint(800, 2500))}
            for t in range(max(2, turns + rng.randint(-2, 2)))]


def plant_user(rng: random.Random, session: list[Turn], sentence: str) -> list[Turn]:
    """`sentence` inside a random user turn of `session`, flagged `has_answer`."""
    at = rng.choice([i for i, t in enumerate(session) if t["role"] == "user"])
    session[at] = {"role": "user", "content": insert_sentence(rng, session[at]["content"], sentence),
                   "has_answer": True}
    return session


def plant_list(rng: random.Random, session: list[Turn], category: str, items: tuple[str, ...]) -> list[Turn]:
    """An assistant turn giving `items` as a numbered list of `category`, after a long preamble."""
    at = rng.choice([i for i, t in enumerate(session) if t["role"] == "assistant"])
    preamble = session[at]["content"].split("\n")
    lines = [*preamble[: rng.randint(2, 6)], f"Here are some {category} you might like:",
             *(f"{n + 1}. {item}: worth a look, people who tried it were very positive."
               for n, item in enumerate(items)),
             preamble[-1]]
    session[at] = {"role": "assistant", "content": "\n".join(lines), "has_answer": True}
    return session


class SharedPool:
    """Sessions that several haystacks hold, with one id, date and content each (built on first use)."""

    def __init__(self, seed: int, turns: int, start: datetime) -> None:
        self.seed, self.turns, self.start = seed, turns, start
        self.sessions: dict[int, tuple[str, str, list[Turn]]] = {}

    def get(self, n: int) -> tuple[str, str, list[Turn]]:
        if n not in self.sessions:
            rng = random.Random(self.seed * 100_003 + n)
            when = self.start + timedelta(days=rng.randint(0, 240), hours=rng.randint(8, 22))
            self.sessions[n] = (f"shared_{n:04d}", format_date(when),
                                filler_session(rng, rng.choice(TOPIC_NAMES), self.turns))
        return self.sessions[n]


def _evidence(rng: random.Random, qtype: str, abstention: bool, turns: int, asked: datetime
              ) -> tuple[str, str, str, list[tuple[datetime, list[Turn]]]]:
    """(topic, question, answer, evidence sessions with their dates) for one question type."""
    def day(lo: int, hi: int) -> datetime:
        return asked - timedelta(days=rng.randint(lo, hi), hours=rng.randint(0, 10))

    def session(topic_name: str) -> list[Turn]:
        return filler_session(rng, topic_name, turns)

    if qtype == "single-session-assistant":
        top, category, items = rng.choice(facts.LISTS)
        k = rng.randrange(len(items))
        q = f"Earlier you gave me a few {category}; what was the {facts.ORDINALS[k]} one you mentioned?"
        return top, q, items[k], [(day(5, 200), plant_list(rng, session(top), category, items))]
    if qtype == "single-session-preference":
        top, said, request, _ = rng.choice(facts.PREFERENCES)
        return (top, request, f"something that fits: {said}",
                [(day(5, 200), plant_user(rng, session(top), said))])
    if qtype == "multi-session":
        top, said, count_q, _, _, items = rng.choice(facts.COUNTED)
        chosen = rng.sample(items, rng.randint(2, 3))
        return (top, count_q, str(len(chosen)),
                [(day(5, 200), plant_user(rng, session(top), said.format(item=i)))
                 for i in chosen])
    if qtype == "knowledge-update":
        top, old, new, q, values = rng.choice(facts.UPDATED)
        a, b = rng.sample(values, 2)
        first = day(100, 200)
        return top, q, b, [(first, plant_user(rng, session(top), old.format(value=a))),
                           (first + timedelta(days=rng.randint(20, 90)),
                            plant_user(rng, session(top), new.format(value=b)))]
    if qtype == "temporal-reasoning":
        return _temporal(rng, turns, asked, day, session)
    kind = rng.choice(facts.FACTS)
    slots = facts.fill(rng, kind)
    q = kind.question.format(**slots)
    if abstention:  # asked about, never said
        return kind.topic, q, "not mentioned", []
    return (kind.topic, q, slots[kind.answer],
            [(day(5, 200), plant_user(rng, session(kind.topic), kind.statement.format(**slots)))])


def _temporal(rng: random.Random, turns: int, asked: datetime, day: Any, session: Any
              ) -> tuple[str, str, str, list[tuple[datetime, list[Turn]]]]:
    style = rng.random()
    if style < 0.4:  # how long ago: found by what happened
        top, said, what = rng.choice(facts.EVENTS)
        when = day(5, 120)
        return (top, f"How many days ago did I {what}?", str((asked - when).days),
                [(when, plant_user(rng, session(top), said))])
    if style < 0.7:  # which came first: two events
        (t1, s1, w1), (t2, s2, w2) = rng.sample(facts.EVENTS, 2)
        d1, d2 = day(5, 200), day(5, 200)
        first = w1 if d1 < d2 else w2
        return t1, f"Which did I do first, {w1} or {w2}?", first, [(d1, plant_user(rng, session(t1), s1)),
                                                                     (d2, plant_user(rng, session(t2), s2))]
    # found by when: the same kind of event at several dates, one of them the asked one
    top, said, _, dated_q, _, items = rng.choice(facts.COUNTED)
    days, ago = rng.choice(_AGO)
    target = asked - timedelta(days=days, hours=rng.randint(0, 20))
    others = [asked - timedelta(days=d) for d in rng.sample([d for d in range(60, 200, 9)], 2)]
    picks = rng.sample(items, 3)
    gold = plant_user(rng, session(top), said.format(item=picks[0]))
    decoys = [(when, plant_user(rng, session(top), said.format(item=i)))
              for when, i in zip(others, picks[1:])]
    for _, decoy in decoys:  # said, but not the asked date: not evidence
        for turn in decoy:
            turn.pop("has_answer", None)
    return top, dated_q.format(ago=ago), picks[0], [(target, gold), *[(w, s) for w, s in decoys]]


def longmemeval_entry(index: int, qtype: str, abstention: bool, rng: random.Random, pool: SharedPool,
                      sessions: int, turns: int) -> dict[str, Any]:
    qid = f"synth{index:04d}" + ("_abs" if abstention else "")
    asked = pool.start + timedelta(days=250 + rng.randint(0, 20), hours=rng.randint(8, 20))
    top, question, answer, evidence = _evidence(rng, qtype, abstention, turns, asked)
    count = max(len(evidence) + SHARED_PER_HAYSTACK + NEAR_MISSES + 2,
                rng.randint(sessions - 4, sessions + 4))
    fresh = count - len(evidence) - SHARED_PER_HAYSTACK
    made: list[tuple[str, str, list[Turn], bool]] = []
    for n, (when, turns_) in enumerate(evidence):
        gold = any(t.get("has_answer") for t in turns_)
        made.append((f"{qid}_{rng.randint(0, 10**6):06d}_{n}", format_date(when), turns_, gold))
    for n in range(fresh):
        name = top if n < NEAR_MISSES else rng.choice(TOPIC_NAMES)
        when = asked - timedelta(days=rng.randint(1, 240), hours=rng.randint(0, 12))
        made.append((f"{qid}_{rng.randint(0, 10**6):06d}_f{n}", format_date(when),
                     filler_session(rng, name, turns), False))
    for n in rng.sample(range(SHARED_POOL), SHARED_PER_HAYSTACK):
        sid, date, turns_ = pool.get(n)
        made.append((sid, date, turns_, False))
    rng.shuffle(made)
    return {
        "question_id": qid, "question_type": qtype, "question": question, "answer": answer,
        "question_date": format_date(asked),
        "haystack_session_ids": [m[0] for m in made], "haystack_dates": [m[1] for m in made],
        "haystack_sessions": [m[2] for m in made],
        "answer_session_ids": [m[0] for m in made if m[3]],
    }


# ---------------------------------------------------------------- LoCoMo-like conversations


def locomo_conversation(sample: int, sessions: int, turns: int, seed: int = 0) -> dict[str, Any]:
    """One two-speaker conversation with planted facts and its category 1-4 questions."""
    rng = random.Random(seed * 7919 + sample)
    names = tuple(rng.sample(facts.PEOPLE, 2))
    start = datetime(2023, 3, 1, 10, 0) + timedelta(days=rng.randint(0, 60))
    dates = [start + timedelta(days=9 * n + rng.randint(0, 5), minutes=rng.randint(0, 600))
             for n in range(sessions)]
    topics = [rng.choice(TOPIC_NAMES) for _ in range(sessions)]
    lines = [[(names[t % 2], chat_line(rng, topic(topics[n]))) for t in range(turns + rng.randint(-3, 3))]
             for n in range(sessions)]
    qa: list[dict[str, Any]] = []
    planted: set[str] = set()

    def say(who: str, text: str, top: str) -> tuple[int, str]:
        """Put `text` in the mouth of `who` in a session on `top` (or any), answered by the friend."""
        def spots(group: Any) -> list[tuple[int, int]]:
            return [(n, t) for n in group for t in range(len(lines[n]) - 1) if lines[n][t][0] == who
                    and lines[n][t][1] not in planted and lines[n][t + 1][1] not in planted]

        n, t = rng.choice(spots([n for n in range(sessions) if topics[n] == top]) or spots(range(sessions)))
        planted.add(text)
        other = names[1 - names.index(who)]
        lines[n][t] = (who, text)
        lines[n].insert(t + 1, (other, "No way, that's great! " + chat_line(rng, topic(top))))
        return n, text  # resolved to a dia id once every insertion is done

    for kind in rng.sample(facts.FACTS, rng.randint(8, 12)):  # single-hop
        who = rng.choice(names)
        slots = facts.fill(rng, kind)
        mark = say(who, kind.statement.format(**slots), kind.topic)
        qa.append({"question": kind.about.format(who=who, **slots), "answer": slots[kind.answer],
                   "marks": [mark], "category": 4})
    for top, said, what in rng.sample(facts.EVENTS, 4):
        who = rng.choice(names)
        mark = say(who, said, top)
        qa.append({"question": f"When did {who} {what.replace('my ', 'their ')}?",
                   "answer": "on the session date", "marks": [mark], "category": 2})
    for top, said, _, _, about, items in rng.sample(facts.COUNTED, 3):  # multi-hop: spread over sessions
        who = rng.choice(names)
        chosen = rng.sample(items, rng.randint(2, 3))
        marks = [say(who, said.format(item=i), top) for i in chosen]
        qa.append({"question": about.format(who=who), "answer": ", ".join(chosen), "marks": marks,
                   "category": 1})
    for top, said, _, about in rng.sample(facts.PREFERENCES, 2):  # open-domain inference
        who = rng.choice(names)
        qa.append({"question": about.format(who=who), "answer": said, "marks": [say(who, said, top)],
                   "category": 3})
    return _locomo_record(sample, names, dates, lines, qa)


def _locomo_record(sample: int, names: tuple[str, ...], dates: list[datetime],
                   lines: list[list[tuple[str, str]]], qa: list[dict[str, Any]]) -> dict[str, Any]:
    """Number the turns (`D<session>:<turn>`) and resolve each question's statements to dia ids."""
    conversation: dict[str, Any] = {"speaker_a": names[0], "speaker_b": names[1]}
    for n, session in enumerate(lines):
        conversation[f"session_{n + 1}_date_time"] = format_locomo_date(dates[n])
        conversation[f"session_{n + 1}"] = [{"speaker": who, "dia_id": f"D{n + 1}:{t + 1}", "text": text}
                                            for t, (who, text) in enumerate(session)]
    out = []
    for item in qa:
        marks = item.pop("marks")
        evidence = [f"D{n + 1}:{[text for _, text in lines[n]].index(said) + 1}" for n, said in marks]
        out.append({**item, "evidence": list(dict.fromkeys(evidence))})
    return {"sample_id": f"conv-like-{sample}", "conversation": conversation, "qa": out,
            "event_summary": {}, "observation": {}, "session_summary": {}}
