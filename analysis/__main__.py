"""`python -m analysis RESULTS [--out paper]`: every paper table and figure from a results directory
(what `make paper RESULTS=dir` runs). Writes `<out>/index.md` listing the artifacts written."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from analysis.load import Results

ARTIFACTS = (
    "write_path", "stage_breakdown", "query_latency", "accuracy", "passk", "migration",
    "mechanism_scaling", "evidence_budget", "chunk_size", "ablation_tree_families", "ablation_retrieval",
)


def generate(results_dir: str | Path, out: str | Path, only: Sequence[str] = ARTIFACTS) -> dict[str, list[Path]]:
    """Write every artifact of `only` into `out`; the paths written, by artifact."""
    results = Results.scan(results_dir)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    for name in only:
        module = importlib.import_module(f"analysis.artifacts.{name}")
        written[name] = module.make(results, out)
    lines = [f"# Paper artifacts from {results_dir}", "",
             f"{len(results.run_dirs)} run directories, {len(results.bench_files)} microbenchmark records.", ""]
    for name, paths in written.items():
        lines.append(f"- {name}: " + ", ".join(p.name for p in paths))
    (out / "index.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
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
    total = sum(len(paths) for paths in written.values())
    print(f"{total} files for {len(written)} artifacts written to {args.out}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
