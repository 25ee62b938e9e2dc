"""Every paper experiment a CPU can honestly run, into one results directory, with one command.

    python -m benchmarks.paper_runs [--results results] [--data LONGMEMEVAL_S.json.xz] [--locomo LOCOMO.json]
                                    [--only STEP ...] [--chunk-sizes 1,2,4,8,16,32,64,0] [--chunk-limit N]
                                    [--dry-run]
    (make paper-runs; then make paper renders what they wrote)

Steps, each one `memforest-bench -m` multirun:
- `write_path`: the simulated write-path table and stage breakdown on the shipped sample instance (154
  turns) for memforest_embed, mem0, memoryos and zep_local under llm=qwen3_30b_a3b_simulated (latency
  model, SmolLM2 as the content source, output caps per prompt kind);
- `evidence_budget_recall`: recall at k = 5..100 on the LongMemEval-S file (generator-free
  memforest_sessions; k=5 builds, the other k copy its stores);
- `ablation_retrieval_recall`: the generator-free retrieval modes (embed, root, flat over cells), on the
  evidence-budget sweep's memories;
- `chunk_size_recall`: recall with cells of 1..64 turns and whole sessions (each size builds);
- with `--locomo`, the three recall steps again on that LoCoMo file (evidence recall by dia id).

A step whose multirun exited 0 leaves `<results>/paper_runs/<step>.done` and is skipped next time; a
step that stopped or failed is run again, and the harness resumes its run directories (completed builds
and answered questions are kept). Each step's output goes to `<results>/paper_runs/<step>.log`.
The estimates printed up front are wall times measured on a 2-core machine (AMD EPYC, shared), per
instance built; they are guides, not promises."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness.results import write_text_atomic

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO.parent / "shared" / "data" / "longmemeval_s_slice.json.xz"
CHUNK_SIZES = "1,2,4,8,16,32,64,0"
# wall seconds per instance built by memforest_sessions on an idle 2-core machine (the whole slice's
# evidence-budget step took 15 min, LoCoMo's 5 min; a machine loaded ~8 took 56 s per slice instance)
BUILD_S = {"longmemeval_s": 8.0, "locomo": 25.0}
# per instance and retrieval-only job (copying a store, encoding its questions): the slice's ablation
# took 2 min for 2 x 100 instances, LoCoMo's 1 min for 2 x 10 conversations (~150 questions each)
RETRIEVE_S = {"longmemeval_s": 0.6, "locomo": 3.0}
# the four systems on one sample instance (~26 turns), SmolLM2 as the content source, measured on the
# first (32 turns) on 2 cores: MemForest 82 s, MemoryOS 285 s, Mem0 455 s, Zep Local 1,419 s (~70 s per
# turn in all; the step took 38 min)
WRITE_PATH_S = 1_800.0
SAMPLE_INSTANCES = 6  # benchmarks/datasets/sample.json: 6 instances, 154 turns


@dataclass(frozen=True)
class Step:
    name: str
    overrides: tuple[str, ...]
    estimate_s: float
    needs: str | None = None  # the data file this step reads (None: shipped with the repository)


def _data(kind: str, path: Path) -> tuple[str, ...]:
    return (f"dataset={kind}", f"dataset.path={path}")


def steps(results: Path, data: Path, locomo: Path | None, chunk_sizes: str,
          chunk_limit: int | None, limit: int | None = None,
          write_path_limit: int | None = None) -> list[Step]:
    """The steps of a paper run, in order; `limit` instances of each file (None: all, 100 in the
    LongMemEval-S slice), `chunk_limit` in the chunk-size sweep, `write_path_limit` of the sample's 6."""
    sample = min(SAMPLE_INSTANCES, write_path_limit or SAMPLE_INSTANCES)
    out = [Step("write_path", ("experiment=write_path", "llm=qwen3_30b_a3b_simulated", "dataset=sample",
                               *((f"dataset.limit={write_path_limit}",) if write_path_limit else ()),
                               f"output_root={results}"), WRITE_PATH_S * sample)]
    files = [("longmemeval_s", data, min(100, limit or 100))]
    files += [("locomo", locomo, min(10, limit or 10))] if locomo else []
    for kind, path, n in files:
        suffix = "" if kind == "longmemeval_s" else "_locomo"
        build = BUILD_S[kind] * n
        base = (*_data(kind, path), f"output_root={results}", *((f"dataset.limit={limit}",) if limit else ()))
        k5 = results / "evidence_budget_recall" / kind / "memforest_sessions" / "smollm2_cpu" / "k5" / "seed0"
        sizes = len(chunk_sizes.split(","))
        limited = (f"dataset.limit={chunk_limit}",) if chunk_limit and chunk_limit < n else ()
        chunk_n = min(n, chunk_limit or n)
        out += [
            Step(f"evidence_budget_recall{suffix}", ("experiment=evidence_budget_recall", *base),
                 build + 4 * RETRIEVE_S[kind] * n, str(path)),
            Step(f"ablation_retrieval_recall{suffix}", ("experiment=ablation_retrieval_recall", *base,
                                                        f"stores_from={k5}"),
                 3 * RETRIEVE_S[kind] * n, str(path)),
            Step(f"chunk_size_recall{suffix}", ("experiment=chunk_size_recall", *_chunk_base(base, limited),
                                                f"method.memforest.chunk.max_turns={chunk_sizes}"),
                 sizes * BUILD_S[kind] * chunk_n, str(path)),
        ]
    return out


def _chunk_base(base: tuple[str, ...], limited: tuple[str, ...]) -> tuple[str, ...]:
    """The data overrides of the chunk-size sweep: its own instance limit replaces the general one."""
    return (*(o for o in base if not (limited and o.startswith("dataset.limit="))), *limited)


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def run_step(step: Step, state: Path) -> int:
    """Run one step's multirun, its output into <state>/<step>.log; its exit status."""
    command = [sys.executable, "-m", "benchmarks.harness.app", "-m", *step.overrides, "progress=false"]
    with open(state / f"{step.name}.log", "a", encoding="utf-8") as log:
        log.write(f"$ {' '.join(command)}\n")
        log.flush()
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        return subprocess.run(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env).returncode


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.paper_runs", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", default="results", help="where the runs go (make paper reads it)")
    parser.add_argument("--data", default=str(DEFAULT_DATA), help="the LongMemEval-S file (.json, .json.xz)")
    parser.add_argument("--locomo", default=None, help="a LoCoMo file: the recall sweeps on it too")
    parser.add_argument("--only", nargs="*", default=None, help="run only these steps")
    parser.add_argument("--chunk-sizes", default=CHUNK_SIZES, help="turns per cell (0 = whole session)")
    parser.add_argument("--limit", type=int, default=None, help="instances of each data file (default all)")
    parser.add_argument("--chunk-limit", type=int, default=None, help="instances in the chunk-size sweep")
    parser.add_argument("--write-path-limit", type=int, default=None,
                        help="sample instances in the write-path step (default all 6)")
    parser.add_argument("--dry-run", action="store_true", help="print the steps and estimates only")
    args = parser.parse_args(argv)
    results = Path(args.results).resolve()
    data, locomo = Path(args.data).resolve(), Path(args.locomo).resolve() if args.locomo else None
    plan = steps(results, data, locomo, args.chunk_sizes, args.chunk_limit, args.limit, args.write_path_limit)
    if args.only is not None:
        unknown = sorted(set(args.only) - {s.name for s in plan})
        if unknown:
            print(f"paper-runs: no step named {', '.join(unknown)} (steps: "
                  f"{', '.join(s.name for s in plan)})", file=sys.stderr)
            return 2
        plan = [s for s in plan if s.name in args.only]
    state = results / "paper_runs"
    state.mkdir(parents=True, exist_ok=True)
    todo = [s for s in plan if not (state / f"{s.name}.done").exists()]
    print(f"paper-runs: {len(todo)} of {len(plan)} steps to run into {results}, estimated "
          f"{minutes(sum(s.estimate_s for s in todo))} on 2 cores (done steps skipped: "
          f"{', '.join(s.name for s in plan if s not in todo) or 'none'})", flush=True)
    failed: list[str] = []
    started = time.monotonic()
    for i, step in enumerate(todo, 1):
        if step.needs is not None and not Path(step.needs).exists():
            print(f"paper-runs: [{i}/{len(todo)}] {step.name}: data file {step.needs} not found; give it "
                  "with --data (make paper-runs PAPER_DATA=...) or --locomo; skipped", file=sys.stderr)
            failed.append(step.name)
            continue
        left = sum(s.estimate_s for s in todo[i - 1:])
        print(f"paper-runs: [{i}/{len(todo)}] {step.name} (estimated {minutes(step.estimate_s)}; "
              f"{minutes(time.monotonic() - started)} elapsed, ~{minutes(left)} left); log "
              f"{state / (step.name + '.log')}", flush=True)
        if args.dry_run:
            print("  memforest-bench -m " + " ".join(step.overrides))
            continue
        step_start = time.monotonic()
        code = run_step(step, state)
        took = time.monotonic() - step_start
        if code == 0:
            write_text_atomic(state / f"{step.name}.done", f"{took:.0f} s\n")
        else:
            failed.append(step.name)
        print(f"paper-runs: [{i}/{len(todo)}] {step.name} {'done' if code == 0 else f'FAILED (exit {code})'}"
              f" in {minutes(took)}", flush=True)
    if args.dry_run:
        return 0
    print(f"paper-runs: {len(todo) - len(failed)} of {len(todo)} steps done in "
          f"{minutes(time.monotonic() - started)}" + (f"; failed: {', '.join(failed)} (run again to resume)"
                                                     if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
