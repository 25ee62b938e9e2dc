"""Builders the harness's model configs name as `_target_`: the library's own configs and factories,
so that every model knob has its default in `memforest.config` and nowhere else."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any, TypeVar

from omegaconf import OmegaConf

from benchmarks.harness import gpu_node
from memforest.config import EmbedderConfig, LLMConfig, from_dict
from memforest.errors import ConfigError
from memforest.llm.base import ChatModel, Embedder
from memforest.llm.calllog import CallLog
from memforest.llm.factory import build_chat_model, build_embedder
from memforest.llm.scheduler import Scheduler

T = TypeVar("T")


def library_config(cls: type[T], node: Mapping[str, Any] | object) -> T:
    """The library dataclass `cls` from a harness node of it (which adds `name` and `_target_`). Mapping
    values (`engine_args`) arrive as OmegaConf nodes from `instantiate`; the library gets plain dicts."""
    names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    if isinstance(node, Mapping):
        values = {k: node[k] for k in names if k in node}
    else:
        values = {k: getattr(node, k) for k in names}
    return from_dict(cls, {k: _plain(v) for k, v in values.items()})


def _plain(value: Any) -> Any:
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def chat_model(**node: Any) -> ChatModel:
    """`llm` group: `_target_: benchmarks.harness.models.chat_model`. A GPU backend is built only after
    the node passes the GPU preflight (driver, GPU, free memory for its share, caches)."""
    cfg = library_config(LLMConfig, node)
    _preflight(cfg, None)
    return build_chat_model(cfg)


def embedder(**node: Any) -> Embedder:
    """`embedder` group: `_target_: benchmarks.harness.models.embedder`; preflight as `chat_model`."""
    cfg = library_config(EmbedderConfig, node)
    _preflight(None, cfg)
    return build_embedder(cfg)


def _preflight(llm: LLMConfig | None, embedder: EmbedderConfig | None) -> None:
    _, engines = gpu_node.gpu_shares(llm, embedder)
    if engines:
        try:
            gpu_node.require_gpu_for(llm, embedder)
        except gpu_node.PreflightError as exc:
            raise ConfigError(str(exc)) from exc


def scheduler(model: ChatModel, node: LLMConfig, call_log: CallLog) -> Scheduler:
    """A Scheduler over `model` with the concurrency and retry policy of its `llm` node (a harness
    node of LLMConfig: its labels are left out)."""
    c = library_config(LLMConfig, node)
    return Scheduler(model, c.concurrency, call_log, c.max_retries, c.json_retries, c.backoff_s)
