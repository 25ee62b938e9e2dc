"""Store commands of the `memforest` command line."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from memforest.config import MemForestConfig, from_dict
from memforest.errors import InputError


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = _store_parser(sub, "ingest", "ingest sessions from a JSON file (a list of sessions)")
    p.add_argument("file")
    p.set_defaults(func=_ingest)
    p = _store_parser(sub, "show", "print facts, trees and counts")
    p.add_argument("--tree", default=None)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_show)
    p = _store_parser(sub, "ask", "answer a question from memory, with evidence and a trace")
    p.add_argument("question")
    p.add_argument("--date", default=None)
    p.add_argument("--mode", choices=("embed", "planner"), default=None)
    p.add_argument("--no-answer", action="store_true", help="retrieve evidence only")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_ask)


def _store_parser(sub: argparse._SubParsersAction, name: str, help_: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help_)
    p.add_argument("--store", required=True, help="store directory")
    p.add_argument("--user", required=True)
    p.add_argument("--config", default=None, help="YAML or JSON file of MemForestConfig overrides")
    p.add_argument("-o", "--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one option, e.g. -o llm.backend=openai -o llm.base_url=http://127.0.0.1:8000/v1")
    p.add_argument("--calls", default=None, help="append this command's LLM calls to a JSONL call log")
    return p


def load_config(path: str | None, overrides: list[str]) -> MemForestConfig:
    base = OmegaConf.create({})
    if path:
        if not Path(path).exists():
            raise InputError(f"config file {path} does not exist")
        base = OmegaConf.load(path)
    for item in overrides:
        if "=" not in item:
            raise InputError(f"override {item!r} is not KEY=VALUE")
    merged = OmegaConf.merge(base, OmegaConf.from_dotlist(overrides))
    return from_dict(MemForestConfig, OmegaConf.to_container(merged, resolve=True))  # type: ignore[arg-type]


def open_forest(args: argparse.Namespace, generate: bool = True) -> Any:
    from memforest.api import MemForest
    from memforest.llm.calllog import CallLog

    cfg = load_config(args.config, args.set)
    return MemForest(args.store, cfg, call_log=CallLog(args.calls) if args.calls else None, generate=generate)


def _ingest(args: argparse.Namespace) -> int:
    try:
        data = json.loads(Path(args.file).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{args.file} does not exist") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f"{args.file} is not valid JSON: {e}") from None
    if not isinstance(data, list):
        raise InputError(f"{args.file} must hold a list of sessions")
    with open_forest(args) as forest:
        report = forest.ingest_sessions(args.user, data)
    print(json.dumps(report.to_dict(), indent=2))
    return 0


def _show(args: argparse.Namespace) -> int:
    from memforest.inspect import describe, format_text

    with open_forest(args, generate=False) as forest:
        desc = describe(forest.snapshot(args.user).state, args.tree)
    print(json.dumps(desc, indent=2, ensure_ascii=False) if args.json else format_text(desc))
    return 0


def _ask(args: argparse.Namespace) -> int:
    with open_forest(args) as forest:
        result = forest.query(args.user, args.question, date=args.date, mode=args.mode, answer=not args.no_answer)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
        return 0
    print(f"answer: {result.answer}")
    print("evidence:")
    for e in result.evidence:
        print(f"  [{e.time}] ({e.kind} via {e.via}, {e.tree_id}) {' '.join(e.text.split())[:200]}")
    lat = ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in result.trace["latency"].items())
    print(f"latency: {lat}")
    print(f"llm calls: {result.trace['llm_calls']['calls']}")
    return 0
