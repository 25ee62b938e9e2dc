"""Mem0 2.x (PyPI `mem0ai>=2,<3`) through a subprocess worker in its own environment: 2.x has the same
package name as the 1.x installed here, so the two cannot share one environment."""

from __future__ import annotations

import logging
from pathlib import Path

from baselines.base import Endpoints, SystemUnavailable
from baselines.mem0.protocol import NAME_PEOPLE
from baselines.worker import WorkerSystem

log = logging.getLogger(__name__)

WORKER = Path(__file__).with_name("additive_worker.py")
INSTALL_HINT = (
    'python -m venv /opt/mem0-2 && /opt/mem0-2/bin/pip install "mem0ai>=2,<3", '
    "then method.system.python=/opt/mem0-2/bin/python"
)

# Search sizes (`top_k` for a single store, `speaker_top_k` for each store of a two-person conversation)
# per evaluation protocol: "memory_benchmarks" is Mem0's own 2.x evaluation (github
# mem0ai/memory-benchmarks, top-k 200 as Mem0's documentation publishes it); "mem0_1x_budgets" keeps the
# sizes of the 1.x scripts (30 per speaker store, evaluation/ at b3ede5b7) and 2.x's library default (20).
PROTOCOL_TOP_K = {"memory_benchmarks": (200, 200), "mem0_1x_budgets": (20, 30)}


def mem0_additive_system(
    endpoints: Endpoints,
    *,
    python: str | None = None,
    protocol: str = "mem0_1x_budgets",
    top_k: int | None = None,
    speaker_top_k: int | None = None,
    batch_turns: int = 2,
    threshold: float = 0.1,
    temperature: float = 0.0,
    max_tokens: int = 2000,
    speaker_stores: bool = True,
    instruction: str | None = NAME_PEOPLE,
    evidence_limit: int | None = None,
    log_path: str | Path | None = None,
    name: str = "mem0_additive",
) -> WorkerSystem:
    """`python`: the interpreter of an environment with mem0ai 2.x. `protocol` sets the search sizes
    (PROTOCOL_TOP_K) that `top_k` and `speaker_top_k` leave unset. `top_k` and `threshold` (2.x's
    default minimum similarity, 0.1) apply to a single store; `speaker_top_k` to each store of a
    two-person conversation, which gets one store per speaker with `instruction` as each add's prompt
    (baselines/mem0/protocol.py). `evidence_limit` keeps only the best that many memories over all
    stores (the shared budget)."""
    if not python:
        raise SystemUnavailable(
            f"{name}: no interpreter configured (method.system.python); Mem0 2.x needs an "
            f"environment of its own: {INSTALL_HINT}"
        )
    if protocol not in PROTOCOL_TOP_K:
        raise ValueError(f"{name}: protocol must be one of {sorted(PROTOCOL_TOP_K)}, not {protocol!r}")
    protocol_top_k, protocol_speaker_top_k = PROTOCOL_TOP_K[protocol]
    options = {
        "llm_base_url": endpoints.base_url,
        "llm_model": endpoints.chat_model,
        "embed_base_url": endpoints.base_url,
        "embed_model": endpoints.embed_model,
        "embed_dims": endpoints.embed_dim,
        "api_key": endpoints.api_key,
        "top_k": protocol_top_k if top_k is None else top_k,
        "speaker_top_k": protocol_speaker_top_k if speaker_top_k is None else speaker_top_k,
        "batch_turns": batch_turns,
        "threshold": threshold,
        "temperature": temperature,
        "max_tokens": max_tokens,
        "speaker_stores": speaker_stores,
        "instruction": instruction,
        "evidence_limit": evidence_limit,
    }
    system = WorkerSystem(name, python, WORKER, options, log_path=log_path)
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
