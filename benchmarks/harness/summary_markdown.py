"""The markdown of one run's summary (`summary.RunSummary`): one table of its figures, each with its 95%
interval where the summary has one, its accuracy by category, and its failures."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from analysis.intervals import Interval, format_interval
from analysis.records import pick
from benchmarks.harness.figures import BuildFigures, Failure, QueryFigures, failed_instances
from benchmarks.harness.input_kept import input_cell, input_line
from benchmarks.harness.summary import (
    LOADER_COUNTS,
    QUESTIONS,
    Bounds,
    JudgeBlock,
    JudgeRepeats,
    Retrieval,
    RunSummary,
)


def pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def pct_ci(value: float | None, bounds: Bounds) -> str:
    """`81.2% [79.1, 83.2]`, or the figure alone where the summary has no interval (older summaries)."""
    if value is None or not bounds:
        return pct(value)
    return format_interval(Interval(float(value), float(bounds[0]), float(bounds[1]), 0))


def num(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def markdown_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _accuracy_rows(judges: Mapping[str, JudgeBlock]) -> list[list[str]]:
    rows = []
    for label, j in judges.items():
        k = j.top_k()
        rows.append([f"accuracy pass@1 [{label}]", pct_ci(j.accuracy, j.accuracy_ci95)])
        if k > 1:
            rows.append([f"accuracy pass@{k} [{label}]",
                         pct_ci(j.pass_at_k.get(str(k)), j.pass_at_k_ci95.get(str(k)))])
        rows.append([f"task-averaged / abstention [{label}]",
                     f"{pct_ci(j.task_averaged, j.task_averaged_ci95)} / "
                     f"{pct_ci(j.abstention_accuracy, j.abstention_accuracy_ci95)}"])
        if j.answered_questions is not None:
            rows.append([f"accuracy pass@1 over answered questions ({j.answered_questions}) [{label}]",
                         pct_ci(j.accuracy_answered, j.accuracy_answered_ci95)])
        if j.repeats:
            r = pick(JudgeRepeats, j.repeats)
            rows.append([f"judge repeats: agreement / accuracy range over {r.repeats} [{label}]",
                         f"{pct(r.agreement)} / {pct(r.accuracy_min)} – {pct(r.accuracy_max)} "
                         f"(majority {pct(r.majority_accuracy)})"])
        if j.unparsed or j.errors:
            rows.append([f"unparsed / failed verdicts [{label}]", f"{j.unparsed} / {j.errors}"])
    return rows


RECALL_KS = (1, 5, 10)


def _recall_rows(retrieval: Retrieval, dataset: str) -> list[list[str]]:
    """LongMemEval's retrieval metrics per level (recall_any@k, recall_all@k, ndcg@k), each with its
    interval, where the summary has them; on LoCoMo the turn level's recall@k is its evidence recall."""
    rows = []
    session, turn = retrieval.level("session"), retrieval.level("turn")
    lme = ("recall_any", "recall_all", "ndcg")
    names = {"session": lme, "turn": ("recall", "recall_all", "ndcg") if dataset == "locomo" else lme}
    for level_name, level in (("session", session), ("turn", turn)):
        for name in names[level_name] if level else ():
            for k in RECALL_KS:
                metric = f"{name}@{k}"
                if level.value(metric) is None:
                    continue
                label = (f"evidence recall@{k} (dia ids)" if level_name == "turn" and name == "recall"
                         else f"{level_name} {metric}")
                rows.append([label, pct_ci(level.value(metric), level.bounds(metric))])
    if session or turn:
        rows.append(["questions with retrieval gold", str((session or turn).questions)])
    return rows


def _served_recall_rows(ranking: Retrieval, served: Retrieval) -> list[list[str]]:
    """The served evidence's own recall, where the ranking scored above went on past it."""
    if not (served.session or served.turn) or served == ranking:
        return []
    session, turn = served.level("session"), served.level("turn")
    rows = []
    if session:
        rows.append(["session recall_any@1 / @5 / @10, served evidence only",
                     " / ".join(pct(session.value(f"recall_any@{k}")) for k in (1, 5, 10))])
    if turn:
        rows.append(["turn recall_any@10 / recall_all@10, served evidence only",
                     " / ".join(pct(turn.value(f"recall_{m}@10")) for m in ("any", "all"))])
    return rows


def _stage_latency_rows(query: QueryFigures) -> list[list[str]]:
    """Mean, p50 and p95 of the harness's stages (retrieve, answer) where the records have them."""
    return [[f"{stage} latency mean / p50 / p95, s",
             " / ".join(num(figures.get(stage), 3)
                        for figures in (query.latency_mean, query.latency_p50, query.latency_p95))]
            for stage in ("retrieve", "answer") if stage in query.stages]


def _cost_rows(build: BuildFigures, query: QueryFigures) -> list[list[str]]:
    stages = ", ".join(f"{s} {num(v, 3)}" for s, v in query.latency_mean.items()
                       if s not in ("retrieve", "total"))
    return [
        ["instances built (failed)", f"{build.instances} ({build.failed})"],
        ["build seconds / instance", num(build.build_seconds_mean)],
        ["source turns / second", num(build.turns_per_second)],
        ["write LLM calls / instance", num(build.llm_calls_mean, 1)],
        *([["write embedding requests / instance (proxied)", num(build.embedding_calls_mean, 1)]]
          if build.embedding_calls_mean else []),
        ["write tokens / instance: prompt / cached / completion",
         " / ".join(num(v, 0) for v in build.tokens_mean())],
        ["write waves / instance (critical path s)",
         f"{num(build.waves_mean, 1)} ({num(build.critical_path_seconds_mean)})"],
        *([["write waves from call timestamps / instance (critical path s)",
            f"{num(build.derived_waves_mean, 1)} ({num(build.derived_critical_path_seconds_mean)})"]]
          if build.derived_waves_mean is not None else []),
        ["degraded summaries / failed cells (all instances)",
         f"{build.degraded_total} / {build.failed_cells_total}"],
        ["query latency mean, s", num(query.query_seconds_mean, 3)],
        ["query latency per stage, s", stages or "–"],
        *_stage_latency_rows(query),
        ["query LLM calls / question (retrieval and answers)", num(query.llm_calls_per_question, 1)],
        ["query tokens / question: prompt / cached / completion",
         " / ".join(num(v, 0) for v in query.tokens_per_question())],
        ["evidence tokens / question (context handed to the answer model)",
         num(query.evidence_tokens_mean, 0)],
        *([["questions with evidence cut to the token budget", str(query.evidence_cut)]]
          if query.evidence_cut else []),
        *([["questions with evidence cut to the prompt's window (oldest first)", str(query.prompt_cut)]]
          if query.prompt_cut else []),
        ["failed records", str(query.errors)],
        ["questions failed / timed out / prompt-cut / declined",
         f"{query.failed} / {query.timed_out} / {query.prompt_cut} / {query.declined}"],
    ]


FAILURE_NOTE = ("Failed: a question with an attempt that recorded an error; timed out: one whose error says "
                "it timed out; prompt-cut: its evidence was cut to the answer prompt's window; declined: an "
                "answer says it does not know (`QuestionRecord.declined`). Accuracy over answered questions "
                "leaves the failed ones out. Intervals: 95% percentile bootstrap")


def _category_table(judges: Mapping[str, JudgeBlock]) -> list[str]:
    lines: list[str] = []
    for label, j in judges.items():
        if not j.per_category:
            continue
        k = max(int(n) for n in j.per_category_pass_at_k)
        head = ["category", "questions", "pass@1"] + ([f"pass@{k}"] if k > 1 else [])
        rows = [
            [c, str(j.per_category_questions[c]), pct_ci(v, j.per_category_ci95.get(c))]
            + ([pct(j.per_category_pass_at_k[str(k)][c])] if k > 1 else [])
            for c, v in j.per_category.items()
        ]
        lines += ["", f"Accuracy by category, judge {label}:", "", *markdown_table(head, rows)]
    return lines


def markdown(summary: RunSummary) -> str:
    lab = summary.labels
    title = f"## {lab.method} on {lab.dataset} (backbone {lab.backbone}, seed {lab.seed})"
    if lab.budget != "native":
        title += f" at budget {lab.budget}"
    if lab.simulated:
        title += " [simulated: latency-model server, not a real GPU run]"
    rows = [[QUESTIONS, str(summary.questions)], ["input kept (turns)", input_cell(summary.build.input)]]
    rows += _accuracy_rows(summary.judges)
    rows += _recall_rows(summary.retrieval, lab.dataset)
    rows += _served_recall_rows(summary.retrieval, summary.retrieval_served)
    rows += _cost_rows(summary.build, summary.query)
    if summary.token_counter:
        rows.append(["evidence tokens counted by", summary.token_counter.replace("|", "/")])
    rows += [[label, str(summary.loader[key])] for key, label in LOADER_COUNTS.items()
             if summary.loader.get(key)]
    not_loaded = [f for f in summary.failures if f.stage == "load"]
    if not_loaded:
        rows.append(["source entries not loaded", str(failed_instances(not_loaded))])
    boot = summary.bootstrap
    note = f"{FAILURE_NOTE} over {boot.unit}s ({boot.resamples} resamples, seed {boot.seed})."
    lines = [title, "", *markdown_table(["metric", "value"], rows), "", note,
             *_category_table(summary.judges)]
    lost = input_line(summary.build.input)
    lines += ["", lost] if lost else []
    lines += _failure_lines(summary.failures)
    return "\n".join(lines) + "\n"


def _failure_lines(failed: Sequence[Failure]) -> list[str]:
    """All failures, one line each: `- <instance>: <stage>: <reason>`."""
    if not failed:
        return []
    lines = ["", f"Failed instances: {failed_instances(failed)}", ""]
    lines += [f"- {f.instance_id}: {f.stage}: {' '.join(str(f.reason).split())[:300]}" for f in failed]
    return lines
