"""What repeated judging says about a judge: the majority verdict of each answer, how often the repeats
agree, and how far the accuracy moves from one repeat to another."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from statistics import fmean
from typing import Any

from benchmarks.judging.judges import Verdict

Answer = tuple[str, str, str, int]  # (method, dataset, question_id, attempt)


def _row(verdict: Verdict | Mapping[str, Any]) -> Mapping[str, Any]:
    return verdict.to_dict() if isinstance(verdict, Verdict) else verdict


def repeat_summary(verdicts: Iterable[Verdict | Mapping[str, Any]]) -> dict[str, Any]:
    """Summarise one judge's verdicts (Verdict objects or `Verdict.to_dict()` rows) over its repeats.

    An answer is one (method, dataset, question, attempt); a verdict repeated for the same answer and
    repeat (a re-judged attempt) counts once, the last one. Returns
    - `majority`: per answer {question_id, attempt, method, dataset, correct, votes, repeats}, `correct`
      when more than half of its repeats say correct (a tie counts as incorrect);
    - `agreement`: the share of answers whose repeats all agree (answers judged once agree trivially);
    - `accuracy_per_repeat`: per repeat, the mean over questions of the share of correct attempts (pass@1,
      as the run's accuracy), and `accuracy_min` / `accuracy_max` over the repeats;
    - `majority_accuracy`: the same accuracy from the majority verdicts; `repeats`: the most repeats an
      answer has; `answers`: how many answers.
    Empty input gives None for every rate."""
    latest: dict[tuple[Answer, int], bool] = {}
    for verdict in verdicts:
        row = _row(verdict)
        answer = (str(row.get("method", "")), str(row.get("dataset", "")), str(row["question_id"]),
                  int(row.get("attempt", 0)))
        latest[(answer, int(row.get("repeat", 0)))] = bool(row.get("correct"))
    votes: dict[Answer, dict[int, bool]] = defaultdict(dict)
    for (answer, repeat), correct in latest.items():
        votes[answer][repeat] = correct
    majority = [_majority(answer, by_repeat) for answer, by_repeat in sorted(votes.items())]
    repeats = sorted({repeat for by_repeat in votes.values() for repeat in by_repeat})
    per_repeat = {str(r): _accuracy({a: v[r] for a, v in votes.items() if r in v}) for r in repeats}
    rates = [rate for rate in per_repeat.values() if rate is not None]
    return {
        "answers": len(votes),
        "repeats": max((len(v) for v in votes.values()), default=0),
        "majority": majority,
        "majority_accuracy": _accuracy({(m["method"], m["dataset"], m["question_id"], m["attempt"]):
                                        m["correct"] for m in majority}),
        "agreement": fmean(len(set(v.values())) == 1 for v in votes.values()) if votes else None,
        "accuracy_per_repeat": per_repeat,
        "accuracy_min": min(rates) if rates else None,
        "accuracy_max": max(rates) if rates else None,
    }


def majority_correct(votes: int, repeats: int) -> bool:
    """The majority verdict of `repeats` verdicts of which `votes` say correct: a tie is incorrect."""
    return 2 * votes > repeats


def _majority(answer: Answer, by_repeat: Mapping[int, bool]) -> dict[str, Any]:
    method, dataset, question_id, attempt = answer
    votes = sum(by_repeat.values())
    return {"method": method, "dataset": dataset, "question_id": question_id, "attempt": attempt,
            "correct": majority_correct(votes, len(by_repeat)), "votes": votes, "repeats": len(by_repeat)}


def _accuracy(correct: Mapping[Answer, bool]) -> float | None:
    """Mean over questions of the share of their attempts judged correct (pass@1)."""
    per_question: dict[tuple[str, str, str], list[bool]] = defaultdict(list)
    for (method, dataset, question_id, _), ok in correct.items():
        per_question[(method, dataset, question_id)].append(ok)
    return fmean(fmean(oks) for oks in per_question.values()) if per_question else None
