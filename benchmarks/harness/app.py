"""`memforest-bench`: the Hydra app over `configs/`, and its `judge` subcommand.

    memforest-bench [overrides...]                 run (or resume) one configuration
    memforest-bench -m method=a,b seed=0,1         a sweep (Hydra multirun)
    memforest-bench -m hydra/launcher=slurm ...    a sweep as a SLURM job array (`--cfg hydra` shows it)
    memforest-bench judge RUN_DIR [--mix-judges] [overrides...]   re-judge the stored answers of a run, e.g.
        memforest-bench judge results/main/longmemeval_s/memforest_embed/qwen3_4b/seed0 \
            judge=strict llm=qwen3_30b_a3b_server
    memforest-bench compare [--mix-judges] RUN_DIR...   stored runs side by side (a sweep prints this itself)
    memforest-bench compare [--mix-judges] SWEEP_DIR    a sweep's finished runs, comparison.md written again
    memforest-bench write-path RUN_DIR... [--out DIR]   the write-path table of stored runs
    memforest-bench -v [overrides...]              the same, with the libraries' own log lines and bars
    memforest-bench report RUN_DIR_OR_SWEEP [--out FILE]   one self-contained HTML page of a run or a sweep:
        summary with intervals, plots, and every question side by side (default FILE: <dir>/report.html)
    memforest-bench data dataset=<name> [dataset.path=FILE] [dataset.errata=FILE] [dataset.<key>=<value>...]
        load a dataset without building anything and report what it holds and what would fail, and what
        an errata file changes in it (per entry: the question, the change, its source)

`judge` and `compare` refuse to count verdicts of different judges (another judge hash: model, prompt
or sampling) together, saying in one line what differs; `--mix-judges` (or `judge.allow_mixed=true`)
lets them.

The configs live in the repository's top-level `configs/`, outside the Python package: the app finds
them relative to this file, which works from a source checkout or an editable install (a wheel install
would need the directory shipped as package data).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

import hydra
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from benchmarks.harness import schema
from memforest.errors import error_line

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"
USAGE = ("usage: memforest-bench judge RUN_DIR [--mix-judges] [judge=<name>] [llm=<judge model>] "
         "[judge.<key>=<value>...]")
MIX_JUDGES = "--mix-judges"
RUN_DIR_MARKER = "run_dir.txt"  # in each Hydra job directory: where that job's results are
FAILED_RUNS: list[tuple[str, int]] = []  # (run directory, failed instances) of the jobs run in this process
DATASET_ERRORS: list[str] = []  # dataset files that could not be read at all, in this process
STOPPED_RUNS: list[tuple[str, str]] = []  # (run directory, why) of the jobs a lost model stopped
log = logging.getLogger(__name__)
schema.register()


@hydra.main(config_path=str(CONFIG_DIR), config_name="config", version_base="1.3")
def run_app(cfg: DictConfig) -> None:
    from benchmarks.datasets import DatasetError, DatasetUnavailableError
    from benchmarks.harness.report import failed_instances
    from benchmarks.harness.runner import run_benchmark
    from memforest.errors import ModelUnavailableError, error_line

    resolved = schema.bench_config(cfg)  # the one conversion: the harness reads typed attributes
    job_dir = Path(HydraConfig.get().runtime.output_dir)
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / RUN_DIR_MARKER).write_text(str(Path(resolved.run_dir).resolve()) + "\n", encoding="utf-8")
    try:
        summary = run_benchmark(resolved)
    except (DatasetError, DatasetUnavailableError) as exc:  # the file as a whole: one line, no traceback
        print(f"memforest-bench: {exc}", file=sys.stderr)
        DATASET_ERRORS.append(str(exc))
        return
    except ModelUnavailableError as exc:  # nothing recorded for what it was serving: a rerun resumes there
        log.error("run %s stopped: the model is gone: %s", resolved.run_dir, error_line(exc))
        STOPPED_RUNS.append((resolved.run_dir, error_line(exc, 300)))
        return
    if summary.get("failures"):
        FAILED_RUNS.append((resolved.run_dir, failed_instances(summary["failures"])))
    if HydraConfig.get().mode != RunMode.MULTIRUN:  # a sweep ends with its comparison and page instead
        from benchmarks.harness.estimate import next_steps
        from benchmarks.harness.html_report import PAGE_NAME

        page = Path(resolved.run_dir) / PAGE_NAME
        part = resolved.dataset.name == "sample" and resolved.dataset.limit is not None
        print(next_steps(resolved.run_dir, str(page) if page.exists() else None, full_sample=part))


class SweepComparison(Callback):
    """One table of a sweep's runs side by side, written to `comparison.md` in the sweep directory as each
    job ends (`sweep_comparison`) and printed when the multirun ends. Written at every job's end because
    Hydra calls `on_multirun_end` only when every job returned: a job that raised or a task that died
    leaves the table of the jobs that finished. Reads the jobs' files only, so it also works when the
    jobs ran elsewhere (a SLURM launcher); `memforest-bench compare SWEEP_DIR` rebuilds it."""

    def __init__(self) -> None:
        self.sweep_dir: Path | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.sweep_dir = Path(str(config.hydra.sweep.dir))  # resolved once, as the launcher does

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        hydra_cfg = config.get("hydra")
        if hydra_cfg is None or hydra_cfg.get("mode") != RunMode.MULTIRUN:
            return
        job_dir = Path(str(hydra_cfg.runtime.output_dir))
        depth = len(Path(str(hydra_cfg.sweep.subdir)).parts)
        try:
            sweep_comparison(job_dir.parents[depth - 1])
        except Exception as exc:  # the table is a convenience: never the reason a job fails
            log.warning("comparison.md not updated: %s", error_line(exc))

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if self.sweep_dir is None:
            return
        found = sweep_comparison(self.sweep_dir)
        if found is None:
            return
        text, run_dirs = found
        print(text)
        try:
            from benchmarks.harness.html_report import PAGE_NAME, write_report

            title = f"MemForest report: {self.sweep_dir.name}"
            page = write_report(run_dirs, self.sweep_dir / PAGE_NAME, title)
            print(f"report: {page}")
        except Exception as exc:  # the page is a convenience: never the reason a sweep fails
            log.warning("report.html not written: %s", error_line(exc))
        if config.get("experiment_name") == "write_path":  # write_path.md / .json
            from benchmarks.harness.write_path import markdown, write

            print(markdown(write(run_dirs, self.sweep_dir)))


def sweep_runs(sweep_dir: Path) -> tuple[list[Path], list[str]]:
    """The run directories of a sweep's finished jobs, in job order, and a line for each job that has not
    finished. A job has finished when its run's summary.md is newer than the job's marker (a run resumed
    by this sweep keeps the summary of an earlier invocation until it finishes again)."""
    markers = sorted(sweep_dir.glob(f"*/{RUN_DIR_MARKER}"), key=lambda p: _job_number(p.parent.name))
    finished: list[Path] = []
    unfinished: list[str] = []
    for marker in markers:
        run_dir = Path(marker.read_text(encoding="utf-8").strip())
        summary = run_dir / "summary.md"
        if not (run_dir / "run.json").exists():
            continue  # the job stopped before its run began (a dataset it could not read)
        if summary.exists() and summary.stat().st_mtime >= marker.stat().st_mtime:
            finished.append(run_dir)
        else:
            unfinished.append(f"job {marker.parent.name}: {run_dir}")
    return list(dict.fromkeys(finished)), unfinished


def sweep_comparison(sweep_dir: Path) -> tuple[str, list[Path]] | None:
    """Write `comparison.md` (atomically) in `sweep_dir` for its finished jobs; return its text and their
    run directories, or None when no job has finished."""
    from benchmarks.harness.report import comparison_markdown
    from benchmarks.harness.results import write_text_atomic

    run_dirs, unfinished = sweep_runs(sweep_dir)
    if not run_dirs:
        return None
    text = comparison_markdown(run_dirs)
    if unfinished:
        text += "\nNot finished (not in the table):\n\n" + "".join(f"- {line}\n" for line in unfinished)
    write_text_atomic(sweep_dir / "comparison.md", text)  # array tasks may end together
    return text, run_dirs


def _job_number(name: str) -> tuple[int, str]:
    return (int(name), name) if name.isdigit() else (1 << 30, name)


def compose_config(overrides: Sequence[str] = ()) -> DictConfig:
    """The configuration `memforest-bench` would run with these overrides (Hydra's compose API)."""
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3", job_name="memforest-bench"):
        return compose("config", overrides=list(overrides))


def judge_config(stored: dict[str, Any], overrides: Sequence[str]) -> schema.JudgeNode:
    """The `judge` group composed with `overrides` and resolved against the run's stored configuration
    (run.json's plain `config`): the judge model is the run's backbone unless the overrides choose
    another (`llm=...`, or `+llm@judge.model=...`)."""
    composed = compose_config(overrides)
    base = OmegaConf.create(stored)
    if any(o.lstrip("+~").startswith(("llm=", "llm.")) for o in overrides):
        base.llm = composed.llm
    base.judge = OmegaConf.create(OmegaConf.to_container(composed.judge, resolve=False))
    if base.judge.model is None:  # the backbone judges
        base.judge.model = base.llm
    judge = OmegaConf.to_container(base.judge, resolve=True)
    assert isinstance(judge, dict)
    known = {f.name for f in fields(schema.ChatModelNode)}  # a stored backbone of an older harness
    judge["model"] = {k: v for k, v in judge["model"].items() if k in known}
    node = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema.JudgeNode), judge))
    assert isinstance(node, schema.JudgeNode)
    return node


def judge_command(argv: Sequence[str]) -> int:
    mix = MIX_JUDGES in argv
    argv = [a for a in argv if a != MIX_JUDGES]
    if not argv or argv[0].startswith("-") or "=" in argv[0]:
        print(USAGE, file=sys.stderr)
        return 2
    from benchmarks.harness.rejudge import rejudge_run
    from benchmarks.harness.results import RunFiles
    from benchmarks.judging.pinning import MixedJudgesError

    logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s][%(levelname)s] - %(message)s")
    run_dir = Path(argv[0])
    try:
        stored = RunFiles(run_dir, create=False).load_run()["config"]
    except FileNotFoundError as exc:
        print(f"memforest-bench judge: {exc}", file=sys.stderr)
        return 2
    judge = judge_config(stored, [*argv[1:], *(["judge.allow_mixed=true"] if mix else [])])
    try:
        rejudge_run(run_dir, judge, progress=bool(stored.get("progress", True)))  # stored run.json config
    except MixedJudgesError as exc:
        print(f"memforest-bench judge: {exc}", file=sys.stderr)
        return 1
    return 0


def compare_command(argv: Sequence[str]) -> int:
    """Print the side-by-side table of stored runs; a sweep directory stands for its finished jobs' runs,
    and its comparison.md is written again (as after a sweep whose last jobs failed)."""
    from benchmarks.harness.rejudge import check_comparable
    from benchmarks.harness.report import comparison_markdown
    from benchmarks.judging.pinning import MixedJudgesError

    mix = MIX_JUDGES in argv
    argv = [a for a in argv if a != MIX_JUDGES]
    if not argv or any(a.startswith("-") for a in argv):
        print(f"usage: memforest-bench compare [{MIX_JUDGES}] RUN_DIR... | SWEEP_DIR", file=sys.stderr)
        return 2
    paths = [Path(a) for a in argv]
    try:
        sweep = len(paths) == 1 and not (paths[0] / "run.json").exists() \
            and any(paths[0].glob(f"*/{RUN_DIR_MARKER}"))
        check_comparable(sweep_runs(paths[0])[0] if sweep else paths, mix)
        if sweep:
            found = sweep_comparison(paths[0])
            if found is None:
                print(f"memforest-bench compare: no job of {paths[0]} has finished", file=sys.stderr)
                return 1
            print(found[0], end="")
            return 0
        print(comparison_markdown(paths))
    except FileNotFoundError as exc:
        print(f"memforest-bench compare: {exc}", file=sys.stderr)
        return 2
    except MixedJudgesError as exc:
        print(f"memforest-bench compare: {exc}", file=sys.stderr)
        return 1
    return 0


def data_command(argv: Sequence[str]) -> int:
    """Load the dataset the overrides choose and print what it holds; 1 when an entry would fail."""
    from hydra.errors import HydraException

    from benchmarks.datasets import DatasetError, DatasetUnavailableError, load_dataset, load_errata
    from benchmarks.datasets.errata import describe_errata
    from benchmarks.datasets.profile import describe
    from benchmarks.harness.inputs import load_benchmark_dataset

    if any(a.startswith("-") or "=" not in a for a in argv):
        print("usage: memforest-bench data dataset=<name> [dataset.path=FILE] [dataset.errata=FILE] "
              "[dataset.<key>=<value>...]", file=sys.stderr)
        return 2
    try:
        node = schema.bench_config(compose_config(argv)).dataset
        dataset = load_benchmark_dataset(node)
        errata = load_errata(node.errata) if node.errata else None
        applied = dataset.errata
        if node.errata and applied is None:  # the errata checked against the file, on the loaded questions
            loaded = [instance.instance_id for instance in dataset.instances]
            applied = load_dataset(node.name, path=node.path, instance_ids=loaded, cache_dir=node.cache_dir,
                                   include_adversarial=node.include_adversarial, errata=node.errata).errata
    except (HydraException, DatasetError, DatasetUnavailableError, ValueError) as exc:
        print(f"memforest-bench data: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    print(describe(dataset), end="")
    if errata is not None:
        print(describe_errata(errata, applied), end="")
    return 1 if dataset.failures else 0


def report_command(argv: Sequence[str]) -> int:
    """Write the HTML page of a run directory or a sweep's finished runs and print where it is."""
    from benchmarks.harness.html_report import PAGE_NAME, write_report

    args = list(argv)
    out = None
    if "--out" in args:
        at = args.index("--out")
        if at + 1 >= len(args):
            print("memforest-bench report: --out needs a file name", file=sys.stderr)
            return 2
        out = Path(args[at + 1])
        del args[at:at + 2]
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: memforest-bench report RUN_DIR_OR_SWEEP [--out FILE]", file=sys.stderr)
        return 2
    path = Path(args[0])
    if not path.is_dir():
        print(f"memforest-bench report: {path} is not a directory", file=sys.stderr)
        return 2
    runs = [path] if (path / "run.json").exists() else sweep_runs(path)[0]
    try:
        target = write_report(runs, out or path / PAGE_NAME, f"MemForest report: {path.resolve().name}")
    except (OSError, ValueError, KeyError) as exc:
        print(f"memforest-bench report: {exc}", file=sys.stderr)
        return 1
    print(f"report: {target}")
    return 0


NOISY_LIBRARIES = ("sentence_transformers", "transformers", "huggingface_hub", "mem0", "urllib3")


def quiet_libraries(argv: Sequence[str]) -> list[str]:
    """The libraries' own log lines and weight-loading bars are off unless `-v` (or `--verbose`) asks for
    them: `-v` becomes Hydra's `hydra.verbose=[...]` for those loggers. The bars follow
    HF_HUB_DISABLE_PROGRESS_BARS, set here for this process only where the caller has not set it."""
    verbose = any(a in ("-v", "--verbose") for a in argv)
    args = [a for a in argv if a not in ("-v", "--verbose")]
    if verbose:
        return [*args, f"hydra.verbose=[{','.join(NOISY_LIBRARIES)}]"]
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    return args


def shown_multirun(argv: Sequence[str]) -> list[str]:
    """`-m ... --cfg X`, which Hydra refuses (one command at a time), as `--cfg X ... hydra.mode=MULTIRUN`:
    the configuration a sweep's jobs are composed with, launcher included."""
    flags = set(argv)
    showing = bool(flags & {"-c", "--cfg"}) or any(a.startswith("--cfg=") for a in argv)
    if not (showing and flags & {"-m", "--multirun"}):
        return list(argv)
    args = [a for a in argv if a not in ("-m", "--multirun")]
    at = next((i for i, a in enumerate(args) if "=" in a and not a.startswith("-")), len(args))
    return [*args[:at], "hydra.mode=MULTIRUN", *args[at:]]  # beside the other overrides, for argparse


def main() -> None:
    """Console entry point: `judge`, `compare`, `report`, `write-path` and `data` are handled before Hydra
    parses the command line."""
    if len(sys.argv) > 1 and sys.argv[1] == "judge":
        sys.exit(judge_command(sys.argv[2:]))
    if len(sys.argv) > 1 and sys.argv[1] == "compare":
        sys.exit(compare_command(sys.argv[2:]))
    if len(sys.argv) > 1 and sys.argv[1] == "data":
        sys.exit(data_command(sys.argv[2:]))
    if len(sys.argv) > 1 and sys.argv[1] == "report":
        sys.exit(report_command(sys.argv[2:]))
    if len(sys.argv) > 1 and sys.argv[1] == "write-path":
        from benchmarks.harness.write_path import command

        sys.exit(command(sys.argv[2:]))
    sys.argv[1:] = quiet_libraries(shown_multirun(sys.argv[1:]))
    FAILED_RUNS.clear()  # what this invocation's jobs report, not an earlier one's in this process
    DATASET_ERRORS.clear()
    STOPPED_RUNS.clear()
    run_app()
    for run_dir, failed in FAILED_RUNS:
        print(f"memforest-bench: {failed} instance(s) failed in {run_dir} (listed in its summary.md)",
              file=sys.stderr)
    for run_dir, why in STOPPED_RUNS:
        print(f"memforest-bench: {run_dir} stopped, the model is gone ({why}); nothing was recorded for "
              f"the questions left: the same command resumes it", file=sys.stderr)
    if FAILED_RUNS or DATASET_ERRORS or STOPPED_RUNS:
        sys.exit(1)


if __name__ == "__main__":
    main()
