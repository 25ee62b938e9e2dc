"""`memforest` command line: ingest, show, ask, lifecycle operations and call-log summaries.

A command exits 0 only when its operation completed (for a write: committed). Any failure prints one
line naming the problem and exits non-zero: 2 for a refused input, option or store state, 1 for an
I/O or internal failure, 130 when interrupted. `--debug` shows the traceback instead."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sqlite3
import sys
import threading
import traceback
from collections.abc import Sequence

from memforest.errors import InputError, MemForestError, redact
from memforest.store.space import ROOM_ERRNOS


def _cmd_calls(args: argparse.Namespace) -> int:
    from memforest.llm.calllog import format_summary, read_log, summarize

    try:
        records = read_log(args.log)
    except (FileNotFoundError, IsADirectoryError):
        raise InputError(f"call log {args.log} does not exist") from None
    except UnicodeDecodeError as e:
        raise InputError(f"call log {args.log} is not a text file: {e.reason}") from None
    summary = summarize(records)
    print(json.dumps(summary, indent=2) if args.json else format_summary(summary))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memforest", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--debug", action="store_true", help="show the traceback of a failure")
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
    _keep_writes_failing_not_fatal()
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print("memforest: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of our output went away (`| head`): not a store problem
        _quiet_stdout()
        return 141  # as a shell reports a process ended by SIGPIPE
    except Exception as e:
        if args.debug:
            traceback.print_exc()
        if not isinstance(e, MemForestError) and getattr(args, "store", None):
            from memforest.commands import diagnose

            e = diagnose(args, e)
        code, message = failure(e, getattr(args, "store", None))
        print(f"memforest: error: {' '.join(redact(message).split())}", file=sys.stderr)
        return code


def _quiet_stdout() -> None:
    """Point standard output at /dev/null, so that the interpreter's flush at exit finds no closed pipe
    (and prints no second error)."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def _keep_writes_failing_not_fatal() -> None:
    """Past a file-size limit (RLIMIT_FSIZE) a write raises SIGXFSZ, which kills the process by
    default: the command ignores it (in its own process only; the library never touches signals),
    so the write fails with EFBIG instead and is reported as a failure that wrote nothing."""
    if hasattr(signal, "SIGXFSZ") and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def failure(exc: Exception, store: str | None) -> tuple[int, str]:
    """Exit code and one-line message for a failed command."""
    if isinstance(exc, MemForestError):
        return 2, str(exc)
    where = f" in the store at {store}" if store else ""
    if isinstance(exc, sqlite3.DatabaseError):
        return 2, f"the database{where} is damaged or not a MemForest store ({exc}); run `memforest check`"
    if isinstance(exc, sqlite3.Error):
        return 1, f"database error{where}: {exc}"
    if isinstance(exc, OSError):
        target = f": {exc.filename}" if exc.filename else where
        if exc.errno in ROOM_ERRNOS:
            return 1, f"no space left to write: {ROOM_ERRNOS[exc.errno]}{target}; nothing was written"
        return 1, f"{exc.strerror or type(exc).__name__}{target}"
    return 1, f"internal error: {type(exc).__name__}: {exc} (run with --debug for the traceback)"


if __name__ == "__main__":
    sys.exit(main())
