"""EverMemOS worker: runs inside the user's EverMemOS checkout and environment (github
EverMind-AI/EverMemOS, Python 3.12) through its in-process evaluation adapter (MemCell extraction,
BM25 + embedding indexes, then agentic or lightweight retrieval), and answers the protocol of
baselines/worker.py. Not runnable on this project's CPU machine; kept small so it is easy to audit.

hello options: `system_config` (path of an EverMemOS evaluation system YAML, e.g.
evaluation/config/systems/evermemos.yaml), `llm_base_url`, `llm_model`, `api_key`. The LLM section
of that config is pointed at `llm_base_url` (the harness's logging proxy); embedding settings stay as
the config gives them. The checkout root must be the working directory (the adapter sets it).
"""

from __future__ import annotations

import asyncio
import importlib.util
from datetime import datetime
from pathlib import Path
from typing import Any

_spec = importlib.util.spec_from_file_location("worker_protocol", Path(__file__).resolve().parents[1] / "worker.py")
assert _spec is not None and _spec.loader is not None
protocol = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(protocol)


class EverMemOSWorker:
    def __init__(self) -> None:
        self.options: dict = {}
        self.adapter: Any = None
        self.index: Any = None
        self.conversation_id = "conv_0"

    def hello(self, options: dict) -> dict:
        import yaml
        from evaluation.src.adapters.evermemos_adapter import EverMemOSAdapter
        from evaluation.src.core.data_models import Conversation, Message

        self.classes = (EverMemOSAdapter, Conversation, Message)
        with open(options["system_config"], encoding="utf-8") as f:
            self.config = yaml.safe_load(f)
        self.config.setdefault("llm", {}).update(base_url=options["llm_base_url"], model=options["llm_model"],
                                                 api_key=options.get("api_key", "local"))
        self.options = options
        return {"name": "evermemos"}

    def reset(self, instance_id: str, workdir: str) -> dict:
        adapter_class = self.classes[0]
        self.workdir = Path(workdir)
        self.adapter, self.index = adapter_class(self.config, output_dir=self.workdir), None
        return {}

    def ingest(self, sessions: list) -> dict:
        _, conversation_class, message_class = self.classes
        messages = [message_class(speaker_id=t.get("speaker") or t["role"], speaker_name=t.get("speaker") or t["role"],
                                  content=t["content"], timestamp=datetime.fromisoformat(t["timestamp"] or s["timestamp"]),
                                  metadata={"session_id": s["session_id"], "turn_id": t["turn_id"]})
                    for s in sessions for t in s["turns"] if t["content"].strip()]
        conversation = conversation_class(conversation_id=self.conversation_id, messages=messages, metadata={})
        self.index = asyncio.run(self.adapter.add([conversation], output_dir=self.workdir))
        return {"messages": len(messages)}

    def retrieve(self, question: str, when: str | None) -> dict:
        result = asyncio.run(self.adapter.search(question, self.conversation_id, self.index, question_date=when))
        evidence = [{"text": r.get("content", ""), "score": r.get("score")} for r in result.results]
        return {"evidence": evidence, "trace": {"retrieval": result.retrieval_metadata}}

    def close(self) -> dict:
        self.adapter = None
        return {}


if __name__ == "__main__":
    protocol.serve(EverMemOSWorker())
