"""How long a run will take, said before it starts, and what to do once it has ended.

The estimate comes from what the work is (instances and turns to build, questions to answer, on this
run's method and backbone) and a rate: the rates this machine reached on the run directory's own earlier
builds and answers when it has any (a resumed run), else the reference rates measured for the embedded
CPU default below, scaled to this machine's cores. A backbone with no known rate gets no estimate, said
so, rather than a guess."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from analysis.records import BuildRow, QuestionRecord

# The CPU default (memforest_embed, SmolLM2-135M on llama.cpp, MiniLM, the shipped sample, 32 turns an
# instance) on 2 AMD EPYC cores: 4.05 s of build per turn (129.5 s an instance, the whole sample's
# `memforest-bench` run on a fresh clone); 7.7 s per question for retrieval, the answer and the judge
# (155.9 s of the instance loop less its 148.2 s build) and 10 s before the first instance (166 s of
# `make run` wall less the loop), from `make run` on one instance.
REFERENCE_CORES = 2
REFERENCE = {  # backend -> (build seconds per turn, seconds per question, start seconds)
    "llamacpp": (4.05, 7.7, 10.0),
}
FREE = {"scripted", "hash"}  # test models: no measurable cost


@dataclass(frozen=True)
class Estimate:
    seconds: float | None
    basis: str

    def line(self, instances: int, turns: int, questions: int) -> str:
        work = f"{instances} instance(s), {turns:,} turns to build, {questions} question(s) to answer"
        if self.seconds is None:
            return f"estimate: {work}; no estimate ({self.basis})"
        return f"estimate: {work}: about {_duration(self.seconds)} ({self.basis})"


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    return f"{seconds / 60:.1f} min"


def estimate(backend: str, turns: int, questions: int, done_builds: Sequence[BuildRow] = (),
             done_records: Sequence[QuestionRecord] = (), needs_model: bool = True,
             cores: int | None = None) -> Estimate:
    """The expected wall time of building `turns` turns and answering `questions` questions."""
    built = [b for b in done_builds if not b.error and b.turns]
    if built:  # this run's own rates on this machine
        per_turn = sum(b.build_seconds for b in built) / sum(b.turns for b in built)
        timed = [r.query_seconds for r in done_records if r.query_seconds]
        per_question = sum(timed) / len(timed) if timed else REFERENCE.get(backend, (0.0, 0.0, 0.0))[1]
        return Estimate(per_turn * turns + per_question * questions,
                        f"from this run's {len(built)} finished build(s) on this machine")
    if backend in FREE or not needs_model:
        return Estimate(None, f"the {backend} backend's cost is not modelled")
    if backend not in REFERENCE:
        return Estimate(None, f"no reference rate for the {backend} backend")
    per_turn, per_question, start = REFERENCE[backend]
    have = cores or _cores()
    scale = REFERENCE_CORES / max(1, min(int(have), 8))  # llama.cpp gains little past a few cores
    seconds = start + scale * (per_turn * turns + per_question * questions)
    return Estimate(seconds, f"reference rates of the CPU default on {REFERENCE_CORES} cores, scaled to "
                             f"{have} here")


def _cores() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def next_steps(run_dir: str, report: str | None, full_sample: bool) -> str:
    """The lines a single run ends with: where its results are and what to run next."""
    lines = ["", f"results: {run_dir} (summary.md, records.jsonl, run.json)"]
    if report:
        lines.append(f"report:  {report} (open it in a browser: every question, every system)")
    lines += ["next:"]
    if full_sample:
        lines.append("  make run RUN_ARGS=                      # the whole shipped sample (6 instances)")
    lines += [
        "  memforest-bench -m method=memforest_embed,flat_rag,full_context   # a comparison sweep",
        "  memforest-bench report SWEEP_DIR          # its HTML page (a sweep also writes it)",
        "  make paper RESULTS=results                # the paper's tables and figures from stored runs",
    ]
    return "\n".join(lines)
