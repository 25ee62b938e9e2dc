"""Store commands of the `memforest` command line."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from memforest.config import (
    QUERY_MODES,
    MemForestConfig,
    dotted_overrides,
    from_dict,
    with_host_policy,
    with_overrides,
)
from memforest.errors import ConfigError, InputError


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
    p.add_argument("--mode", choices=QUERY_MODES, default=None)
    p.add_argument("--no-answer", action="store_true", help="retrieve evidence only")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_ask)
    p = _store_parser(sub, "delete-session", "delete a session and everything derived only from it")
    p.add_argument("session_id")
    p.set_defaults(func=lambda a: _run(a, lambda f: f.delete_session(a.user, a.session_id)))
    p = _store_parser(sub, "correct-session",
                      "replace a stored session with the one in FILE (one session object)")
    p.add_argument("file")
    p.set_defaults(func=lambda a: _run(a, lambda f: f.correct_session(a.user, _read_json(a.file, dict))))
    p = _store_parser(sub, "check", "check invariants, placements and index rows", user_flag=True)
    p.set_defaults(func=_check)
    p = _store_parser(sub, "migrate", "bring a store written by an older MemForest up to this one: "
                      "its schema, and the sentence vectors of cells stored without them")
    p.add_argument("--batch", type=_positive, default=None, metavar="CELLS",
                   help="cells embedded and written per transaction (default 256)")
    p.set_defaults(func=_migrate)
    p = _store_parser(sub, "refresh", "redo failed extractions and degraded summaries")
    p.set_defaults(func=lambda a: _run(a, lambda f: f.refresh(a.user).to_dict()))
    p = _store_parser(sub, "merge", "merge users' forests into a target user", user_flag=False)
    p.add_argument("--from", dest="sources", required=True, help="comma-separated source users")
    p.add_argument("--to", dest="target", required=True)
    p.add_argument("--from-store", default=None, help="read the sources from another store directory")
    p.set_defaults(func=lambda a: _run(a,
                                       lambda f: f.merge(_source_users(a.sources), a.target, a.from_store)))


def _store_parser(
    sub: argparse._SubParsersAction, name: str, help_: str, user_flag: bool = True
) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help_)
    p.add_argument("--store", required=True, help="store directory")
    if user_flag:
        p.add_argument("--user", required=True)
    p.add_argument("--config", default=None, help="YAML or JSON file of MemForestConfig overrides")
    p.add_argument("-o", "--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one option, e.g. -o llm.backend=openai -o "
                        "llm.base_url=http://127.0.0.1:8000/v1")
    p.add_argument("--calls", default=None, help="append this command's LLM calls to a JSONL call log")
    return p


def load_config(path: str | None, overrides: list[str]) -> MemForestConfig:
    """MemForestConfig from an optional YAML/JSON file of overrides, then `-o KEY=VALUE` items, with the
    heap policy of a process that owns itself where they leave it open (`with_host_policy`)."""
    base = from_dict(MemForestConfig, _read_config_file(path) if path else {})
    return with_host_policy(with_overrides(base, dotted_overrides(overrides, _yaml_scalar))).validate()


def _read_config_file(path: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (FileNotFoundError, IsADirectoryError):
        raise InputError(f"config file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"config file {path} cannot be read: {e}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {path} is not valid YAML: {' '.join(str(e).split())}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of options")
    return data


def _yaml_scalar(text: str) -> Any:
    try:
        return yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError:
        return text


def open_forest(args: argparse.Namespace, generate: bool = True) -> Any:
    from memforest.api import MemForest
    from memforest.llm.calllog import CallLog

    cfg = load_config(args.config, args.set)
    return MemForest(args.store, cfg, call_log=CallLog(args.calls) if args.calls else None, generate=generate)


def diagnose(args: argparse.Namespace, exc: Exception) -> Exception:
    """When a store command fails unexpectedly, a StoreError naming the damage if one of the users it
    touched has a damaged store; otherwise `exc` itself."""
    from memforest.check import damaged
    from memforest.sessions import check_id
    from memforest.store.db import UserDB

    store = getattr(args, "store", None)
    if store is None:
        return exc
    users = [getattr(args, "user", None), getattr(args, "target", None)]
    users += (getattr(args, "sources", None) or "").split(",")
    for user in users:
        try:
            path = Path(store) / "users" / check_id((user or "").strip(), "user") / "memory.sqlite"
        except (InputError, TypeError):
            continue
        if path.is_file():
            found = damaged(exc, user.strip(), UserDB(path))  # type: ignore[union-attr]
            if found is not exc:
                return found  # type: ignore[return-value]
    return exc


def _source_users(text: str) -> list[str]:
    users = [u.strip() for u in text.split(",") if u.strip()]
    if not users:
        raise InputError("merge needs at least one source user (--from A,B)")
    return users


def _read_json(path: str, kind: type) -> Any:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (FileNotFoundError, IsADirectoryError):
        raise InputError(f"{path} does not exist") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f"{path} is not valid JSON: {e}") from None
    except RecursionError:
        raise InputError(f"{path} is nested too deeply to be a list of sessions") from None
    if not isinstance(data, kind):
        raise InputError(f"{path} must hold a JSON {'list of sessions' if kind is list else 'object'}")
    return data


def _run(args: argparse.Namespace, action: Any) -> int:
    with open_forest(args) as forest:
        print(json.dumps(action(forest), indent=2, ensure_ascii=False, default=str))
    return 0


def _check(args: argparse.Namespace) -> int:
    with open_forest(args, generate=False) as forest:
        report = forest.check(args.user)
    print(json.dumps(report, indent=2))
    return 0 if report["ok"] else 1


def _migrate(args: argparse.Namespace) -> int:
    from memforest.store.backfill import BACKFILL_BATCH, backfill
    from memforest.store.db import UserDB

    with open_forest(args, generate=False) as forest:
        db = UserDB(forest.user_dir(args.user) / "memory.sqlite")
        report = backfill(db, args.user, forest.embedder, forest.config.tree.leaf_words,
                          args.batch or BACKFILL_BATCH)
    print(json.dumps(report.to_dict(), indent=2))
    return 0


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, not {text!r}")
    return value


def _ingest(args: argparse.Namespace) -> int:
    data = _read_json(args.file, list)
    with open_forest(args) as forest:
        report = forest.ingest_sessions(args.user, data)
    print(json.dumps(report.to_dict(), indent=2))
    if report.turns_dropped:
        print(f"memforest: {report.turns_dropped} turn(s) with nothing readable left out of "
              "memory (the other turns keep their numbers)", file=sys.stderr)
    return 0


def _show(args: argparse.Namespace) -> int:
    from memforest.describe import describe, format_text

    with open_forest(args, generate=False) as forest:
        desc = describe(forest.snapshot(args.user).state, args.tree)
    print(json.dumps(desc, indent=2, ensure_ascii=False) if args.json else format_text(desc))
    return 0


def _ask(args: argparse.Namespace) -> int:
    with open_forest(args) as forest:
        result = forest.query(args.user, args.question, date=args.date, mode=args.mode,
                              answer=not args.no_answer)
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
