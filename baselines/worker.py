"""Drive a memory system that lives in another Python environment through a subprocess worker.

The protocol is JSON lines over the worker's stdin/stdout, one request then one response:

    request   {"id": 3, "op": "hello",    "options": {...}}          -> {"name": ..., "version": ...}
              {"id": 4, "op": "reset",    "instance_id": "...", "workdir": "/abs/path"}
              {"id": 5, "op": "ingest",   "sessions": [SESSION, ...]} -> build statistics (a dict)
              {"id": 6, "op": "retrieve", "question": "...", "when": "2023-05-30T23:40:00" | null}
                  -> {"context", "evidence", "latency", "trace", "layout"}
              {"id": 7, "op": "close"}                                 (the worker then exits)
    response  {"id": 5, "ok": true, "result": ...}
              or  {"id": 5, "ok": false, "error": "...", "traceback": "..."}

    SESSION   {"session_id", "timestamp" (ISO),
               "turns": [{"role", "content", "timestamp", "turn_id", "speaker"}]}
    evidence  [{"text", "time", "session_ids", "turn_ids", "score", "section", "rank"}]
              (ids as given in SESSION; `section` and `rank` as `baselines.base.EvidenceItem` has them)

Build statistics may hold `input`: what of the turns sent reached the system's store, with the fields
of `baselines.base.InputKept` (`given`, `kept`, `unit`, `stored`, `lost`, `upstream`); the harness checks
that the counts add up and that `given` is the number of turns it sent. A retrieval may hold `layout`
(the keys of `LAYOUT`): how the system lays out its evidence items. The harness then renders the
context from the items with it (`render_layout`), and so any subset of them that a token budget keeps,
so a worker that sends a layout need not send `context`. A worker that sends neither (written before
these fields) still works: its `context` as sent, else one line per item, and no input account.

Gold labels (`has_answer`) are never sent. A worker script implements a handler object with methods
`hello(options)`, `reset(instance_id, workdir)`, `ingest(sessions)`, `retrieve(question, when)`,
`close()` and calls `serve(handler)`. It loads this file by path (see `tests/fixtures/echo_worker.py`),
so this module imports only the standard library at import time: workers run in environments that
have neither this project nor its dependencies.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from baselines.base import EvidenceItem, Retrieval, Session

OPS = ("hello", "reset", "ingest", "retrieve", "close")
# What a baseline's library may not take in an id (a user, store or group id): anything but letters,
# digits, `_` and `-`.
UNSAFE_ID = re.compile(r"[^A-Za-z0-9_-]")

# Telemetry off, for every library a baseline imports: in every worker's environment, and in the harness's
# own process only while an adapter imports its library and builds its objects
# (`baselines.common.quiet_environment`, which restores the process's values afterwards).
TELEMETRY_ENV = {
    "MEM0_TELEMETRY": "False",
    "ANONYMIZED_TELEMETRY": "False",
    "GRAPHITI_TELEMETRY_ENABLED": "false",
    "POSTHOG_DISABLED": "1",
    "DO_NOT_TRACK": "1",
}
# A worker's whole environment adds no hub downloads (its library loads nothing by hub id) and quiet
# tokenizers. The harness's process never gets these: its own models may still need the hub.
QUIET_ENV = {
    **TELEMETRY_ENV,
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


# How a system lays out its evidence items as the answer model reads them: `head`, then the items grouped
# by their `section` in order of first appearance, each group under `section` (a template of
# `{section}`; None: no headers and one group), its items written by `item` (a template of `{text}`,
# `{time}`, `{section}`) and joined by `join`, the groups joined by `sections_join`, then `tail`;
# `empty` (when not None) is the whole context of no items.
LAYOUT: dict[str, str | None] = {"head": "", "item": "{text}", "join": "\n", "section": None,
                                 "sections_join": "\n\n", "tail": "", "empty": None}


def render_layout(layout: Mapping[str, Any], items: Sequence[Mapping[str, Any]]) -> str:
    """The context of evidence `items` (dicts with `text`, `time`, `section`, in list order) laid out
    by `layout` (LAYOUT's keys, its values where absent)."""
    unknown = sorted(set(layout) - set(LAYOUT))
    if unknown:
        raise ValueError(f"unknown layout keys {unknown}; a layout has {sorted(LAYOUT)}")
    spec = {**LAYOUT, **layout}
    if not items and spec["empty"] is not None:
        return str(spec["empty"])
    header, template = spec["section"], str(spec["item"])
    groups: dict[str | None, list[str]] = {}
    for item in items:
        fields = {key: str(item.get(key) or "") for key in ("text", "time", "section")}
        groups.setdefault(fields["section"] if header is not None else None, []).append(
            template.format(**fields))
    parts = [(header.format(section=name) if header is not None else "") + str(spec["join"]).join(lines)
             for name, lines in groups.items()]
    return str(spec["head"]) + str(spec["sections_join"]).join(parts) + str(spec["tail"])


# ---------------------------------------------------------------- the worker side


def serve(handler: Any, stdin: IO[str] | None = None, stdout: IO[str] | None = None) -> None:
    """Answer requests until `close` or end of input. Anything the system prints (from Python or C)
    goes to stderr, so that stdout carries protocol lines only."""
    if stdout is None:
        stdout = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
        os.dup2(2, 1)
        sys.stdout = sys.stderr
    stdin = stdin or sys.stdin
    for line in stdin:
        if not line.strip():
            continue
        request: dict[str, Any] = {}
        try:
            request = json.loads(line)
            op = request.get("op")
            if op not in OPS:
                raise ValueError(f"unknown op {op!r}")
            args = {k: v for k, v in request.items() if k not in ("id", "op")}
            reply = {"id": request.get("id"), "ok": True, "result": getattr(handler, op)(**args)}
        except Exception as exc:
            reply = {"id": request.get("id"), "ok": False, "error": f"{type(exc).__name__}: {exc}",
                     "traceback": traceback.format_exc(limit=20)}
        stdout.write(json.dumps(reply, default=str) + "\n")
        stdout.flush()
        if request.get("op") == "close":
            return


# ---------------------------------------------------------------- the harness side


class WorkerError(RuntimeError):
    """The worker answered a request with an error, or died."""


def session_payload(session: Session) -> dict[str, Any]:
    return {
        "session_id": session.session_id,
        "timestamp": session.timestamp.isoformat(),
        "speakers": list(session.speakers),
        "turns": [{"role": t.role, "content": t.content, "turn_id": t.turn_id, "speaker": t.speaker,
                   "timestamp": t.timestamp.isoformat() if t.timestamp else None} for t in session.turns],
    }


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a live process and its waited-for children (Linux /proc), else None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _parse_reply(line: str) -> dict[str, Any] | None:
    """A protocol line, or None for anything else a worker printed before `serve` took stdout over."""
    try:
        reply = json.loads(line)
    except ValueError:
        return None
    return reply if isinstance(reply, dict) and "ok" in reply else None


class WorkerSystem:
    """A MemorySystem whose work happens in `python script` (another interpreter, another environment).

    Constructing it starts the worker and sends `hello` with `options`; a missing interpreter or script,
    or a worker that cannot start (e.g. its package is not importable there), raises SystemUnavailable
    with the reason, so the harness reports the system as skipped."""

    def __init__(self, name: str, python: str | None, script: str | Path,
                 options: Mapping[str, Any] | None = None, *, cwd: str | Path | None = None,
                 pythonpath: Sequence[str | Path] = (), env: Mapping[str, str] | None = None,
                 timeout_s: float = 6 * 3600.0, log_path: str | Path | None = None) -> None:
        from baselines.base import SystemUnavailable

        self.name = name
        self.timeout_s = timeout_s
        if not python:
            raise SystemUnavailable(f"{name}: no Python interpreter configured for its environment")
        if not (Path(python).is_file() and os.access(python, os.X_OK)):
            raise SystemUnavailable(f"{name}: interpreter {python} does not exist or is not executable")
        if not Path(script).is_file():
            raise SystemUnavailable(f"{name}: worker script {script} not found")
        if cwd is not None and not Path(cwd).is_dir():
            raise SystemUnavailable(f"{name}: checkout {cwd} not found")
        child_env = {**os.environ, **QUIET_ENV, "PYTHONUNBUFFERED": "1", **dict(env or {})}
        paths = [str(p) for p in pythonpath] + [p for p in [child_env.get("PYTHONPATH")] if p]
        if paths:
            child_env["PYTHONPATH"] = os.pathsep.join(paths)
        self._command = [python, str(script)]
        self._cwd, self._env, self._options = cwd, child_env, dict(options or {})
        self._log_path = Path(log_path) if log_path else None
        self._proc: subprocess.Popen[str] | None = None
        self._log: IO[bytes] | None = None
        self._ids = 0
        self.info: Any = None
        self.runtime_settings: dict[str, Any] = {}  # what the worker's environment turned out to allow
        self.layout: dict[str, Any] | None = None  # the last retrieval's layout (`LAYOUT`), if it sent one
        try:
            self._start()
        except WorkerError as exc:
            raise SystemUnavailable(f"{name}: worker failed to start: {exc}") from exc

    def _start(self) -> None:
        """Start the worker process and say hello (the harness closes systems between instances)."""
        if self._log_path is not None:
            self._log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = self._log_path.open("ab")
        self._proc = subprocess.Popen(self._command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=self._log, cwd=self._cwd, env=self._env, text=True,
                                      encoding="utf-8")
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, args=(self._proc, self._lines), daemon=True,
                         name=f"{self.name}-worker-reader").start()
        try:
            self.info = self.call("hello", options=self._options, timeout_s=600.0)
        except WorkerError:
            self.close()
            raise

    @staticmethod
    def _read(proc: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    def call(self, op: str, timeout_s: float | None = None, **args: Any) -> Any:
        if self._proc is None:
            raise WorkerError(f"{self.name}: worker is not running")
        if self._proc.poll() is not None:
            raise WorkerError(f"{self.name}: worker exited with {self._proc.returncode}{self._tail()}")
        self._ids += 1
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write(json.dumps({"id": self._ids, "op": op, **args}) + "\n")
            self._proc.stdin.flush()
        except OSError as exc:
            raise WorkerError(f"{self.name}: cannot write to worker: {exc}") from exc
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise WorkerError(f"{self.name}: no answer to {op!r} in "
                                  f"{timeout_s or self.timeout_s} s") from None
            if line is None:
                raise WorkerError(f"{self.name}: worker exited during {op!r} (code "
                                  f"{self._proc.wait()}){self._tail()}")
            reply = _parse_reply(line)
            if reply is not None and reply.get("id") == self._ids:
                break
        if not reply.get("ok"):
            raise WorkerError(f"{self.name}: {op} failed: {reply.get('error')}\n{reply.get('traceback', '')}")
        return reply.get("result")

    def _tail(self) -> str:
        if self._log_path is None or not self._log_path.exists():
            return ""
        return "; its log ends:\n" + self._log_path.read_text(errors="replace")[-1500:]

    def reset(self, instance_id: str, workdir: Path) -> None:
        if self._proc is None or self._proc.poll() is not None:
            self._start()
        Path(workdir).mkdir(parents=True, exist_ok=True)
        self.call("reset", instance_id=instance_id, workdir=str(Path(workdir).resolve()))

    def ingest(self, sessions: Sequence[Session]) -> dict[str, Any]:
        assert self._proc is not None, "reset() first"
        cpu = process_cpu_seconds(self._proc.pid)
        stats = dict(self.call("ingest", sessions=[session_payload(s) for s in sessions]) or {})
        after = process_cpu_seconds(self._proc.pid)
        if cpu is not None and after is not None:
            stats["worker_cpu_seconds"] = round(after - cpu, 3)
        if "input" in stats:
            stats["input"] = self._input(stats["input"], sum(len(s.turns) for s in sessions))
        return stats

    def _input(self, reported: Any, sent: int) -> dict[str, Any]:
        """The worker's account of its input, checked: its counts add up and it was given what was sent."""
        from baselines.base import InputKept

        try:
            account = InputKept(**reported)
        except (TypeError, ValueError) as exc:
            raise WorkerError(f"{self.name}: the worker's input account {reported!r} is malformed: {exc}") \
                from exc
        if account.given != sent:
            raise WorkerError(f"{self.name}: the worker reports {account.given} turns given, {sent} were "
                              "sent")
        return account.to_dict()

    def retrieve(self, question: str, when: datetime | None) -> Retrieval:
        from baselines.base import EvidenceItem, Retrieval

        assert self._proc is not None, "reset() first"
        cpu = process_cpu_seconds(self._proc.pid)
        out = self.call("retrieve", question=question, when=when.isoformat() if when else None)
        after = process_cpu_seconds(self._proc.pid)
        evidence = [EvidenceItem(text=str(e.get("text", "")), time=e.get("time"),
                                 session_ids=[str(s) for s in e.get("session_ids") or []],
                                 turn_ids=[str(t) for t in e.get("turn_ids") or []], score=e.get("score"),
                                 section=e.get("section"), rank=e.get("rank"))
                    for e in out.get("evidence") or []]
        trace = dict(out.get("trace") or {})
        if cpu is not None and after is not None:
            trace["worker_cpu_seconds"] = round(after - cpu, 3)
        layout = out.get("layout")
        self.layout = dict(layout) if isinstance(layout, Mapping) else None
        context = out.get("context") if self.layout is None else None
        return Retrieval(self.render(evidence) if context is None else context, evidence,
                         dict(out.get("latency") or {}), trace)

    def render(self, items: Sequence[EvidenceItem]) -> str:
        """The context of `items` (a subset of the last retrieval's evidence) in the layout the worker
        sent with that retrieval; one line per item when it sent none."""
        from baselines.base import render_evidence

        if self.layout is None:
            return render_evidence(items)
        return render_layout(self.layout, [{"text": e.text, "time": e.time, "section": e.section}
                                           for e in items])

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                self._proc = proc
                with contextlib.suppress(WorkerError):
                    self.call("close", timeout_s=60.0)
                self._proc = None
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=30)
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()
        if self._log is not None:
            self._log.close()
            self._log = None
