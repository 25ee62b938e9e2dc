"""The summary of one run directory and its markdown table (`summarize_run`, `write_summary`), and
the side-by-side table of several run directories (a sweep), with each figure's 95% interval, paired
differences to a reference system and the published figure of the same system and dataset.

The run's records, builds and verdicts are typed (`analysis.records`); its run.json is read through
`stored_run`; the figures are computed by `summary.run_summary` and written as markdown by
`summary_markdown`. The names of those modules that callers take from here are re-exported."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analysis.intervals import format_interval, paired_difference
from analysis.records import pick
from benchmarks.harness.figures import TOKENS, build_figures, failed_instances, failures, query_figures
from benchmarks.harness.input_kept import input_cell
from benchmarks.harness.published import published_for
from benchmarks.harness.results import RunFiles
from benchmarks.harness.stored_run import RunLabels, StoredRun
from benchmarks.harness.summary import JudgeBlock, Retrieval, RunSummary, recall_metric, run_summary
from benchmarks.harness.summary_markdown import markdown, markdown_table, num, pct_ci

__all__ = ["TOKENS", "build_figures", "failed_instances", "failures", "query_figures",  # re-exported
           "JudgeBlock", "Retrieval", "RunSummary", "StoredRun", "pct_ci", "run_summary"]
REFERENCE_METHOD = "memforest_embed"  # the comparison's reference system when the sweep has it


# ---------------------------------------------------------------- one run


def summarize_run(files: RunFiles, labels: RunLabels) -> dict[str, Any]:
    """The run's summary as a plain dict (the metrics' block, the build, query and failure figures, and
    its markdown)."""
    summary = run_summary(files, labels)
    return {**summary.to_dict(), "markdown": markdown(summary)}


def write_summary(files: RunFiles, labels: RunLabels) -> dict[str, Any]:
    summary = summarize_run(files, labels)
    files.summary_path.write_text(summary["markdown"], encoding="utf-8")
    return summary


# ---------------------------------------------------------------- several runs side by side

COMPARISON_HEAD = ("method", "backbone", "seed", "questions", "input kept", "accuracy",
                   "accuracy (answered)", "Δ accuracy", "published", "recall@5", "Δ recall@5", "recall@10",
                   "failed", "timed out", "prompt-cut", "declined",
                   "build s / inst", "write LLM calls / inst",
                   "write tokens / inst (prompt / cached / completion)", "query s", "query LLM calls / q",
                   "evidence tokens / q", "budget")


@dataclass(frozen=True)
class ComparedRun:
    """One run directory of a comparison: its labels, and its summary unless it was skipped."""

    labels: RunLabels
    summary: RunSummary | None
    skipped: str | None = None
    judge_id: str | None = None  # the run's judge config id (for the published figure)


def compared_run(run_dir: str | Path) -> ComparedRun:
    files = RunFiles(run_dir, create=False)
    run = StoredRun.of(files)
    labels = RunLabels.stored(run.config)
    judge = pick(_JudgeNode, run.stored_config.judge or {}).judge_id
    if files.skipped_path.exists():
        return ComparedRun(labels, None, files.skipped_path.read_text(encoding="utf-8").strip(), judge)
    return ComparedRun(labels, run_summary(files, labels), None, judge)


@dataclass(frozen=True)
class _JudgeNode:
    judge_id: str | None = None


def reference_of(runs: Sequence[ComparedRun]) -> ComparedRun | None:
    """The comparison's reference: the `REFERENCE_METHOD` run when the sweep has one, else the first."""
    ran = [r for r in runs if r.summary is not None]
    return next((r for r in ran if r.labels.method == REFERENCE_METHOD), ran[0] if ran else None)


def _difference(a: Mapping[str, float], b: Mapping[str, float], summary: RunSummary) -> str:
    return format_interval(paired_difference(a, b, summary.bootstrap, summary.clusters))


def comparison_row(run: ComparedRun, reference: ComparedRun | None = None) -> list[str]:
    """One run of the comparison table; differences are to `reference` (paired over shared questions)."""
    labels, summary = run.labels, run.summary
    backbone = labels.backbone + (" (simulated)" if labels.simulated else "")
    names = [labels.method, backbone, str(labels.seed)]
    if summary is None:
        reason = str(run.skipped).replace("|", "/")
        return [*names, "skipped: " + reason, *["–"] * (len(COMPARISON_HEAD) - 5), labels.budget]
    judge = next(iter(summary.judges.values()), None)
    level, metric = recall_metric(labels.dataset)
    recall = summary.retrieval.level(level)
    ten = metric.replace("@5", "@10")
    ref = reference.summary if reference is not None else None
    same = reference is run or ref is None
    published = published_for(labels.method, labels.dataset, labels.backbone, run.judge_id)
    build, query = summary.build, summary.query
    return [*names, str(summary.questions), input_cell(build.input),
            pct_ci(judge.accuracy, judge.accuracy_ci95) if judge else "–",
            pct_ci(judge.accuracy_answered, judge.accuracy_answered_ci95) if judge else "–",
            "reference" if same else _difference(summary.scores, ref.scores, summary) if ref else "–",
            published.cell() if published else "–",
            pct_ci(recall.value(metric), recall.bounds(metric)),
            "reference" if same else _difference(summary.recalls, ref.recalls, summary) if ref else "–",
            pct_ci(recall.value(ten), recall.bounds(ten)),
            str(query.failed), str(query.timed_out), str(query.prompt_cut), str(query.declined),
            num(build.build_seconds_mean), num(build.llm_calls_mean, 1),
            " / ".join(num(v, 0) for v in build.tokens_mean()),
            num(query.query_seconds_mean, 3), num(query.llm_calls_per_question, 1),
            num(query.evidence_tokens_mean, 0), labels.budget]


def comparison_markdown(run_dirs: Iterable[str | Path]) -> str:
    """The side-by-side table of several runs, grouped by dataset; accuracy is the first judge's pass@1
    over all questions and over answered ones, recall is session recall_any@k on LongMemEval and
    evidence recall@k (dia ids) on LoCoMo, each with its 95% interval; Δ columns are the paired
    difference to the reference run over the questions both answered (`analysis.intervals`); published
    is the paper's figure for the same system and dataset (`harness/published.py`); evidence tokens are
    the mean tokens of context handed to the answer model per question, as the run's counter counted
    them (run.json `token_counter`)."""
    by_dataset: dict[str, list[ComparedRun]] = {}
    for run_dir in run_dirs:
        run = compared_run(run_dir)
        by_dataset.setdefault(run.labels.dataset, []).append(run)
    lines: list[str] = []
    for dataset, runs in by_dataset.items():
        reference = reference_of(runs)
        against = f"; Δ: paired difference to {reference.labels.method}" if reference is not None else ""
        rows = [comparison_row(run, reference) for run in runs]
        lines += [f"## {dataset}: {len(rows)} runs side by side{against}", "",
                  *markdown_table(COMPARISON_HEAD, rows), ""]
        shown = [p for r in runs
                 if (p := published_for(r.labels.method, dataset, r.labels.backbone, r.judge_id))]
        if shown:
            sources = "; ".join(sorted({p.source for p in shown}))
            lines += [f"Published: overall pass@1 of the same system on the same dataset ({sources}; "
                      "analysis/published/accuracy.csv).", ""]
    return "\n".join(lines)
