"""Scores computed from answer records and judge verdicts: pure functions, no I/O.

Accuracy is pass@1 averaged over questions (c/n per question, n judged attempts). Retrieval recall
skips abstention questions. F1 and BLEU-1 use SQuAD-style normalisation (lower case, no punctuation,
no articles) without stemming; they are side metrics only.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import Any

from analysis.rows import mean, pass_at_k, ranked_ids, write_rate

# ---------------------------------------------------------------- pass@k and accuracy


def pass_at_1(n: int, c: int) -> float:
    return pass_at_k(n, c, 1)


@dataclass(frozen=True)
class QuestionScore:
    """Judged attempts of one question: n attempts, c judged correct."""

    question_id: str
    category: str
    abstention: bool
    n: int
    c: int

    @property
    def pass1(self) -> float:
        return pass_at_1(self.n, self.c)


def accuracy(scores: Sequence[QuestionScore]) -> float | None:
    """Micro accuracy: mean pass@1 over questions."""
    return mean(score.pass1 for score in scores)


def accuracy_by_category(scores: Sequence[QuestionScore]) -> dict[str, float]:
    groups: dict[str, list[float]] = defaultdict(list)
    for score in scores:
        groups[score.category].append(score.pass1)
    return {category: fmean(v) for category, v in sorted(groups.items())}


def task_averaged_accuracy(scores: Sequence[QuestionScore]) -> float | None:
    """Macro accuracy: the mean of the per-category accuracies."""
    return mean(accuracy_by_category(scores).values())


def abstention_accuracy(scores: Sequence[QuestionScore]) -> float | None:
    return mean(score.pass1 for score in scores if score.abstention)


def mean_pass_at_k(scores: Sequence[QuestionScore], k: int) -> float | None:
    return mean(pass_at_k(score.n, score.c, k) for score in scores)


# ---------------------------------------------------------------- retrieval recall


def dedupe(ids: Iterable[str]) -> list[str]:
    """Drop repeated ids, keeping the first occurrence (rank order)."""
    return list(dict.fromkeys(ids))


def recall_any_at_k(ranked: Sequence[str], gold: Iterable[str], k: int) -> float | None:
    """1.0 if any gold id is among the first k distinct ranked ids; None without gold."""
    gold_set, top = set(gold), set(dedupe(ranked)[:k])
    return None if not gold_set else float(bool(gold_set & top))


def recall_all_at_k(ranked: Sequence[str], gold: Iterable[str], k: int) -> float | None:
    """1.0 if every gold id is among the first k distinct ranked ids; None without gold."""
    gold_set, top = set(gold), set(dedupe(ranked)[:k])
    return None if not gold_set else float(gold_set <= top)


def recall_at_k(ranked: Sequence[str], gold: Iterable[str], k: int) -> float | None:
    """Fraction of gold ids among the first k distinct ranked ids (LoCoMo evidence recall)."""
    gold_set, top = set(gold), set(dedupe(ranked)[:k])
    return None if not gold_set else len(gold_set & top) / len(gold_set)


def retrieval_recall(
    ranked: Sequence[str], gold: Sequence[str], ks: Sequence[int] = (1, 3, 5, 10), abstention: bool = False
) -> dict[str, float] | None:
    """recall_any@k, recall_all@k and recall@k for each k; None for abstention or no gold."""
    if abstention or not gold:
        return None
    out: dict[str, float] = {}
    for k in ks:
        out[f"recall_any@{k}"] = recall_any_at_k(ranked, gold, k) or 0.0
        out[f"recall_all@{k}"] = recall_all_at_k(ranked, gold, k) or 0.0
        out[f"recall@{k}"] = recall_at_k(ranked, gold, k) or 0.0
    return out


# ---------------------------------------------------------------- throughput and text overlap


_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> list[str]:
    """Lower case, strip punctuation and English articles, split on whitespace."""
    return _ARTICLES.sub(" ", str(text).lower().translate(_PUNCT)).split()


def f1_score(prediction: str, gold: str) -> float:
    """Token-level F1 between normalised prediction and gold."""
    pred, ref = normalize_answer(prediction), normalize_answer(gold)
    if not pred or not ref:
        return float(pred == ref)
    same = sum((Counter(pred) & Counter(ref)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


def bleu1(prediction: str, gold: str) -> float:
    """BLEU-1: clipped unigram precision times the brevity penalty, on normalised tokens."""
    pred, ref = normalize_answer(prediction), normalize_answer(gold)
    if not pred or not ref:
        return 0.0
    clipped = sum((Counter(pred) & Counter(ref)).values())
    penalty = 1.0 if len(pred) > len(ref) else math.exp(1 - len(ref) / len(pred))
    return penalty * clipped / len(pred)


# ---------------------------------------------------------------- summary over result files

Key = tuple[str, str, str, int]


def _key(row: Mapping[str, Any]) -> Key:
    return (
        str(row.get("method", "")),
        str(row.get("dataset", "")),
        str(row["question_id"]),
        int(row.get("attempt", 0)),
    )


def _judge_summary(rows: list[tuple[Mapping[str, Any], Mapping[str, Any]]]) -> dict[str, Any]:
    """Scores of one judge over (record, judgment) pairs of one method and dataset."""
    tallies: dict[str, list[int]] = {}
    info: dict[str, tuple[str, bool]] = {}
    for record, verdict in rows:
        qid = str(record["question_id"])
        tally = tallies.setdefault(qid, [0, 0])
        tally[0] += 1
        tally[1] += int(bool(verdict.get("correct")))
        info[qid] = (str(record.get("category", "")), bool(record.get("abstention", False)))
    scores = [QuestionScore(q, info[q][0], info[q][1], n, c) for q, (n, c) in tallies.items()]
    min_n = min(score.n for score in scores)
    return {
        "judged": len(rows),
        "unparsed": sum(not verdict.get("parsed", True) for _, verdict in rows),
        "errors": sum(bool(verdict.get("error")) for _, verdict in rows),
        "judge_models": sorted({str(verdict.get("judge_model", "")) for _, verdict in rows}),
        "accuracy": accuracy(scores),
        "per_category": accuracy_by_category(scores),
        "task_averaged": task_averaged_accuracy(scores),
        "abstention_accuracy": abstention_accuracy(scores),
        "pass_at_k": {str(k): mean_pass_at_k(scores, k) for k in range(1, min_n + 1)},
        "per_category_questions": dict(sorted(Counter(score.category for score in scores).items())),
        "per_category_pass_at_k": {
            str(k): {
                category: mean_pass_at_k([s for s in scores if s.category == category], k) or 0.0
                for category in sorted({score.category for score in scores})
            }
            for k in range(1, min_n + 1)
        },
    }


def _retrieval_summary(records: list[Mapping[str, Any]], ks: Sequence[int], served: bool = False
                       ) -> dict[str, dict[str, float]]:
    """Mean recall per level over non-abstention questions, from each question's first attempt, on
    each record's ranking (`ranked_ids`), or with `served` on its served evidence only."""
    first: dict[str, Mapping[str, Any]] = {}
    for record in sorted(records, key=lambda r: int(r.get("attempt", 0))):
        first.setdefault(str(record["question_id"]), record)
    out: dict[str, dict[str, float]] = {}
    for level in ("session", "turn"):
        gold_field = f"evidence_{level}s"
        per_question = [
            recall
            for record in first.values()
            if (ranked := ranked_ids(record, level, served)) is not None
            if (
                recall := retrieval_recall(
                    ranked,
                    record.get(gold_field) or [],
                    ks,
                    bool(record.get("abstention", False)),
                )
            )
            is not None
        ]
        if per_question:
            out[level] = {
                name: sum(r[name] for r in per_question) / len(per_question) for name in per_question[0]
            }
            out[level]["questions"] = len(per_question)
    return out


def summarize(
    records: Iterable[Mapping[str, Any]],
    judgments: Iterable[Mapping[str, Any]],
    builds: Iterable[Mapping[str, Any]] | None = None,
    ks: Sequence[int] = (1, 3, 5, 10),
) -> dict[str, Any]:
    """Aggregate answer records and verdicts per `method/dataset`, with one block per judge id.

    Records carry `method`, `dataset`, `question_id`, `attempt`, `category`, `abstention`, and
    optionally `answer` (gold), `response`, `retrieved_session_ids`, `retrieved_turn_ids`,
    `evidence_sessions`, `evidence_turns`. Judgments are `Verdict.to_dict()` rows, joined on
    (method, dataset, question_id, attempt); a re-judged attempt keeps its last verdict per judge.
    Builds (optional) carry `method`, `dataset`, `turns`, `build_seconds`."""
    by_key = {_key(record): record for record in records}
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for key, record in by_key.items():
        groups[key[:2]].append(record)
    verdicts: dict[tuple[str, Key], Mapping[str, Any]] = {}
    for verdict in judgments:
        if _key(verdict) in by_key:
            verdicts[(str(verdict.get("judge_id", "")), _key(verdict))] = verdict
    judged: dict[tuple[str, str], dict[str, list[Any]]] = defaultdict(lambda: defaultdict(list))
    for (judge_id, key), verdict in sorted(verdicts.items()):
        judged[key[:2]][judge_id].append((by_key[key], verdict))
    build_totals: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for build in builds or ():
        total = build_totals[(str(build.get("method", "")), str(build.get("dataset", "")))]
        total[0] += float(build["turns"])
        total[1] += float(build["build_seconds"])
    summary: dict[str, Any] = {}
    for (method, dataset), rows in sorted(groups.items()):
        answered = [r for r in rows if not r.get("abstention") and "response" in r and "answer" in r]
        block: dict[str, Any] = {
            "method": method,
            "dataset": dataset,
            "questions": len({str(r["question_id"]) for r in rows}),
            "attempts": len(rows),
            "judges": {
                jid: _judge_summary(pairs) for jid, pairs in sorted(judged[(method, dataset)].items())
            },
            "retrieval": _retrieval_summary(rows, ks),
            "retrieval_served": _retrieval_summary(rows, ks, served=True),
            "f1": mean(f1_score(str(r["response"]), str(r["answer"])) for r in answered),
            "bleu1": mean(bleu1(str(r["response"]), str(r["answer"])) for r in answered),
        }
        turns, seconds = build_totals.get((method, dataset), (0.0, 0.0))
        if seconds > 0:
            block["turns_per_second"] = write_rate([turns], [seconds])
        summary[f"{method}/{dataset}"] = block
    return summary
