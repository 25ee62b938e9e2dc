"""Small helpers shared by the baseline adapters: import checks, offline hygiene, rendering, CPU time."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

from baselines.base import Session, SystemUnavailable, Turn
from baselines.worker import TELEMETRY_ENV, UNSAFE_ID

_quiet_lock = threading.Lock()
_quiet_depth = 0
_quiet_saved: dict[str, str | None] = {}


@contextlib.contextmanager
def quiet_environment() -> Iterator[None]:
    """Telemetry off (`TELEMETRY_ENV`) while an adapter imports its library and builds its objects, where
    the libraries read those settings; the process's own values (or their absence) come back when the
    outermost block ends, whatever the library set meanwhile. Nested and concurrent blocks share one
    application, so adapters built in parallel threads do not restore each other's values early."""
    global _quiet_depth
    with _quiet_lock:
        if _quiet_depth == 0:
            _quiet_saved.clear()
            _quiet_saved.update({name: os.environ.get(name) for name in TELEMETRY_ENV})
            os.environ.update(TELEMETRY_ENV)
        _quiet_depth += 1
    try:
        yield
    finally:
        with _quiet_lock:
            _quiet_depth -= 1
            if _quiet_depth == 0:
                for name, value in _quiet_saved.items():
                    if value is None:
                        os.environ.pop(name, None)
                    else:
                        os.environ[name] = value


def require(module: str, system: str, extra: str) -> None:
    """Raise SystemUnavailable with an install hint when `module` cannot be imported."""
    if importlib.util.find_spec(module) is None:
        raise SystemUnavailable(f"{system}: python package {module!r} is not installed; "
                                f"pip install 'memforest[{extra}]' (see baselines/README.md)")


def safe_id(text: str, limit: int = 60) -> str:
    out = UNSAFE_ID.sub("_", text)[:limit] or "x"
    return out if out[0].isalpha() else "m" + out


def day(when: datetime | None) -> str | None:
    return when.strftime("%Y-%m-%d %H:%M") if when else None


def speaker_of(turn: Turn) -> str:
    return turn.speaker or turn.role


def render_turn(turn: Turn) -> str:
    """`speaker: text` on one line (the role when the turn has no named speaker)."""
    return f"{speaker_of(turn)}: {' '.join(turn.content.split())}"


def named_text(turn: Turn) -> str:
    """The text a library gets as a message's content: a named speaker (LoCoMo) attached once as a
    `Name: ` prefix, the text alone for user/assistant turns, whose role says who spoke."""
    return f"{turn.speaker}: {turn.content}" if turn.speaker else turn.content


def document_turns(session: Session, user_only: bool) -> list[Turn]:
    """The non-empty turns that make a session's document: its user turns without a named speaker when
    `user_only` and it has any (MemPalace's raw mode), else all of them."""
    turns = [t for t in session.turns if t.content.strip()]
    users = [t for t in turns if t.role == "user" and not t.speaker]
    return users if user_only and users else turns


def raw_document(turns: Sequence[Turn]) -> str:
    """MemPalace raw mode's indexed document of a session's document turns (`document_turns`): a user
    turn's text alone (LongMemEval, `benchmarks/longmemeval_bench.py`), a named speaker's turn as
    `Name said, "text"` (LoCoMo, `benchmarks/locomo_bench.py`), any other turn `role: text`."""
    return "\n".join(f'{t.speaker} said, "{t.content}"' if t.speaker
                     else t.content if t.role == "user" else render_turn(t) for t in turns)


def session_text(session: Session) -> str:
    """A whole session as an answer model reads it: every non-empty turn once, its speaker once
    (`speaker: text`, the role for user/assistant data)."""
    return "\n".join(render_turn(t) for t in session.turns if t.content.strip())


# What the answer model reads of a ranked raw-mode session: the whole session, or the indexed document.
ANSWER_DOCUMENTS = ("session", "indexed")


def named_speakers(sessions: Sequence[Session]) -> list[str]:
    """The named speakers of a conversation (LoCoMo), in order of first turn; empty for user/assistant
    data."""
    return list(dict.fromkeys(t.speaker for s in sessions for t in s.turns if t.speaker))


# The served `/v1/embeddings` embeds as a question with this extra field (the query instruction of the
# run's embedder applies), as a stored passage without it.
QUERY_INPUT = {"input_type": "query"}


@contextlib.contextmanager
def query_embeddings(client: Any) -> Iterator[None]:
    """While active, every embeddings request of the OpenAI client `client` (sync or async) asks the
    served endpoint for query embeddings: a baseline's questions get the treatment MemForest's get."""
    resource = client.embeddings
    original = resource.create
    resource.create = functools.partial(original, extra_body=QUERY_INPUT)
    try:
        yield
    finally:
        resource.create = original


def chat_role(turn: Turn) -> str:
    """OpenAI chat role for a dataset turn: LoCoMo's named speakers become `user` messages."""
    return "assistant" if turn.role == "assistant" else "user"


def chunks(items: Sequence[Any], size: int | None) -> Iterator[Sequence[Any]]:
    if not size or size <= 0:
        yield items
        return
    for start in range(0, len(items), size):
        yield items[start : start + size]


class PhaseClock:
    """Wall and process-CPU seconds of a block: the in-process work a baseline does on its own
    (its embedding, indexing and bookkeeping), reported beside the proxied model calls."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def measure(self, phase: str) -> Iterator[None]:
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.seconds[f"{phase}_wall_seconds"] = round(time.perf_counter() - wall, 4)
            self.seconds[f"{phase}_cpu_seconds"] = round(time.process_time() - cpu, 4)

    def of(self, phase: str) -> dict[str, float]:
        """The last measurement of `phase`; CPU seconds cover every thread of this process (including
        an in-process embeddings server when one is used)."""
        return {k: v for k, v in self.seconds.items() if k.startswith(f"{phase}_")}
