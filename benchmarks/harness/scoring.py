"""Scores of one question's answers and retrieval: pure functions, no I/O.

Accuracy is pass@1 averaged over questions (c/n per question, n judged attempts). Retrieval recall
and nDCG skip abstention questions. F1 and BLEU-1 use SQuAD-style normalisation (lower case, no
punctuation, no articles) without stemming; they are side metrics only."""

from __future__ import annotations

import math
import re
import string
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import fmean

from analysis.rows import mean, pass_at_k

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


def _dcg(relevances: Sequence[float]) -> float:
    """LongMemEval's DCG: rel_1 + sum over ranks i >= 2 of rel_i / log2(i) (ranks 1 and 2 count in full)."""
    return sum(rel / max(1.0, math.log2(rank)) for rank, rel in enumerate(relevances, 1))


def ndcg_at_k(ranked: Sequence[str], gold: Iterable[str], k: int) -> float | None:
    """LongMemEval's nDCG@k (xiaowu0162/LongMemEval, `src/retrieval/eval_utils.py` `ndcg`): binary
    relevance of the first k distinct ranked ids, over the DCG of an ideal ranking, whose relevant items
    are the gold ids capped at k. LongMemEval counts the gold items present in the retrieval corpus; the
    gold ids here are the haystack's own, so all count. None without gold."""
    gold_set = set(gold)
    if not gold_set:
        return None
    actual = _dcg([float(item in gold_set) for item in dedupe(ranked)[:k]])
    return actual / _dcg([1.0] * min(len(gold_set), k))


def retrieval_recall(
    ranked: Sequence[str], gold: Sequence[str], ks: Sequence[int] = (1, 3, 5, 10), abstention: bool = False
) -> dict[str, float] | None:
    """recall_any@k, recall_all@k, recall@k and ndcg@k for each k; None for abstention or no gold."""
    if abstention or not gold:
        return None
    ranked = dedupe(ranked)[: max(ks, default=0)]  # each figure reads the first k distinct ids only
    out: dict[str, float] = {}
    for k in ks:
        out[f"recall_any@{k}"] = recall_any_at_k(ranked, gold, k) or 0.0
        out[f"recall_all@{k}"] = recall_all_at_k(ranked, gold, k) or 0.0
        out[f"recall@{k}"] = recall_at_k(ranked, gold, k) or 0.0
        out[f"ndcg@{k}"] = ndcg_at_k(ranked, gold, k) or 0.0
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
