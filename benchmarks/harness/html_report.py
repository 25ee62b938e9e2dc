"""One self-contained HTML page for a run directory or a sweep: `memforest-bench report RUN_DIR_OR_SWEEP`.

The page needs no server and no network: the data travel inside it as one JSON block, the plots are
inline SVG drawn here, and a few lines of script in the page template (`html_page`) build the
per-question table from the data (filter by category, outcome and text; 50 questions a page, so that
LoCoMo's 1,540 stay usable). It shows:

- the summary of each system (the run's summary block: accuracy and recall with their 95% intervals where
  the summary has them, input kept, failures, build and query cost);
- plots: session and turn recall@k, accuracy by category (with interval bars), build time and write tokens
  per system;
- per question, side by side for every system: the question, its gold answer and evidence, the evidence
  each system retrieved (gold items marked) and its answer with the verdict of the first judge.

Everything shown is read from the run directories' files (records, judgments, builds, run.json), as the
summary and comparison tables are."""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness.html_page import PAGE
from benchmarks.harness.results import RunFiles, write_text_atomic
from benchmarks.harness.stored_run import RunLabels
from benchmarks.harness.summary import JudgeBlock, RunSummary, run_summary
from benchmarks.harness.summary_markdown import pct_ci

PAGE_NAME = "report.html"
PER_PAGE = 50  # questions shown at once
SHOWN = ("response", "error", "verdict", "retrieved", "context")  # of each system's row, per question
KS = (1, 3, 5, 10)
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf")


@dataclass(frozen=True)
class SystemRun:
    """One system's run as the page shows it: its label, summary (None: a run with nothing to summarise)
    and per-question rows."""

    label: str
    run_dir: Path
    summary: RunSummary | None
    questions: dict[str, dict[str, Any]]

    def first_judge(self) -> tuple[str | None, JudgeBlock]:
        for label, judge in (self.summary.judges if self.summary else {}).items():
            return label, judge
        return None, JudgeBlock()


def _retrieved(record: Any, gold_sessions: set[str], gold_turns: set[str]) -> list[dict[str, Any]]:
    """A record's retrieved units as the page lists them, gold ones marked."""
    out = []
    for unit in record.retrieved or ():
        sessions = [str(s) for s in unit.get("session_ids") or ()]
        turns = [str(t) for t in unit.get("turn_ids") or ()]
        gold = bool(gold_turns & set(turns)) if gold_turns else bool(gold_sessions & set(sessions))
        out.append({"time": unit.get("time"), "sessions": sessions, "turns": turns, "gold": gold})
    return out


def load_system(run_dir: Path) -> SystemRun:
    """One run directory's summary and, per question (its first attempt), what the page shows."""
    files = RunFiles(run_dir, create=False)
    labels = RunLabels.stored(files.load_run()["config"])
    summary = run_summary(files, labels)
    judge = next(iter(summary.judges), None)
    verdicts: dict[tuple[str, int], bool | None] = {}
    for verdict in files.judgments():
        if verdict.label == judge:
            verdicts[(verdict.question_id, verdict.attempt)] = verdict.correct if verdict.parsed else None
    questions: dict[str, dict[str, Any]] = {}
    for record in sorted(files.records(), key=lambda r: r.attempt):
        if record.question_id in questions:
            continue
        gold_sessions, gold_turns = set(record.evidence_sessions), set(record.evidence_turns)
        questions[record.question_id] = {
            "category": record.category, "question": record.question, "answer": record.answer,
            "date": record.question_date, "abstention": record.abstention,
            "evidence": sorted(gold_turns or gold_sessions),
            "response": record.response, "error": record.error,
            "verdict": verdicts.get((record.question_id, record.attempt)),
            "retrieved": _retrieved(record, gold_sessions, gold_turns),
            "context": record.context,
        }
    label = labels.method + (f" ({labels.backbone}, seed {labels.seed})" if labels.seed else "")
    return SystemRun(label, Path(run_dir), summary, questions)


def summary_rows(system: SystemRun) -> list[tuple[str, str]]:
    """The summary figures of one system, as (name, value) rows."""
    summary = system.summary
    if summary is None:
        return [("questions", str(len(system.questions)))]
    label, judge = system.first_judge()
    rows = [("questions", str(summary.questions))]
    if label is not None:
        rows.append((f"accuracy [{label}]", pct_ci(judge.accuracy, judge.accuracy_ci95)))
        rows.append(("accuracy over answered questions",
                     pct_ci(judge.accuracy_answered, judge.accuracy_answered_ci95)))
    for level in ("session", "turn"):
        figures = summary.retrieval.level(level)
        plain = figures.value("recall_any@5") is None  # LoCoMo's evidence recall (dia ids) instead
        for metric in ("recall_any", "recall_all", "ndcg", *(("recall",) if plain else ())):
            for k in (5, 10):
                name = f"{metric}@{k}"
                value = figures.value(name)
                if value is not None:
                    rows.append((f"{level} {name}", pct_ci(value, figures.bounds(name))))
    build, query = summary.build, summary.query
    kept = build.input or {}
    if kept.get("given"):
        rows.append(("input kept (turns)", f"{int(kept.get('kept') or 0):,} / {int(kept['given']):,}"))
    rows.append(("failed questions", str(query.failed)))
    if build.build_seconds_mean is not None:
        rows.append(("build s / instance", f"{build.build_seconds_mean:,.2f}"))
    if query.query_seconds_mean is not None:
        rows.append(("query s / question", f"{query.query_seconds_mean:,.3f}"))
    return rows


# ---------------------------------------------------------------- plots (inline SVG)


def _svg(width: int, height: int, body: list[str], title: str) -> str:
    return (f'<figure><svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'role="img" aria-label="{html.escape(title)}">{"".join(body)}</svg>'
            f"<figcaption>{html.escape(title)}</figcaption></figure>")


def _legend(names: Sequence[str], x: int, y: int) -> list[str]:
    out = []
    for i, name in enumerate(names):
        color = PALETTE[i % len(PALETTE)]
        out.append(f'<rect x="{x}" y="{y + 16 * i}" width="10" height="10" fill="{color}"/>'
                   f'<text x="{x + 14}" y="{y + 9 + 16 * i}" font-size="11">{html.escape(name)}</text>')
    return out


def _short(value: float) -> str:
    """An axis number in a few characters: 0.046, 12.5, 3.9k, 1.2M."""
    for scale, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"


def _axes(x0: int, y0: int, w: int, h: int, top: float, ticks: int = 4, percent: bool = True) -> list[str]:
    out = [f'<line x1="{x0}" y1="{y0}" x2="{x0 + w}" y2="{y0}" stroke="#333"/>',
           f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y0 - h}" stroke="#333"/>']
    for i in range(ticks + 1):
        value = top * i / ticks
        y = y0 - h * i / ticks
        text = f"{100 * value:.0f}%" if percent else _short(value)
        out.append(f'<line x1="{x0 - 3}" y1="{y:.1f}" x2="{x0 + w}" y2="{y:.1f}" stroke="#eee"/>'
                   f'<text x="{x0 - 6}" y="{y + 4:.1f}" font-size="10" text-anchor="end">{text}</text>')
    return out


def recall_plot(systems: Sequence[SystemRun], level: str) -> str | None:
    """recall_any@k against k for every system that has recall at `level`."""
    series: list[tuple[str, list[tuple[int, float]]]] = []
    for system in systems:
        if system.summary is None:
            continue
        figures = system.summary.retrieval.level(level)
        found = [(k, figures.value(f"recall_any@{k}")) for k in KS]
        if all(v is None for _, v in found):  # LoCoMo's evidence recall (dia ids)
            found = [(k, figures.value(f"recall@{k}")) for k in KS]
        points = [(k, v) for k, v in found if v is not None]
        if points:
            series.append((system.label, points))
    if not series:
        return None
    x0, y0, w, h = 50, 200, 300, 170
    body = _axes(x0, y0, w, h, 1.0)
    xs = {k: x0 + w * i / (len(KS) - 1) for i, k in enumerate(KS)}
    body += [f'<text x="{xs[k]:.1f}" y="{y0 + 14}" font-size="10" text-anchor="middle">@{k}</text>'
             for k in KS]
    for i, (_, points) in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        path = " ".join(f"{xs[k]:.1f},{y0 - h * v:.1f}" for k, v in points)
        body.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        body += [f'<circle cx="{xs[k]:.1f}" cy="{y0 - h * v:.1f}" r="3" fill="{color}"/>' for k, v in points]
    body += _legend([name for name, _ in series], x0 + w + 20, 20)
    return _svg(600, 230, body, f"{level} recall_any@k")


def _bars(groups: Sequence[str], series: Sequence[tuple[str, list[float | None], list[Any]]], title: str,
          percent: bool) -> str:
    """Grouped bars: one group per entry of `groups`, one bar per series, interval bars where given."""
    values = [v for _, vs, _ in series for v in vs if v is not None]
    highs = [float(iv[1]) for _, _, ivs in series for iv in ivs if iv]
    top = max([*values, *highs, 1e-9])
    top = 1.0 if percent else top * 1.1
    x0, y0, h = 50, 200, 170
    slot = max(96, 12 * len(series) + 10)  # wide enough for a category's name
    w = max(200, slot * len(groups))
    body = _axes(x0, y0, w, h, top, percent=percent)
    bar = (slot - 10) / max(1, len(series))
    for g, group in enumerate(groups):
        gx = x0 + 5 + slot * g
        body.append(f'<text x="{gx + (slot - 10) / 2:.1f}" y="{y0 + 14}" font-size="10" text-anchor="middle">'
                    f"{html.escape(group[:16])}</text>")
        for s, (_, vs, ivs) in enumerate(series):
            value = vs[g]
            if value is None:
                continue
            x = gx + bar * s
            y = y0 - h * value / top
            body.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar - 1:.1f}" height="{y0 - y:.1f}" '
                        f'fill="{PALETTE[s % len(PALETTE)]}"><title>{value:.3g}</title></rect>')
            interval = ivs[g] if g < len(ivs) else None
            if interval:
                lo, hi = (y0 - h * float(v) / top for v in interval)
                cx = x + (bar - 1) / 2
                body.append(f'<line class="errorbar" x1="{cx:.1f}" y1="{lo:.1f}" x2="{cx:.1f}" y2="{hi:.1f}" '
                            'stroke="#000"/>')
    body += _legend([name for name, _, _ in series], x0 + w + 20, 20)
    return _svg(x0 + w + 220, 230, body, title)


def category_plot(systems: Sequence[SystemRun]) -> str | None:
    """Accuracy by category under each system's first judge, with interval bars where present."""
    judged = [(s.label, s.first_judge()[1]) for s in systems]
    categories = sorted({c for _, j in judged for c in j.per_category})
    if not categories:
        return None
    series = [(label, [j.per_category.get(c) for c in categories],
               [j.per_category_ci95.get(c) for c in categories]) for label, j in judged]
    return _bars(categories, series, "accuracy by category (first judge; bars: 95% interval)", True)


def cost_plot(systems: Sequence[SystemRun], key: str, title: str) -> str | None:
    values = [getattr(s.summary.build, key) if s.summary else None for s in systems]
    if all(v is None for v in values):
        return None
    series: list[tuple[str, list[float | None], list[Any]]] = [
        (s.label, [None if v is None else float(v)], []) for s, v in zip(systems, values)]
    return _bars(["per instance"], series, title, False)


# ---------------------------------------------------------------- the page


def page_data(systems: Sequence[SystemRun]) -> dict[str, Any]:
    """What the page's script reads: systems and, per question id in first-seen order, the question and
    each system's row (absent where a system has no record of it)."""
    order: dict[str, None] = {}
    for system in systems:
        order.update(dict.fromkeys(system.questions))
    questions = []
    for qid in order:
        first = next(s.questions[qid] for s in systems if qid in s.questions)
        questions.append({
            "id": qid, "category": first["category"], "question": first["question"],
            "answer": first["answer"], "date": first["date"], "evidence": first["evidence"],
            "systems": [{k: s.questions[qid][k] for k in SHOWN} if qid in s.questions else None
                        for s in systems],
        })
    return {"systems": [s.label for s in systems], "questions": questions}


def render(systems: Sequence[SystemRun], title: str) -> str:
    """The whole page."""
    blocks = []
    for system in systems:
        rows = "".join(f"<tr><th>{html.escape(name)}</th><td>{html.escape(value)}</td></tr>"
                       for name, value in summary_rows(system))
        blocks.append(f'<section class="summary"><h3>{html.escape(system.label)}</h3><table>{rows}</table>'
                      f'<p class="path">{html.escape(str(system.run_dir))}</p></section>')
    plots = [recall_plot(systems, "session"), recall_plot(systems, "turn"), category_plot(systems),
             cost_plot(systems, "build_seconds_mean", "build seconds per instance"),
             cost_plot(systems, "prompt_tokens_mean", "write prompt tokens per instance"),
             cost_plot(systems, "completion_tokens_mean", "write output tokens per instance")]
    data = json.dumps(page_data(systems), ensure_ascii=True).replace("</", "<\\/")
    return PAGE.format(title=html.escape(title), summaries="".join(blocks), per_page=PER_PAGE,
                       plots="".join(p for p in plots if p) or "<p>No figures to plot.</p>", data=data)


def write_report(runs: Sequence[Path], target: Path, title: str) -> Path:
    """Write the page of the run directories `runs` (a sweep's finished runs, or one run) to `target`."""
    if not runs:
        raise ValueError("no finished run to report (no run.json, no finished sweep job)")
    write_text_atomic(target, render([load_system(run) for run in runs], title))
    return target
