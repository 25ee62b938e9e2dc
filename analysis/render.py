"""Writing artifacts: tables as Markdown and LaTeX, figures as PNG and PDF (matplotlib, Agg).

A table is a pandas frame whose cells are already what a reader sees (numbers formatted, `missing`
where no run exists, our accuracy and recall figures with their 95% intervals). A figure marks
simulated series in its legend and, when any series is simulated, says so in a banner under the title;
it draws the intervals of our figures as error bars.
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend is chosen before pyplot is imported)
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

MISSING = "missing"
SIMULATED_NOTE = "simulated: latency-model server, not measured on real hardware"
INTERVAL_NOTE = ("Ours: value [95% interval], a percentile bootstrap over questions (2,000 resamples, "
                 "seed 0; analysis/intervals.py). The paper's published values come without per-question "
                 "data, so they have no interval.")
_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


@dataclass
class Table:
    """A table ready to write: the frame of display strings, a caption and notes under it."""

    name: str
    frame: pd.DataFrame
    caption: str
    notes: list[str] = field(default_factory=list)


def fmt(value: Any, digits: int = 2, pct: bool = False) -> str:
    """A cell: `missing` for None/NaN, thousands separators, a percentage when `pct`."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, numbers.Integral):
        return f"{int(value):,}"
    number = float(value)
    if pct:
        return f"{100 * number:.1f}"
    return f"{number:,.{digits}f}"


def _absent(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def fmt_interval(value: Any, low: Any, high: Any, digits: int = 2, pct: bool = False) -> str:
    """A figure with its 95% interval, `81.2 [79.1, 83.2]` (percentage points when `pct`): `missing`
    without a value, the value alone without an interval."""
    if _absent(value):
        return MISSING
    if _absent(low) or _absent(high):
        return fmt(float(value), digits, pct)
    scale, places = (100.0, 1) if pct else (1.0, digits)
    value, low, high = (f"{scale * float(x):,.{places}f}" for x in (value, low, high))
    return f"{value} [{low}, {high}]"


def interval_cell(low: Any, high: Any, pct: bool = True) -> str:
    """An interval alone, `[79.1, 83.2]`; `missing` without one."""
    if _absent(low) or _absent(high):
        return MISSING
    scale = 100.0 if pct else 1.0
    return f"[{scale * float(low):.1f}, {scale * float(high):.1f}]"


def error_bars(values: Sequence[float], lows: Sequence[Any], highs: Sequence[Any],
               scale: float = 100.0) -> np.ndarray:
    """matplotlib's `yerr` for intervals: shape (2, n), the distances below and above each value (times
    `scale`), 0 where a value has no interval."""
    value = np.asarray(values, dtype=float)
    low = np.asarray([np.nan if _absent(x) else x for x in lows], dtype=float)
    high = np.asarray([np.nan if _absent(x) else x for x in highs], dtype=float)
    errors = np.vstack([value - low, high - value]) * scale
    return np.nan_to_num(np.clip(errors, 0.0, None), nan=0.0)


def markdown(table: Table) -> str:
    head = [str(c) for c in table.frame.columns]
    lines = [f"**{table.caption}**", "", "| " + " | ".join(head) + " |",
             "|" + "|".join("---" for _ in head) + "|"]
    for row in table.frame.itertuples(index=False):
        lines.append("| " + " | ".join(str(cell) for cell in row) + " |")
    if table.frame.empty:
        lines.append("| " + " | ".join(MISSING for _ in head) + " |")
    lines += [""] + [f"- {note}" for note in table.notes]
    return "\n".join(lines).rstrip() + "\n"


def latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in text).replace("×", r"$\times$")


def latex(table: Table) -> str:
    cols = [latex_escape(str(c)) for c in table.frame.columns]
    align = "l" + "r" * (len(cols) - 1)
    lines = [r"\begin{table}[t]", r"\centering", r"\small", f"\\begin{{tabular}}{{{align}}}", r"\toprule",
             " & ".join(cols) + r" \\", r"\midrule"]
    rows = list(table.frame.itertuples(index=False)) or [tuple(MISSING for _ in cols)]
    lines += [" & ".join(latex_escape(str(cell)) for cell in row) + r" \\" for row in rows]
    lines += [r"\bottomrule", r"\end{tabular}"]
    caption = latex_escape(table.caption + (" " + " ".join(table.notes) if table.notes else ""))
    lines += [f"\\caption{{{caption}}}", f"\\label{{tab:{table.name}}}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def write_table(table: Table, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    md, tex = out / f"{table.name}.md", out / f"{table.name}.tex"
    md.write_text(markdown(table), encoding="utf-8")
    tex.write_text(latex(table), encoding="utf-8")
    return [md, tex]


def series_label(label: str, simulated: bool) -> str:
    return f"{label} (simulated)" if simulated else label


def new_figure(ncols: int = 1, width: float = 6.4, height: float = 4.0) -> tuple[Any, Any]:
    fig, axes = plt.subplots(1, ncols, figsize=(width * ncols if ncols > 1 else width, height), squeeze=False)
    return fig, list(axes[0]) if ncols > 1 else axes[0][0]


def finish_figure(fig: Any, name: str, out: Path, title: str, simulated: bool = False,
                  empty: bool = False, patches: Sequence[tuple[str, str, str]] = ()) -> list[Path]:
    """Title, a simulated banner when any series is simulated, a `no runs` notice when nothing of ours
    was plotted, a figure legend of `patches` (label, colour, hatch) under the axes; PNG and PDF."""
    fig.suptitle(title, fontsize=11)
    bottom = 0.0
    if simulated:
        fig.text(0.5, 0.005, SIMULATED_NOTE, ha="center", va="bottom", fontsize=8, color="firebrick")
        bottom = 0.04
    if patches:
        handles = [Patch(facecolor=color, hatch=hatch, label=label) for label, color, hatch in patches]
        fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 5), fontsize=8,
                   bbox_to_anchor=(0.5, bottom), frameon=False)
        bottom += 0.08
    if empty:
        fig.text(0.5, 0.5, "no runs of ours found (missing)", ha="center", va="center", fontsize=10,
                 color="grey", alpha=0.8)
    fig.tight_layout(rect=(0, bottom, 1, 1))
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.png", out / f"{name}.pdf"]
    for path in paths:
        fig.savefig(path, dpi=150, bbox_inches="tight")  # legends placed outside the axes stay whole
    paths.append(out / f"{name}.series.json")
    paths[-1].write_text(json.dumps(describe(fig, title, simulated, empty), indent=1) + "\n",
                         encoding="utf-8")
    plt.close(fig)
    return paths


def describe(fig: Any, title: str, simulated: bool, empty: bool) -> dict[str, Any]:
    """What a figure shows, for readers and tests: per axes its labels and the series in its legend."""
    axes = []
    for ax in fig.axes:
        handles = ax.get_legend()
        series = [text.get_text() for text in handles.get_texts()] if handles is not None else []
        axes.append({"title": ax.get_title(), "xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(),
                     "series": series})
    legends = [text.get_text() for legend_ in fig.legends for text in legend_.get_texts()]
    return {"title": title, "simulated": simulated, "no_runs_of_ours": empty, "axes": axes,
            "figure_legend": legends}


def legend(ax: Any, patches: Sequence[tuple[str, str, str]] = (), **kwargs: Any) -> None:
    """The axes' legend, plus proxy patches (label, colour, hatch) for bar colours."""
    handles, labels = ax.get_legend_handles_labels()
    for label, color, hatch in patches:
        handles.append(Patch(facecolor=color, hatch=hatch, label=label))
        labels.append(label)
    if handles:
        ax.legend(handles, labels, fontsize=8, **kwargs)
