"""EverMemOS worker: runs inside the user's EverMemOS environment (github EverMind-AI/EverMemOS,
Python 3.12) with `methods/EverCore` as working directory, drives its in-process evaluation adapter
(`evaluation.src.adapters.evermemos_adapter.EverCoreAdapter`) and answers the protocol of
baselines/worker.py. Standard library only at import time; kept small so it is easy to audit.

hello options (built by baselines/evermemos/system.py): `system_config` (an EverMemOS evaluation system
YAML), `llm_base_url`, `llm_model`, `api_key`, `max_tokens`, `use_reranker`, `response_top_k` (memories in
the answer context; None keeps upstream's 10), `query_prefix` (prepended
to every text EverMemOS embeds while it retrieves, i.e. the question and its sub-queries; upstream
embeds them bare), `private_models`, `upstream`. The embedder and reranker endpoints come from the
environment the adapter sets (EverMemOS reads VECTORIZE_* and RERANK_*).

Ingest follows upstream's loader (`evaluation/src/core/loaders.py`, which reads LoCoMo and the
LongMemEval file its converter writes in LoCoMo's format): one conversation of every session's messages,
`sender_name` the speaker (LongMemEval: `user_<id>` / `assistant_<id>`, as the converter names them),
`sender_id` its lower-cased name with the conversation id, each message stamped 30 s after the previous
one of its session (less when the next session starts sooner: the session's messages then fill 90% of
the gap). LongMemEval messages are cut at 8,000 characters, as the loader cuts them for the
`data.max_content_length` of upstream's `config/datasets/longmemeval.yaml` (LoCoMo's sets none). The
conversation's metadata names speaker_a and speaker_b as the sessions' `speakers` order them (LoCoMo's
speaker_a need not speak first); without them, in order of first turn. The build statistics' `input`
counts the non-empty turns handed to `EverCoreAdapter.add` as kept and, as `stored`, the MemCells its
extraction saved (`memcells/memcell_list_conv_<n>.json` under the workdir).

Retrieval: each memory upstream's search returns is an evidence item `subject: episode` in its rank
order, and the retrieval sends the `layout` that writes upstream's `formatted_context` from them
("Episodes memories for conversation between A and B:", then each item followed by `---`); the trace
says whether that reproduces the context upstream formatted (`layout_matches_upstream`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import importlib.util
import json
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

_spec = importlib.util.spec_from_file_location("worker_protocol",
                                               Path(__file__).resolve().parents[1] / "worker.py")
assert _spec is not None and _spec.loader is not None
protocol = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(protocol)

CONVERSATION = "conv_0"  # upstream reads the index number after the last underscore
MESSAGE_FIELDS = {"sender_id", "sender_name", "content", "timestamp", "metadata"}
INTERVAL_S = 30.0
MESSAGE_CHARS = 8000  # the loader's cut on LongMemEval (its dataset config); LoCoMo messages are whole
MEMCELLS = Path("memcells") / "memcell_list_conv_0.json"  # stage 1's output for CONVERSATION


def layout(speaker_a: Any, speaker_b: Any) -> dict:
    """Upstream's formatted_context (EverCoreAdapter.search) as a layout (baselines/worker.py LAYOUT)."""
    return {"head": f"Episodes memories for conversation between {speaker_a} and {speaker_b}:\n\n    ",
            "item": "{text}\n---", "join": "\n\n", "tail": "\n", "empty": ""}


def episode_text(result: dict) -> str:
    """A retrieved memory as upstream's context writes it: `subject: episode`."""
    meta = result.get("metadata") or {}
    return f"{meta.get('subject', 'N/A')}: {result.get('content', '')}"


def input_account(sessions: list, sent: int, stored: int | None) -> dict:
    """baselines.base.InputKept's fields: every non-empty turn goes to the adapter as one message."""
    given = sum(len(s["turns"]) for s in sessions)
    return {"given": given, "kept": sent, "unit": "memcells", "stored": stored,
            "lost": {"empty turns": given - sent} if given > sent else {}, "upstream": False}


def stored_memcells(workdir: Path) -> int | None:
    try:
        return len(json.loads((workdir / MEMCELLS).read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return None


def staggered(sessions: list) -> list[list[datetime]]:
    """Per session, its messages' times: session start + i x 30 s, squeezed into 90% of the gap to the
    next session when 30 s apart would overrun it (upstream's loader)."""
    starts = [datetime.fromisoformat(s["timestamp"]) for s in sessions]
    out = []
    for index, session in enumerate(sessions):
        n = len(session["turns"])
        step = INTERVAL_S if n > 1 else 0.0
        if n > 1 and index + 1 < len(sessions):
            room = (starts[index + 1] - starts[index]).total_seconds()
            if room > 0 and (n - 1) * INTERVAL_S > 0.9 * room:
                step = 0.9 * room / (n - 1)
        out.append([starts[index] + timedelta(seconds=i * step) for i in range(n)])
    return out


def sender(turn: dict, instance_id: str) -> str:
    return turn.get("speaker") or f"{turn['role']}_{instance_id}"


def content(turn: dict) -> str:
    return turn["content"] if turn.get("speaker") else turn["content"][:MESSAGE_CHARS]


def messages(sessions: list, instance_id: str, message_class: Any) -> tuple[list, list[str]]:
    """Upstream Message objects for every non-empty turn, and the speakers: the sessions' `speakers`
    (speaker_a first), then any other sender in order of appearance."""
    sessions = sorted(sessions, key=lambda s: s["timestamp"])
    out: list = []
    speakers: list[str] = list(next((s["speakers"] for s in sessions if s.get("speakers")), []))
    for session, times in zip(sessions, staggered(sessions)):
        for turn, when in zip(session["turns"], times):
            if not turn["content"].strip():
                continue
            name = sender(turn, instance_id)
            if name not in speakers:
                speakers.append(name)
            out.append(message_class(sender_id=f"{name.lower().replace(' ', '_')}_{CONVERSATION}",
                                     sender_name=name, content=content(turn), timestamp=when,
                                     metadata={"session": session["session_id"], "dia_id": turn["turn_id"]}))
    return out, speakers


class Counter:
    """Counts calls to a private model's async methods (their traffic bypasses the logging proxy)."""

    def __init__(self) -> None:
        self.calls = 0

    def wrap(self, service: Any, *names: str) -> None:
        for name in names:
            method = getattr(service, name, None)
            if method is not None:
                setattr(service, name, self._counted(method))

    def _counted(self, method: Any) -> Any:
        @functools.wraps(method)
        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return await method(*args, **kwargs)
        return counted


class EverMemOSWorker:
    def __init__(self) -> None:
        self.options: dict = {}
        self.adapter: Any = None
        self.index: Any = None
        self.rerank = Counter()

    def hello(self, options: dict) -> dict:
        import yaml
        from evaluation.src.adapters.evermemos_adapter import EverCoreAdapter  # the pinned layout
        from evaluation.src.core.data_models import Conversation, Message

        fields = {f.name for f in dataclasses.fields(Message)}
        if not fields >= MESSAGE_FIELDS:
            raise RuntimeError(f"EverMemOS Message has fields {sorted(fields)}, the worker needs "
                               f"{sorted(MESSAGE_FIELDS)} (layout of "
                               f"{options.get('upstream', {}).get('pinned_commit', 'the pinned commit')})")
        self.classes = (EverCoreAdapter, Conversation, Message)
        with open(options["system_config"], encoding="utf-8") as f:
            self.config = yaml.safe_load(f)
        self.config.setdefault("llm", {}).update(provider="openai", base_url=options["llm_base_url"],
                                                 model=options["llm_model"],
                                                 api_key=options.get("api_key", "local"),
                                                 max_tokens=options["max_tokens"])
        self.options = options
        if options.get("private_models"):
            print(f"evermemos: PRIVATE MODELS (calls not in the proxy's log, counted apart): "
                  f"{options['private_models']}", file=sys.stderr)
        return {"name": "evermemos", "private_models": options.get("private_models", {}),
                **options.get("upstream", {})}

    def reset(self, instance_id: str, workdir: str) -> dict:
        adapter_class = self.classes[0]
        self.instance_id, self.workdir = instance_id, Path(workdir)
        self.adapter, self.index = adapter_class(self.config, output_dir=self.workdir), None
        overrides = {k: v for k, v in (("use_reranker", self.options.get("use_reranker", True)),
                                         ("response_top_k", self.options.get("response_top_k")))
                     if v is not None}
        convert = self.adapter._convert_config_to_experiment_config

        def converted() -> Any:  # the system YAML has no keys for these: set on each ExperimentConfig
            config = convert()
            for key, value in overrides.items():
                setattr(config, key, value)
            return config
        self.adapter._convert_config_to_experiment_config = converted
        return {}

    def _private(self) -> dict:
        return {"private_models": self.options.get("private_models", {}),
                "private_calls": {"rerank": self.rerank.calls}}

    def ingest(self, sessions: list) -> dict:
        _, conversation_class, message_class = self.classes
        found, speakers = messages(sessions, self.instance_id, message_class)
        metadata = {"speaker_a": speakers[0] if speakers else None,
                    "speaker_b": speakers[1] if len(speakers) > 1 else None}
        self.conversation = conversation_class(conversation_id=CONVERSATION, messages=found,
                                               metadata=metadata)
        self.rerank.calls = 0
        self.index = asyncio.run(self.adapter.add([self.conversation], output_dir=self.workdir))
        cut = sum(1 for s in sessions for t in s["turns"]
                  if t["content"].strip() and content(t) != t["content"])
        return {"messages": len(found), "messages_cut": cut,
                "input": input_account(sessions, len(found), stored_memcells(self.workdir)),
                **self._private(), **self.options.get("upstream", {})}

    def retrieve(self, question: str, when: str | None) -> dict:
        before = self.rerank.calls
        result = asyncio.run(self._search(question))
        evidence = [{"text": episode_text(r), "score": r.get("score"), "rank": rank}
                    for rank, r in enumerate(result.results)]
        metadata = dict(result.retrieval_metadata or {})
        speakers = self.conversation.metadata
        shown = layout(speakers.get("speaker_a"), speakers.get("speaker_b"))
        upstream = metadata.pop("formatted_context", None)
        trace = {"retrieval": metadata, **self._private(), "rerank_calls": self.rerank.calls - before,
                 "layout_matches_upstream": (protocol.render_layout(shown, evidence) == upstream
                                             if upstream is not None else None)}
        return {"evidence": evidence, "layout": shown, "trace": trace}

    async def _search(self, question: str) -> Any:
        from agentic_layer import rerank_service
        from agentic_layer.vectorize_service import get_vectorize_service

        reranker = rerank_service.get_rerank_service()
        if not getattr(reranker, "_memforest_counted", False):
            self.rerank.wrap(reranker, "rerank_memories", "rerank_documents")
            reranker._memforest_counted = True
        vectorizer, prefix = get_vectorize_service(), self.options.get("query_prefix", "")
        original = vectorizer.get_embedding
        if prefix:
            vectorizer.get_embedding = lambda text, *a, **k: original(prefix + text, *a, **k)
        try:
            return await self.adapter.search(question, CONVERSATION, self.index,
                                             conversation=self.conversation)
        finally:
            vectorizer.get_embedding = original

    def close(self) -> dict:
        self.adapter = None
        return {}


if __name__ == "__main__":
    protocol.serve(EverMemOSWorker())
