"""Metrics on hand-computed examples."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from analysis.intervals import Bootstrap
from analysis.rows import ranked_ids, write_rate
from benchmarks.harness.metrics import (
    QuestionScore,
    abstention_accuracy,
    accuracy,
    accuracy_by_category,
    bleu1,
    dedupe,
    f1_score,
    mean_pass_at_k,
    ndcg_at_k,
    normalize_answer,
    pass_at_1,
    pass_at_k,
    question_recalls,
    question_scores,
    recall_all_at_k,
    recall_any_at_k,
    recall_at_k,
    retrieval_recall,
    summarize,
    task_averaged_accuracy,
)


def test_pass_at_k_hand_values() -> None:
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)  # 1 - 3/5
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)  # 1 - C(3,2)/C(5,2) = 1 - 3/10
    assert pass_at_k(5, 2, 4) == 1.0  # fewer than 4 wrong samples
    assert pass_at_k(8, 0, 8) == 0.0
    assert pass_at_1(4, 3) == 0.75
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)


@given(st.integers(1, 20).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_is_a_probability_growing_in_k(args: tuple[int, int, int]) -> None:
    n, c, k = args
    value = pass_at_k(n, c, k)
    assert 0.0 <= value <= 1.0
    if k > 1:
        assert value >= pass_at_k(n, c, k - 1) - 1e-12


SCORES = [
    QuestionScore("q1", "A", False, 2, 1),
    QuestionScore("q2", "A", False, 2, 2),
    QuestionScore("q3", "B", False, 2, 0),
    QuestionScore("q4", "B", True, 2, 2),
    QuestionScore("q5", "B", False, 2, 0),
]


def test_accuracies() -> None:
    assert accuracy(SCORES) == pytest.approx(2.5 / 5)
    assert accuracy_by_category(SCORES) == pytest.approx({"A": 0.75, "B": 1 / 3})
    assert task_averaged_accuracy(SCORES) == pytest.approx((0.75 + 1 / 3) / 2)
    assert abstention_accuracy(SCORES) == 1.0
    assert abstention_accuracy(SCORES[:3]) is None
    assert accuracy([]) is None
    # pass@2 per question: 1, 1, 0, 1, 0
    assert mean_pass_at_k(SCORES, 2) == pytest.approx(3 / 5)


def test_recall_dedupes_in_rank_order() -> None:
    ranked = ["s3", "s1", "s3", "s2", "s5"]
    gold = ["s2", "s1"]
    assert dedupe(ranked) == ["s3", "s1", "s2", "s5"]
    assert (
        recall_any_at_k(ranked, gold, 1),
        recall_all_at_k(ranked, gold, 1),
        recall_at_k(ranked, gold, 1),
    ) == (0.0, 0.0, 0.0)
    assert (
        recall_any_at_k(ranked, gold, 2),
        recall_all_at_k(ranked, gold, 2),
        recall_at_k(ranked, gold, 2),
    ) == (1.0, 0.0, 0.5)
    assert (recall_any_at_k(ranked, gold, 3), recall_all_at_k(ranked, gold, 3)) == (1.0, 1.0)
    assert recall_any_at_k(ranked, [], 3) is None


def test_retrieval_recall_skips_abstention() -> None:
    assert retrieval_recall(["D1:1"], ["D1:1"], ks=(1,), abstention=True) is None
    assert retrieval_recall(["D1:1"], [], ks=(1,)) is None
    out = retrieval_recall(["D1:2", "D1:1", "D3:4"], ["D1:1", "D2:2"], ks=(1, 5))
    assert out == {
        "recall_any@1": 0.0,
        "recall_all@1": 0.0,
        "recall@1": 0.0,
        "ndcg@1": 0.0,
        "recall_any@5": 1.0,
        "recall_all@5": 0.0,
        "recall@5": 0.5,
        "ndcg@5": 0.5,  # DCG 1 (rank 2 counts in full); ideal DCG 1 + 1
    }


def test_write_rate_is_a_rate_of_totals() -> None:
    assert write_rate([680], [96.9]) == pytest.approx(7.0175, rel=1e-4)
    assert write_rate([100, 300], [10.0, 90.0]) == pytest.approx(4.0)  # not the mean of 10 and 3.33
    assert write_rate([10], [0.0]) is None and write_rate([], []) is None


def test_f1_and_bleu1() -> None:
    assert normalize_answer("The cat, sat on a Mat!") == ["cat", "sat", "on", "mat"]
    assert f1_score("The cat sat on the mat.", "a cat on a mat") == pytest.approx(6 / 7)  # P 3/4, R 1
    assert f1_score("dog", "cat") == 0.0
    assert f1_score("", "") == 1.0 and f1_score("the", "cat") == 0.0
    assert bleu1("The cat sat on the mat.", "a cat on a mat") == pytest.approx(0.75)  # no brevity penalty
    assert bleu1("cat", "cat on mat") == pytest.approx(math.exp(-2))  # precision 1, BP exp(1 - 3/1)
    assert bleu1("cat cat cat", "cat mat") == pytest.approx(1 / 3)  # clipped counts
    assert bleu1("", "cat") == 0.0


def _record(qid: str, attempt: int, category: str, **extra: Any) -> dict[str, Any]:
    return {
        "method": "memforest",
        "dataset": "sample",
        "question_id": qid,
        "attempt": attempt,
        "category": category,
        **extra,
    }


def _verdict(
    qid: str, attempt: int, correct: bool, judge: str = "longmemeval", **extra: Any
) -> dict[str, Any]:
    return {
        "method": "memforest",
        "dataset": "sample",
        "question_id": qid,
        "attempt": attempt,
        "judge_id": judge,
        "judge_model": "fake",
        "correct": correct,
        "parsed": True,
        "error": None,
        **extra,
    }


def test_summarize() -> None:
    records = [
        _record(
            "q1",
            0,
            "A",
            answer="Miami",
            response="Miami",
            retrieved_session_ids=["s2", "s1"],
            evidence_sessions=["s1"],
            retrieved_turn_ids=["s2:0"],
            evidence_turns=["s1:0"],
        ),
        _record("q1", 1, "A", answer="Miami", response="Boston"),
        _record("q2", 0, "B", answer="3", response="three"),
        _record("q2", 1, "B", answer="3", response="3"),
        _record(
            "q3",
            0,
            "B",
            abstention=True,
            answer="n/a",
            response="I don't know",
            retrieved_session_ids=["s9"],
            evidence_sessions=["s9"],
        ),
        _record("q3", 1, "B", abstention=True, answer="n/a", response="I don't know"),
        {"method": "other", "dataset": "sample", "question_id": "q1", "category": "A"},
    ]
    judgments = [
        _verdict("q1", 0, True),
        _verdict("q1", 1, False),
        _verdict("q2", 0, False),
        _verdict("q2", 1, False),
        _verdict("q2", 1, True),  # re-judged: last wins
        _verdict("q3", 0, True),
        _verdict("q3", 1, True, parsed=False),
        _verdict("q1", 0, False, judge="strict"),
        _verdict("zz", 0, True),  # unknown record: ignored
    ]
    builds = [
        {"method": "memforest", "dataset": "sample", "turns": 100, "build_seconds": 40.0},
        {"method": "memforest", "dataset": "sample", "turns": 50, "build_seconds": 10.0},
    ]
    summary = summarize(records, judgments, builds, ks=(1, 2))
    assert set(summary) == {"memforest/sample", "other/sample"}
    block = summary["memforest/sample"]
    assert block["questions"] == 3 and block["attempts"] == 6
    main = block["judges"]["longmemeval"]
    assert main["judged"] == 6 and main["unparsed"] == 1 and main["judge_models"] == ["fake"]
    assert main["accuracy"] == pytest.approx((0.5 + 0.5 + 1.0) / 3)
    assert main["per_category"] == pytest.approx({"A": 0.5, "B": 0.75})
    assert main["task_averaged"] == pytest.approx(0.625)
    assert main["abstention_accuracy"] == 1.0
    assert main["pass_at_k"] == pytest.approx({"1": 2 / 3, "2": 1.0})
    strict = block["judges"]["strict"]
    assert strict["judged"] == 1 and strict["accuracy"] == 0.0 and list(strict["pass_at_k"]) == ["1"]
    # Retrieval: q1 only (q3 is an abstention); first attempt per question.
    session = block["retrieval"]["session"]
    assert {name: value for name, value in session.items() if not name.endswith("_ci95")} == {
        "recall_any@1": 0.0,
        "recall_all@1": 0.0,
        "recall@1": 0.0,
        "ndcg@1": 0.0,
        "recall_any@2": 1.0,
        "recall_all@2": 1.0,
        "recall@2": 1.0,
        "ndcg@2": 1.0,  # s1 at rank 2: LongMemEval's DCG counts ranks 1 and 2 in full
        "questions": 1,
    }
    assert session["recall_any@1_ci95"] == [0.0, 0.0] and session["ndcg@2_ci95"] == [1.0, 1.0]
    assert block["bootstrap"] == {"resamples": 2000, "seed": 0, "level": 0.95, "unit": "question"}
    assert block["retrieval"]["turn"]["recall_any@2"] == 0.0
    # F1 over non-abstention attempts: Miami/Miami 1, Boston 0, three/3 0, 3/3 1.
    assert block["f1"] == pytest.approx(0.5) and block["bleu1"] == pytest.approx(0.5)
    assert block["turns_per_second"] == pytest.approx(3.0)
    other = summary["other/sample"]
    assert other["judges"] == {} and other["retrieval"] == {} and other["f1"] is None
    assert "turns_per_second" not in other


def test_recall_is_scored_on_the_ranking_and_the_served_evidence_apart() -> None:
    served_only = _record("q1", 0, "A", retrieved_session_ids=["s2"], evidence_sessions=["s1"])
    ranked = _record("q2", 0, "A", retrieved_session_ids=["s3", "s4"], ranking_session_ids=["s3", "s4", "s1"],
                     evidence_sessions=["s1"])
    assert ranked_ids(served_only, "session") == ["s2"]
    assert ranked_ids(ranked, "session") == ["s3", "s4", "s1"]
    assert ranked_ids(ranked, "session", served=True) == ["s3", "s4"] and ranked_ids(ranked, "turn") is None
    block = summarize([served_only, ranked], [], ks=(2, 3))["memforest/sample"]
    # the ranking: q2 finds s1 at its third distinct session; the served evidence never does
    assert block["retrieval"]["session"]["recall_any@2"] == 0.0
    assert block["retrieval"]["session"]["recall_any@3"] == 0.5
    assert block["retrieval_served"]["session"]["recall_any@3"] == 0.0
    assert block["retrieval"]["session"]["questions"] == 2
    assert block["retrieval_served"]["session"]["questions"] == 2


def test_ndcg_by_hand() -> None:
    ranked = ["s3", "s1", "s3", "s2", "s5"]  # distinct: s3, s1, s2, s5
    gold = ["s2", "s1"]
    # LongMemEval's DCG: rel_1 + sum_{i >= 2} rel_i / log2(i); the ideal ranks min(|gold|, k) gold ids first.
    assert ndcg_at_k(ranked, gold, 1) == 0.0  # s3 is no gold; ideal DCG 1
    assert ndcg_at_k(ranked, gold, 2) == pytest.approx(1 / 2)  # s1 at rank 2: 1 / (1 + 1)
    assert ndcg_at_k(ranked, gold, 3) == pytest.approx((1 + 1 / math.log2(3)) / 2)  # 0.8155
    assert ndcg_at_k(ranked, gold, 10) == pytest.approx((1 + 1 / math.log2(3)) / 2)
    assert ndcg_at_k(["s1", "s2"], gold, 2) == 1.0
    assert ndcg_at_k(["s9", "s8", "s1"], ["s1"], 3) == pytest.approx(1 / math.log2(3))
    assert ndcg_at_k(ranked, [], 3) is None


Rows = list[dict[str, Any]]


def _locomo_like(questions: int = 200, conversations: int = 10) -> tuple[Rows, Rows]:
    """Two attempts per question; a question's category is one of four; retrieval gold on session ids."""
    rng = np.random.default_rng(5)
    records, verdicts = [], []
    for i in range(questions):
        qid, conversation = f"q{i:03d}", f"conv{i % conversations}"
        for attempt in range(2):
            ranked = [f"s{j}" for j in rng.permutation(6)]
            records.append(_record(qid, attempt, "ABCD"[i % 4], instance_id=conversation,
                                   abstention=i % 10 == 0, retrieved_session_ids=ranked,
                                   evidence_sessions=["s0", "s1"]))
            verdicts.append(_verdict(qid, attempt, bool(rng.random() < 0.6 + 0.03 * (i % conversations))))
    return records, verdicts


def _contains(interval: list[float], value: float) -> bool:
    return interval[0] <= value <= interval[1]


def test_every_summary_figure_carries_an_interval_around_it() -> None:
    records, verdicts = _locomo_like()
    block = summarize(records, verdicts, ks=(1, 5))["memforest/sample"]
    judge = block["judges"]["longmemeval"]
    for name in ("accuracy", "task_averaged", "abstention_accuracy"):
        low, high = judge[f"{name}_ci95"]
        assert low < judge[name] < high and high - low < 0.3
    assert set(judge["per_category_ci95"]) == set(judge["per_category"]) == set("ABCD")
    for category, value in judge["per_category"].items():
        assert _contains(judge["per_category_ci95"][category], value)
    assert set(judge["pass_at_k_ci95"]) == set(judge["pass_at_k"]) == {"1", "2"}
    for k, value in judge["pass_at_k"].items():
        assert _contains(judge["pass_at_k_ci95"][k], value)
    assert judge["pass_at_k_ci95"]["1"] == judge["accuracy_ci95"]
    for retrieval in (block["retrieval"], block["retrieval_served"]):
        figures = retrieval["session"]
        names = [name for name in figures if name != "questions" and not name.endswith("_ci95")]
        metrics = ("recall_any", "recall_all", "recall", "ndcg")
        assert set(names) == {f"{metric}@{k}" for metric in metrics for k in (1, 5)}
        for name in names:
            assert _contains(figures[f"{name}_ci95"], figures[name])
            assert all(isinstance(bound, float) for bound in figures[f"{name}_ci95"])
    assert block["bootstrap"]["unit"] == "question"


def test_a_conversation_bootstrap_resamples_instances() -> None:
    records, verdicts = _locomo_like()
    by_question = summarize(records, verdicts)["memforest/sample"]["judges"]["longmemeval"]
    clustered = summarize(records, verdicts, bootstrap=Bootstrap(unit="conversation"))["memforest/sample"]
    judge = clustered["judges"]["longmemeval"]
    assert clustered["bootstrap"]["unit"] == "conversation"
    assert judge["accuracy"] == by_question["accuracy"]
    assert judge["accuracy_ci95"] != by_question["accuracy_ci95"]
    assert _contains(judge["accuracy_ci95"], judge["accuracy"])


def test_no_abstention_questions_give_no_abstention_interval() -> None:
    records = [_record("q1", 0, "A"), _record("q2", 0, "B")]
    judge = summarize(records, [_verdict("q1", 0, True), _verdict("q2", 0, False)])["memforest/sample"]
    figures = judge["judges"]["longmemeval"]
    assert figures["abstention_accuracy"] is None and figures["abstention_accuracy_ci95"] is None
    assert figures["accuracy_ci95"] == [0.0, 1.0]
    assert figures["per_category_ci95"] == {"A": [1.0, 1.0], "B": [0.0, 0.0]}


def test_question_scores_and_recalls_are_what_the_summary_averages() -> None:
    records, verdicts = _locomo_like()
    scores = question_scores(records, verdicts, "longmemeval")
    assert len(scores) == 200 and set(scores.values()) <= {0.0, 0.5, 1.0}
    block = summarize(records, verdicts, ks=(1, 5))["memforest/sample"]
    assert np.mean(list(scores.values())) == pytest.approx(block["judges"]["longmemeval"]["accuracy"])
    assert question_scores(records, verdicts, "strict") == {}
    recalls = question_recalls(records, "session", "recall_any@5")
    assert len(recalls) == block["retrieval"]["session"]["questions"] == 180  # no abstention questions
    assert np.mean(list(recalls.values())) == pytest.approx(block["retrieval"]["session"]["recall_any@5"])
    ndcg = question_recalls(records, "session", "ndcg@5", served=True)
    assert np.mean(list(ndcg.values())) == pytest.approx(block["retrieval_served"]["session"]["ndcg@5"])
    assert question_recalls(records, "turn", "recall_any@5") == {}
    with pytest.raises(ValueError, match="metric"):
        question_recalls(records, "session", "precision@5")
    with pytest.raises(ValueError, match="one method"):
        question_scores([*records, {**records[0], "method": "other"}], verdicts, "longmemeval")


def test_question_scores_by_hand() -> None:
    records = [_record("q1", 0, "A"), _record("q1", 1, "A"), _record("q2", 0, "B")]
    verdicts = [_verdict("q1", 0, True), _verdict("q1", 1, False), _verdict("q2", 0, False),
                _verdict("q2", 0, True), _verdict("q1", 0, False, judge="strict")]
    assert question_scores(records, verdicts, "longmemeval") == {"q1": 0.5, "q2": 1.0}  # last verdict wins
    assert question_scores(records, verdicts, "strict") == {"q1": 0.0}


def _one(qid: str) -> dict[str, Any]:
    return {"method": "m", "dataset": "d", "question_id": qid, "attempt": 0, "category": "c",
            "abstention": False}


def _vote(qid: str, correct: bool, repeat: int = 0, judge: str = "j (x)") -> dict[str, Any]:
    return {"method": "m", "dataset": "d", "question_id": qid, "attempt": 0, "judge_id": judge,
            "correct": correct, "repeat": repeat}


def test_a_repeated_judge_counts_the_majority_and_reports_agreement() -> None:
    records = [_one("a"), _one("b"), _one("c")]
    verdicts = [
        _vote("a", True, 0), _vote("a", True, 1), _vote("a", False, 2),  # 2 of 3: correct
        _vote("b", True, 0), _vote("b", False, 1), _vote("b", False, 2),  # 1 of 3: wrong
        _vote("c", True, 0), _vote("c", True, 1), _vote("c", True, 2),  # all agree
    ]
    judge = summarize(records, verdicts)["m/d"]["judges"]["j (x)"]
    assert judge["accuracy"] == pytest.approx(2 / 3)
    repeats = judge["repeats"]
    assert repeats["repeats"] == 3 and repeats["agreement"] == pytest.approx(1 / 3)
    assert repeats["accuracy_min"] == pytest.approx(1 / 3) and repeats["accuracy_max"] == pytest.approx(1.0)
    assert question_scores(records, verdicts, "j (x)") == {"a": 1.0, "b": 0.0, "c": 1.0}
    tie = [_vote("a", True, 0), _vote("a", False, 1)]
    assert summarize([_one("a")], tie)["m/d"]["judges"]["j (x)"]["accuracy"] == 0.0  # a tie: incorrect
    once = summarize(records, [_vote(q, True) for q in "abc"])["m/d"]["judges"]["j (x)"]
    assert "repeats" not in once


def test_errata_give_the_official_gold_score_beside_the_corrected_one() -> None:
    records = [_one("a"), _one("b")]
    verdicts = [_vote("a", True), _vote("b", True),  # the run's judge, gold as the erratum says
                _vote("b", False, judge="j@official_gold (x)")]  # b's official gold: wrong
    judges = summarize(records, verdicts)["m/d"]["judges"]
    assert set(judges) == {"j (x)", "j (x), official gold"}
    assert judges["j (x)"]["accuracy"] == 1.0 and judges["j (x), official gold"]["accuracy"] == 0.5
