"""`memforest` command line: ingest, show, ask, lifecycle operations and call-log summaries."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from memforest.errors import MemForestError


def _cmd_calls(args: argparse.Namespace) -> int:
    from memforest.llm.calllog import format_summary, read_log, summarize

    summary = summarize(read_log(args.log))
    print(json.dumps(summary, indent=2) if args.json else format_summary(summary))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memforest", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("calls", help="summarise a JSONL call log")
    p.add_argument("log")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_calls)
    from memforest import commands

    commands.add_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except MemForestError as e:
        print(f"memforest: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
