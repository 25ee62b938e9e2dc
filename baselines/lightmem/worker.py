"""LightMem worker: runs inside the user's LightMem environment (github zjunlp/LightMem, which pins
torch 2.8 and so cannot share this project's environment) and answers the protocol of
baselines/worker.py. Not runnable on this project's CPU machine; kept small so it is easy to audit.

hello options: `config` (a LightMem config dict: pre-compressor, topic segmenter and text-embedder
model paths, retrieve strategy ...), `llm_base_url`, `llm_model`, `api_key`, `limit` (default 10),
`offline_update` (default true: LightMem's offline update runs at the end of ingest, inside the
timed build). The memory manager is pointed at `llm_base_url` (the harness's logging proxy); the
Qdrant store of each instance lives under its workdir.
"""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path
from typing import Any

_spec = importlib.util.spec_from_file_location("worker_protocol", Path(__file__).resolve().parents[1] / "worker.py")
assert _spec is not None and _spec.loader is not None
protocol = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(protocol)


class LightMemWorker:
    def __init__(self) -> None:
        self.options: dict = {}
        self.memory: Any = None

    def hello(self, options: dict) -> dict:
        from lightmem.memory.lightmem import LightMemory  # fails here when the environment is not LightMem's

        self.options, self.factory = options, LightMemory
        return {"name": "lightmem", "module": LightMemory.__module__}

    def reset(self, instance_id: str, workdir: str) -> dict:
        config = copy.deepcopy(self.options.get("config") or {})
        manager = config.setdefault("memory_manager", {"model_name": "openai", "configs": {}})
        manager.setdefault("configs", {}).update(model=self.options["llm_model"], api_key=self.options.get("api_key", "local"),
                                                 openai_base_url=self.options["llm_base_url"])
        retriever = config.setdefault("embedding_retriever", {"model_name": "qdrant", "configs": {}})
        retriever.setdefault("configs", {}).update(collection_name=instance_id, path=str(Path(workdir) / "qdrant"))
        self.memory = self.factory.from_config(config)
        return {}

    def ingest(self, sessions: list) -> dict:
        adds = 0
        for s_index, session in enumerate(sessions):
            turns = [t for t in session["turns"] if t["content"].strip()]
            pairs = [turns[i : i + 2] for i in range(0, len(turns), 2)]
            for p_index, pair in enumerate(pairs):
                last = s_index == len(sessions) - 1 and p_index == len(pairs) - 1
                messages = [{"role": "assistant" if t["role"] == "assistant" else "user",
                             "content": f"{t['speaker']}: {t['content']}" if t.get("speaker") else t["content"],
                             "time_stamp": session["timestamp"]} for t in pair]
                self.memory.add_memory(messages=messages, force_segment=last, force_extract=last)
                adds += 1
        if self.options.get("offline_update", True):
            self.memory.construct_update_queue_all_entries()
            self.memory.offline_update_all_entries(score_threshold=0.8)
        return {"adds": adds}

    def retrieve(self, question: str, when: str | None) -> dict:
        found = self.memory.retrieve(question, limit=int(self.options.get("limit", 10)))
        items = found if isinstance(found, list) else [found]
        return {"evidence": [{"text": str(m)} for m in items if str(m).strip()]}

    def close(self) -> dict:
        self.memory = None
        return {}


if __name__ == "__main__":
    protocol.serve(LightMemWorker())
