"""Ingest the bundled example with the configured models and answer a question about it."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from importlib import resources

from memforest.api import MemForest
from memforest.commands import load_config
from memforest.config import QUERY_MODES
from memforest.errors import MemForestError
from memforest.llm.calllog import format_summary, summarize

QUESTION = "Where did I live before moving to Miami?"


def example_sessions() -> list[dict]:
    return json.loads(resources.files("memforest.data").joinpath("example_sessions.json").read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store", default=None, help="store directory (default: a temporary one)")
    parser.add_argument("--mode", choices=QUERY_MODES, default="embed")
    parser.add_argument("-o", "--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    store = args.store or tempfile.mkdtemp(prefix="memforest-demo-")
    with MemForest(store, load_config(None, args.set)) as forest:
        t = time.perf_counter()
        report = forest.ingest_sessions("demo", example_sessions())
        print(f"ingested {report.sessions} sessions ({report.turns} turns, {report.cells} cells) in "
              f"{time.perf_counter() - t:.1f} s: {report.new_facts} facts, {report.trees_touched} trees")
        result = forest.query("demo", QUESTION, date="2024-08-01", mode=args.mode)
        print(f"\nquestion: {QUESTION}\nanswer: {result.answer}\nevidence:")
        for e in result.evidence:
            print(f"  [{e.time}] ({e.via}, {e.tree_id}) {' '.join(e.text.split())[:160]}")
        print("\nLLM calls:\n" + format_summary(summarize(forest.log.records)))
    print(f"\nstore: {store}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except MemForestError as e:
        print(f"memforest demo: error: {e}", file=sys.stderr)
        sys.exit(2)
