"""`python -m analysis RESULTS [--out paper]`: every paper table and figure from a results directory
(what `make paper RESULTS=dir` runs). Writes `<out>/index.md` listing the artifacts written."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from analysis import hints
from analysis.load import Results

log = logging.getLogger("analysis")

ARTIFACTS = (
    "write_path", "stage_breakdown", "query_latency", "accuracy", "passk", "migration",
    "mechanism_scaling", "evidence_budget", "chunk_size", "ablation_tree_families", "ablation_retrieval",
)


class ArtifactsFailed(RuntimeError):
    """Some artifacts could not be made; the others were written."""


def generate(results_dir: str | Path, out: str | Path,
             only: Sequence[str] = ARTIFACTS) -> dict[str, list[Path]]:
    """Write every artifact of `only` into `out`; the paths written, by artifact. An artifact that fails
    is reported (log, index.md) and the others are still made; then ArtifactsFailed is raised."""
    results = Results.scan(results_dir)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, list[Path]] = {}
    failed: dict[str, str] = {}
    for name in only:
        module = importlib.import_module(f"analysis.artifacts.{name}")
        try:
            written[name] = module.make(results, out)
        except Exception as exc:  # one artifact's bad input never hides the others
            log.exception("%s failed", name)
            failed[name] = f"{type(exc).__name__}: {exc}"
    lines = [f"# Paper artifacts from {results_dir}", "",
             f"{len(results.run_dirs)} run directories, {len(results.bench_files)} microbenchmark records.",
             ""]
    lines += [f"- {name}: " + ", ".join(p.name for p in paths) for name, paths in written.items()]
    lines += [f"- {name}: FAILED ({reason})" for name, reason in failed.items()]
    (out / "index.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    if failed:
        raise ArtifactsFailed(f"{len(failed)} artifact(s) failed: {', '.join(failed)} (see "
                              f"{out / 'index.md'})")
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis", description=__doc__)
    parser.add_argument("results", help="a results directory (run directories and microbenchmark records)")
    parser.add_argument("--out", default="paper", help="where to write the tables and figures")
    parser.add_argument("--only", nargs="*", choices=ARTIFACTS, default=list(ARTIFACTS))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        written = generate(args.results, args.out, args.only)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ArtifactsFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    total = sum(len(paths) for paths in written.values())
    print(f"{total} files for {len(written)} artifacts written to {args.out}/")
    for name, command in hints.missing(Results.scan(args.results), args.only).items():
        print(f"missing {name}: no runs; to fill it: {command}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
