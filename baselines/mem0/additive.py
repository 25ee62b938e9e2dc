"""Mem0 2.x (PyPI `mem0ai>=2,<3`) through a subprocess worker in its own environment: 2.x has the same
package name as the 1.x installed here, so the two cannot share one environment."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from baselines.base import Endpoints, EvidenceItem, SystemUnavailable
from baselines.mem0.protocol import NAME_PEOPLE, render_sections
from baselines.worker import WorkerSystem

log = logging.getLogger(__name__)

WORKER = Path(__file__).with_name("additive_worker.py")
INSTALL_HINT = (
    'python -m venv /opt/mem0-2 && /opt/mem0-2/bin/pip install "mem0ai>=2,<3", '
    "then method.system.python=/opt/mem0-2/bin/python"
)


@dataclass(frozen=True)
class Protocol:
    """How an evaluation drives Mem0 on each data shape: on a two-person conversation (LoCoMo),
    `speaker_stores` (one store per speaker, else one store with speaker_a as the user), turns per add
    `speaker_batch_turns`, memories searched per store `speaker_top_k`, and the name-people
    `instruction` on per-speaker stores ("": none); on user/assistant data (LongMemEval), one store,
    `batch_turns` turns per add, `top_k` memories searched."""

    top_k: int
    speaker_top_k: int
    batch_turns: int
    speaker_batch_turns: int
    speaker_stores: bool
    instruction: str


PROTOCOLS = {
    # Mem0's 1.x evaluation scripts (mem0ai/mem0 evaluation/ at b3ede5b7) on 2.x, with 2.x's default
    # search size (20) on a single store.
    "mem0_1x_budgets": Protocol(20, 30, 2, 2, True, NAME_PEOPLE),
    # Mem0's 2.x evaluation, memory-benchmarks (`benchmarks/locomo/run.py`: one store per conversation,
    # speaker_a the user, one turn per add, no instructions; `benchmarks/longmemeval/run.py`: one store,
    # two messages per add; top-k 200 on both; the copy read: baselines/README.md, Fidelity).
    "memory_benchmarks": Protocol(200, 200, 2, 1, False, ""),
}


class Mem0AdditiveSystem(WorkerSystem):
    """The 2.x worker seen from the harness: its retrieval sends the evidence (each memory with its
    section, its speaker's store, and its rank) and the stores' sections in order, and `render` lays out
    the evidence, or any subset of it, as Mem0's evaluation shows it (protocol.render_sections)."""

    sections: tuple[str | None, ...] = ()  # the stores' sections, in order, as the last retrieval sent them

    def call(self, op: str, timeout_s: float | None = None, **args: Any) -> Any:
        out = super().call(op, timeout_s, **args)
        if op == "retrieve":
            self.sections = tuple(out.get("sections") or ())
        return out

    def render(self, items: Sequence[EvidenceItem]) -> str:
        return render_sections(self.sections, ((e.section, e.time, e.text) for e in items))


def mem0_additive_system(
    endpoints: Endpoints,
    *,
    python: str | None = None,
    protocol: str = "mem0_1x_budgets",
    top_k: int | None = None,
    speaker_top_k: int | None = None,
    batch_turns: int | None = None,
    speaker_batch_turns: int | None = None,
    threshold: float = 0.1,
    temperature: float = 0.0,
    max_tokens: int = 2000,
    speaker_stores: bool | None = None,
    instruction: str | None = None,
    evidence_limit: int | None = None,
    log_path: str | Path | None = None,
    name: str = "mem0_additive",
) -> Mem0AdditiveSystem:
    """`python`: the interpreter of an environment with mem0ai 2.x. `protocol` (PROTOCOLS) sets the
    layout and sizes that the options of the same names leave unset (None); `instruction` "" means
    none. `threshold` (2.x's default minimum similarity, 0.1) applies to every search. `evidence_limit`
    keeps only the best that many memories over all stores (the shared budget)."""
    if not python:
        raise SystemUnavailable(
            f"{name}: no interpreter configured (method.system.python); Mem0 2.x needs an "
            f"environment of its own: {INSTALL_HINT}"
        )
    if protocol not in PROTOCOLS:
        raise ValueError(f"{name}: protocol must be one of {sorted(PROTOCOLS)}, not {protocol!r}")
    given = {"top_k": top_k, "speaker_top_k": speaker_top_k, "batch_turns": batch_turns,
             "speaker_batch_turns": speaker_batch_turns, "speaker_stores": speaker_stores,
             "instruction": instruction}
    layout = {k: getattr(PROTOCOLS[protocol], k) if v is None else v for k, v in given.items()}
    options = {
        "llm_base_url": endpoints.base_url,
        "llm_model": endpoints.chat_model,
        "embed_base_url": endpoints.base_url,
        "embed_model": endpoints.embed_model,
        "embed_dims": endpoints.embed_dim,
        "api_key": endpoints.api_key,
        **layout,
        "threshold": threshold,
        "temperature": temperature,
        "max_tokens": max_tokens,
        "evidence_limit": evidence_limit,
    }
    system = Mem0AdditiveSystem(name, python, WORKER, options, log_path=log_path)
    system.runtime_settings = ranking_signals(name, system.info or {})
    return system


def ranking_signals(name: str, info: dict[str, object]) -> dict[str, object]:
    """Which of Mem0 2.x's optional ranking signals are on in the worker's environment, with a loud
    warning for each that is off (its model is missing there)."""
    signals = {"mem0ai": info.get("mem0ai"), "bm25": bool(info.get("fastembed")),
               "entity_boosts": bool(info.get("spacy_model"))}
    missing = {"bm25": "fastembed", "entity_boosts": "spaCy's en_core_web_sm"}
    for signal, package in missing.items():
        if not signals[signal]:
            log.warning("%s: Mem0 2.x runs WITHOUT %s (%s is missing in its environment): semantic "
                        "similarity only; recorded in run.json", name, signal.replace("_", " "), package)
    return signals
