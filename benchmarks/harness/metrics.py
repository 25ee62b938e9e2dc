"""The summary of answer records and judge verdicts per method and dataset: pure functions, no I/O.

The scores of one question come from `scoring` (re-exported here). Every accuracy and retrieval
figure of the summary carries its 95% interval (`<figure>_ci95: [low, high]`), a percentile bootstrap
over questions (`analysis.intervals`), or over conversations with `Bootstrap(unit="conversation")`.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

from analysis.intervals import (
    Bootstrap,
    Interval,
    bootstrap_group_average,
    bootstrap_mean,
    bootstrap_mean_columns,
)
from analysis.rows import mean, pass_at_k, ranked_ids, write_rate
from benchmarks.harness.scoring import (
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
    recall_all_at_k,
    recall_any_at_k,
    recall_at_k,
    retrieval_recall,
    task_averaged_accuracy,
)
from benchmarks.judging.judges import OFFICIAL_GOLD_SUFFIX
from benchmarks.judging.repeats import majority_correct, repeat_summary

__all__ = ["dedupe", "ndcg_at_k", "normalize_answer", "pass_at_1", "pass_at_k",  # re-exported
           "recall_all_at_k", "recall_any_at_k", "recall_at_k"]

# ---------------------------------------------------------------- summary over result files

Key = tuple[str, str, str, int]


def _key(row: Mapping[str, Any]) -> Key:
    return (
        str(row.get("method", "")),
        str(row.get("dataset", "")),
        str(row["question_id"]),
        int(row.get("attempt", 0)),
    )


def _ci(interval: Interval | None) -> list[float] | None:
    """An interval as the summary's JSON-ready `[low, high]`."""
    return None if interval is None else [interval.low, interval.high]


def _question_scores(rows: Iterable[tuple[Mapping[str, Any], Mapping[str, Any]]]) -> list[QuestionScore]:
    """The judged attempts of each question, from (record, verdict) pairs."""
    tallies: dict[str, list[int]] = {}
    info: dict[str, tuple[str, bool]] = {}
    for record, verdict in rows:
        qid = str(record["question_id"])
        tally = tallies.setdefault(qid, [0, 0])
        tally[0] += 1
        tally[1] += int(bool(verdict.get("correct")))
        info[qid] = (str(record.get("category", "")), bool(record.get("abstention", False)))
    return [QuestionScore(q, info[q][0], info[q][1], n, c) for q, (n, c) in tallies.items()]


def _judge_intervals(
    scores: Sequence[QuestionScore], ks: Sequence[int], bootstrap: Bootstrap, clusters: Mapping[str, str]
) -> dict[str, Any]:
    """The 95% intervals of one judge's figures, each from the per-question values it averages."""
    by_question = {
        s.question_id: {str(k): pass_at_k(s.n, s.c, k) for k in ks} for s in scores
    }
    pass_k = bootstrap_mean_columns(by_question, bootstrap, clusters)
    pass1 = {s.question_id: s.pass1 for s in scores}
    categories = {s.question_id: s.category for s in scores}
    per_category = {
        category: _ci(bootstrap_mean({q: v for q, v in pass1.items() if categories[q] == category},
                                     bootstrap, clusters))
        for category in sorted(set(categories.values()))
    }
    abstention = {s.question_id: s.pass1 for s in scores if s.abstention}
    return {
        "accuracy_ci95": _ci(pass_k.get("1")),
        "task_averaged_ci95": _ci(bootstrap_group_average(pass1, categories, bootstrap, clusters)),
        "abstention_accuracy_ci95": _ci(bootstrap_mean(abstention, bootstrap, clusters)),
        "per_category_ci95": per_category,
        "pass_at_k_ci95": {k: _ci(interval) for k, interval in pass_k.items()},
    }


def _judge_summary(
    rows: list[tuple[Mapping[str, Any], Mapping[str, Any]]],
    bootstrap: Bootstrap,
    clusters: Mapping[str, str] | None,
) -> dict[str, Any]:
    """Scores of one judge over (record, judgment) pairs of one method and dataset."""
    scores = _question_scores(rows)
    min_n = min(score.n for score in scores)
    ks = range(1, min_n + 1)
    return {
        "judged": len(rows),
        "unparsed": sum(not verdict.get("parsed", True) for _, verdict in rows),
        "errors": sum(bool(verdict.get("error")) for _, verdict in rows),
        "judge_models": sorted({str(verdict.get("judge_model", "")) for _, verdict in rows}),
        "accuracy": accuracy(scores),
        "per_category": accuracy_by_category(scores),
        "task_averaged": task_averaged_accuracy(scores),
        "abstention_accuracy": abstention_accuracy(scores),
        "pass_at_k": {str(k): mean_pass_at_k(scores, k) for k in ks},
        "per_category_questions": dict(sorted(Counter(score.category for score in scores).items())),
        "per_category_pass_at_k": {
            str(k): {
                category: mean_pass_at_k([s for s in scores if s.category == category], k) or 0.0
                for category in sorted({score.category for score in scores})
            }
            for k in ks
        },
        **_judge_intervals(scores, ks, bootstrap, clusters or {}),
    }


def _first_attempts(records: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    first: dict[str, Mapping[str, Any]] = {}
    for record in sorted(records, key=lambda r: int(r.get("attempt", 0))):
        first.setdefault(str(record["question_id"]), record)
    return first


def _question_retrieval(
    records: Iterable[Mapping[str, Any]], level: str, ks: Sequence[int], served: bool = False
) -> dict[str, dict[str, float]]:
    """Per question, its recall and nDCG figures at `level` (session | turn) from its first attempt, on
    its ranking (`ranked_ids`), or with `served` on its served evidence only; abstention questions,
    questions without gold and records without ids of the level are left out."""
    out: dict[str, dict[str, float]] = {}
    for qid, record in _first_attempts(records).items():
        ranked = ranked_ids(record, level, served)
        if ranked is None:
            continue
        gold = record.get(f"evidence_{level}s") or []
        figures = retrieval_recall(ranked, gold, ks, bool(record.get("abstention", False)))
        if figures is not None:
            out[qid] = figures
    return out


def _retrieval_summary(
    records: list[Mapping[str, Any]],
    ks: Sequence[int],
    served: bool,
    bootstrap: Bootstrap,
    clusters: Mapping[str, str] | None,
) -> dict[str, dict[str, Any]]:
    """Mean recall and nDCG per level over non-abstention questions with gold, each with its 95%
    interval, from each question's first attempt (`_question_retrieval`)."""
    out: dict[str, dict[str, Any]] = {}
    for level in ("session", "turn"):
        per_question = _question_retrieval(records, level, ks, served)
        if not per_question:
            continue
        intervals = bootstrap_mean_columns(per_question, bootstrap, clusters or {})
        block: dict[str, Any] = {name: interval.value for name, interval in intervals.items()}
        block["questions"] = len(per_question)
        block.update({f"{name}_ci95": _ci(interval) for name, interval in intervals.items()})
        out[level] = block
    return out


def _one_group(records: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The records, checked to be of one method and dataset (question ids are unique within one only)."""
    rows = list(records)
    groups = {_key(record)[:2] for record in rows}
    if len(groups) > 1:
        raise ValueError(f"records of one method and dataset expected, got {sorted(groups)}")
    return rows




def settled_verdicts(judgments: Iterable[Mapping[str, Any]], keys: Iterable[Key] | None = None
                     ) -> dict[tuple[str, Key], Mapping[str, Any]]:
    """One verdict per (judge id, answer): the last verdict of each repeat (a re-judged attempt keeps its
    last), then over a judge's repeats (`judge.repeats`) the majority (`correct` when more than half of
    the repeats say so; a tie counts as incorrect), carrying `repeats` and `votes`. `keys` (optional)
    keeps the answers of those records only."""
    wanted = set(keys) if keys is not None else None
    latest: dict[tuple[str, Key], dict[int, Mapping[str, Any]]] = defaultdict(dict)
    for verdict in judgments:
        key = _key(verdict)
        if wanted is None or key in wanted:
            latest[(str(verdict.get("judge_id", "")), key)][int(verdict.get("repeat") or 0)] = verdict
    out: dict[tuple[str, Key], Mapping[str, Any]] = {}
    for answer, by_repeat in latest.items():
        last = by_repeat[max(by_repeat)]
        if len(by_repeat) == 1:
            out[answer] = last
            continue
        votes = sum(bool(v.get("correct")) for v in by_repeat.values())
        out[answer] = {**last, "correct": majority_correct(votes, len(by_repeat)), "repeats": len(by_repeat),
                       "votes": votes}
    return out


def _with_official_gold(verdicts: dict[tuple[str, Key], Mapping[str, Any]]
                        ) -> dict[tuple[str, Key], Mapping[str, Any]]:
    """With dataset errata on, the questions an erratum changed are judged against the official gold too
    (judge id `<id>@official_gold ...`): those verdicts become a judge of their own, `<label>, official
    gold`, that is the run's judge with them swapped in, so that both scores stand side by side."""
    companions = {jid for jid, _ in verdicts if OFFICIAL_GOLD_SUFFIX in jid}
    if not companions:
        return verdicts
    out = {answer: v for answer, v in verdicts.items() if answer[0] not in companions}
    for companion in companions:
        base = companion.replace(OFFICIAL_GOLD_SUFFIX, "")
        official = f"{base}, official gold"
        for (jid, key), verdict in verdicts.items():
            if jid == base:
                out.setdefault((official, key), verdict)
        for (jid, key), verdict in verdicts.items():
            if jid == companion:
                out[(official, key)] = verdict
    return out


def question_scores(
    records: Iterable[Mapping[str, Any]], judgments: Iterable[Mapping[str, Any]], judge_id: str
) -> dict[str, float]:
    """Per question id, its pass@1 under `judge_id`: the fraction of its judged attempts judged correct.

    Records are of one method and dataset; verdicts join them on (method, dataset, question_id,
    attempt), a re-judged attempt keeping its last verdict, as in `summarize`."""
    by_key = {_key(record): record for record in _one_group(records)}
    settled = _with_official_gold(settled_verdicts(judgments, by_key))
    verdicts = {key: v for (jid, key), v in settled.items() if jid == judge_id}
    scores = _question_scores((by_key[key], verdict) for key, verdict in sorted(verdicts.items()))
    return {score.question_id: score.pass1 for score in scores}


def question_recalls(
    records: Iterable[Mapping[str, Any]], level: str, metric: str, served: bool = False
) -> dict[str, float]:
    """Per question id, one retrieval figure (`recall_any@5`, `recall_all@10`, `recall@5`, `ndcg@10`)
    at `level` (session | turn), from its first attempt, for the non-abstention questions with gold, as
    the summary averages them; with `served`, on the served evidence only."""
    name, _, k = metric.partition("@")
    if name not in ("recall_any", "recall_all", "recall", "ndcg") or not k.isdigit() or int(k) < 1:
        raise ValueError(f"unknown retrieval metric {metric!r}: expected e.g. recall_any@5 or ndcg@10")
    if level not in ("session", "turn"):
        raise ValueError(f"level is session or turn, got {level!r}")
    per_question = _question_retrieval(_one_group(records), level, (int(k),), served)
    return {qid: figures[metric] for qid, figures in per_question.items()}


def _repeat_figures(judgments: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Per (method, dataset, judge id) asked more than once per answer: the repeats' agreement rate and
    accuracy range (`benchmarks.judging.repeats.repeat_summary`, without its per-answer list)."""
    groups: dict[tuple[str, str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for verdict in judgments:
        key = _key(verdict)
        groups[(key[0], key[1], str(verdict.get("judge_id", "")))].append(verdict)
    out = {}
    for group, verdicts in groups.items():
        if any(int(v.get("repeat") or 0) > 0 for v in verdicts):
            figures = repeat_summary(verdicts)
            out[group] = {k: figures[k] for k in ("repeats", "agreement", "accuracy_min", "accuracy_max",
                                                  "majority_accuracy", "accuracy_per_repeat")}
    return out


def summarize(
    records: Iterable[Mapping[str, Any]],
    judgments: Iterable[Mapping[str, Any]],
    builds: Iterable[Mapping[str, Any]] | None = None,
    ks: Sequence[int] = (1, 3, 5, 10),
    bootstrap: Bootstrap | None = None,
) -> dict[str, Any]:
    """Aggregate answer records and verdicts per `method/dataset`, with one block per judge id.

    Records carry `method`, `dataset`, `question_id`, `attempt`, `category`, `abstention`, and
    optionally `answer` (gold), `response`, `retrieved_session_ids`, `retrieved_turn_ids`,
    `evidence_sessions`, `evidence_turns`. Judgments are `Verdict.to_dict()` rows, joined on
    (method, dataset, question_id, attempt); a re-judged attempt keeps its last verdict per judge, and a
    judge asked several times (`repeat`) counts the majority of its repeats, its block then reporting
    the agreement and the accuracy range over the repeats (`repeats`). Verdicts against the official
    gold of questions an erratum changed make a judge block of their own (`settled_verdicts`,
    `_with_official_gold`). Builds (optional) carry `method`, `dataset`, `turns`, `build_seconds`.

    Each accuracy and retrieval figure gets its 95% interval under `bootstrap` (default `Bootstrap()`,
    recorded in each block); with `unit="conversation"` the questions of one record `instance_id` are
    resampled together."""
    bootstrap = bootstrap or Bootstrap()
    by_key = {_key(record): record for record in records}
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for key, record in by_key.items():
        groups[key[:2]].append(record)
    judgments = [v for v in judgments if _key(v) in by_key]
    verdicts = _with_official_gold(settled_verdicts(judgments))
    repeated = _repeat_figures(judgments)
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
        clusters = _clusters(rows, bootstrap)
        block: dict[str, Any] = {
            "method": method,
            "dataset": dataset,
            "questions": len({str(r["question_id"]) for r in rows}),
            "attempts": len(rows),
            "judges": {
                jid: {**_judge_summary(pairs, bootstrap, clusters),
                      **({"repeats": repeated[(method, dataset, jid)]}
                         if (method, dataset, jid) in repeated else {})}
                for jid, pairs in sorted(judged[(method, dataset)].items())
            },
            "retrieval": _retrieval_summary(rows, ks, False, bootstrap, clusters),
            "retrieval_served": _retrieval_summary(rows, ks, True, bootstrap, clusters),
            "f1": mean(f1_score(str(r["response"]), str(r["answer"])) for r in answered),
            "bleu1": mean(bleu1(str(r["response"]), str(r["answer"])) for r in answered),
        }
        turns, seconds = build_totals.get((method, dataset), (0.0, 0.0))
        if seconds > 0:
            block["turns_per_second"] = write_rate([turns], [seconds])
        block["bootstrap"] = asdict(bootstrap)
        summary[f"{method}/{dataset}"] = block
    return summary


def _clusters(records: Iterable[Mapping[str, Any]], bootstrap: Bootstrap) -> dict[str, str] | None:
    """Question id -> its record's `instance_id` (the conversation) for a conversation bootstrap; a
    question without one is resampled on its own."""
    if bootstrap.unit != "conversation":
        return None
    return {str(r["question_id"]): str(r["instance_id"]) for r in records if r.get("instance_id") is not None}
