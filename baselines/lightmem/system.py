"""LightMem through a subprocess worker in the user's own LightMem checkout and environment, with the
configuration of LightMem's paper evaluation.

Upstream (github zjunlp/LightMem, pinned at `PIN`): `experiments/longmemeval/run_lightmem_qwen.py` and
`experiments/locomo/add_locomo.py` + `search_locomo.py`. Both build LightMem with LLMLingua-2
pre-compression shared with topic segmentation, `messages_use` "user_only", metadata generation and text
summaries, `extract_threshold` 0.1, an embedding index and embedding retrieval over Qdrant, and
`update: offline`; they retrieve 20 memories for a LongMemEval question and 60 for a LoCoMo one
(`LIMITS`), and the LoCoMo answer context groups the memories by speaker. Only the LoCoMo script runs
the offline update before answering (add_locomo.py, merging at score 0.9); the LongMemEval QA script adds
and retrieves with no update, and `experiments/longmemeval/offline_update.py` (score 0.8) is a separate
utility over stored collections. `OFFLINE_UPDATE` follows that per dataset shape; `offline_update`
overrides it (e.g. `{"chat": True}` runs the 0.8 update on LongMemEval: `UPDATE_THRESHOLDS`).
`paper_config` builds that configuration for each dataset shape; the worker picks one when it sees the
data (two named speakers: LoCoMo's; user/assistant turns: LongMemEval's).

Where the harness differs, one option each (upstream value beside ours):
- `text_embedder`: upstream loads all-MiniLM-L6-v2 in process (huggingface, 384-d); here LightMem's own
  OpenAI text embedder calls the run's served embeddings endpoint through the logging proxy, so its
  calls and tokens are counted like every system's, and questions carry the run's `query_prefix`.
- `max_tokens` of the memory manager: upstream 16000; here at most a quarter of the served context.
- `device`: upstream "cuda" for LLMLingua-2 and the embedder; ours the same by default.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from baselines.base import Endpoints, SystemUnavailable
from baselines.upstream import Pin
from baselines.worker import WorkerSystem

WORKER = Path(__file__).with_name("worker.py")
PIN = Pin("github zjunlp/LightMem", "8fc9a9179f9170c4a40fc653fcb410375900f26e", "2026-08-03",
          ("src/lightmem/memory/lightmem.py", "src/lightmem/factory/text_embedder/openai.py",
           "experiments/locomo/prompts.py"),
          hint="check out that commit (pyproject version 0.1.0) in the LightMem checkout")
LIMITS = {"chat": 20, "conversation": 60}  # retrieve limit: LongMemEval script 20, LoCoMo search 60
UPDATE_THRESHOLDS = {"chat": 0.8, "conversation": 0.9}  # offline_update.py 0.8, add_locomo.py 0.9
# whether the build ends with the offline update: add_locomo.py runs it; run_lightmem_qwen.py does not
OFFLINE_UPDATE = {"chat": False, "conversation": True}
UPSTREAM_MAX_TOKENS = 16000


def paper_config(shape: str, endpoints: Endpoints, *, llmlingua_model_path: str, device: str = "cuda",
                 max_tokens: int | None = None) -> dict[str, Any]:
    """LightMem's evaluation configuration for one dataset shape ("chat" or "conversation"), pointed at
    the served endpoints; the worker fills in the per-instance Qdrant collection and path."""
    e = endpoints
    compressor: dict[str, Any] = {"llmlingua_config": {"model_name": llmlingua_model_path,
                                                       "device_map": device, "use_llmlingua2": True}}
    if shape == "conversation":  # add_locomo.py compresses at rate 0.6 (the LongMemEval script keeps 0.8)
        compressor["compress_config"] = {"instruction": "", "rate": 0.6, "target_token": -1}
    return {
        "pre_compress": True,
        "pre_compressor": {"model_name": "llmlingua-2", "configs": compressor},
        "topic_segment": True,
        "precomp_topic_shared": True,
        "topic_segmenter": {"model_name": "llmlingua-2"},
        "messages_use": "user_only",
        "metadata_generate": True,
        "text_summary": True,
        "memory_manager": {"model_name": "openai", "configs": {
            "model": e.chat_model, "api_key": e.api_key, "openai_base_url": e.base_url,
            "max_tokens": max_tokens or min(UPSTREAM_MAX_TOKENS, e.context_tokens // 4)}},
        "extract_threshold": 0.1,
        "index_strategy": "embedding",
        "text_embedder": {"model_name": "openai", "configs": {
            "model": e.embed_model, "api_key": e.api_key, "embedding_dims": e.embed_dim,
            "openai_base_url": e.base_url}},
        "retrieve_strategy": "embedding",
        "embedding_retriever": {"model_name": "qdrant", "configs": {
            "collection_name": "lightmem", "embedding_model_dims": e.embed_dim, "on_disk": True}},
        "update": "offline",
    }


def merged(base: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def lightmem_system(endpoints: Endpoints, *, python: str | None = None, checkout: str | None = None,
                    llmlingua_model_path: str | None = None, device: str = "cuda",
                    max_tokens: int | None = None, limit: int | None = None,
                    config: Mapping[str, Any] | None = None,
                    offline_update: Mapping[str, bool] | None = None, query_prefix: str = "",
                    log_path: str | Path | None = None, name: str = "lightmem") -> WorkerSystem:
    """`python`: the interpreter of an environment where LightMem is installed (`pip install -e .` in a
    checkout of github zjunlp/LightMem at `PIN`); `checkout`: that checkout; `llmlingua_model_path`: a
    local llmlingua-2-bert-base-multilingual-cased-meetingbank (compression and topic segmentation);
    `limit`: memories retrieved (None: upstream's per dataset, `LIMITS`); `config`: overrides merged
    onto the paper configuration; `offline_update`: per dataset shape ("chat": LongMemEval,
    "conversation": LoCoMo), whether the build ends with the offline update, over `OFFLINE_UPDATE`."""
    unknown = sorted(set(offline_update or {}) - set(OFFLINE_UPDATE))
    if unknown:
        raise ValueError(f"{name}: offline_update is set per dataset shape ({', '.join(OFFLINE_UPDATE)}), "
                         f"not {', '.join(unknown)}")
    if not checkout:
        raise SystemUnavailable(f"{name}: no LightMem checkout configured "
                                "(method.system.checkout); it installs only from github zjunlp/LightMem, in "
                                "its own environment (it pins torch 2.8)")
    root = Path(checkout)
    if root.is_dir():
        PIN.check(name, root)
    if not llmlingua_model_path:
        raise SystemUnavailable(f"{name}: the paper configuration compresses and segments with "
                                "LLMLingua-2; set method.system.llmlingua_model_path to a local "
                                "llmlingua-2-bert-base-multilingual-cased-meetingbank")
    configs = {shape: merged(paper_config(shape, endpoints, llmlingua_model_path=llmlingua_model_path,
                                          device=device, max_tokens=max_tokens), config or {})
                   for shape in LIMITS}
    options = {"configs": configs, "limits": {s: limit or n for s, n in LIMITS.items()},
               "offline_update": {**OFFLINE_UPDATE,
                                  **{shape: bool(v) for shape, v in (offline_update or {}).items()}},
               "update_thresholds": UPDATE_THRESHOLDS,
               "query_prefix": query_prefix,
               "locomo_prompts": str(root / "experiments" / "locomo" / "prompts.py"),
               "upstream": PIN.record(root) if root.is_dir() else {}}
    return WorkerSystem(name, python, WORKER, options, cwd=root, pythonpath=[root / "src", root],
                        log_path=log_path)
