"""Builds chat models and embedders from their configs. Backends are named explicitly; nothing
falls back silently to another backend."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from memforest.config import EmbedderConfig, LLMConfig
from memforest.errors import ConfigError, MemForestError, ModelError, error_line
from memforest.llm.base import ChatModel, Embedder

T = TypeVar("T")


def checked_build(what: str, backend: str, build: Callable[[], T]) -> T:
    """A model built by `build`; a failure other than a refused configuration is a ModelError naming it."""
    try:
        return build()
    except MemForestError:
        raise
    except Exception as e:
        text = error_line(e)
        raise ModelError(f"the {what} ({backend} backend) cannot be started: {text}") from e


def build_chat_model(cfg: LLMConfig) -> ChatModel:
    if cfg.backend == "llamacpp":
        from memforest.llm.llamacpp import LlamaCppChatModel

        return LlamaCppChatModel(cfg)
    if cfg.backend == "openai":
        from memforest.llm.openai_compat import OpenAIChatModel

        return OpenAIChatModel(cfg)
    if cfg.backend == "vllm":
        from memforest.llm.vllm_backend import VLLMChatModel

        return VLLMChatModel(cfg)
    if cfg.backend == "scripted":
        from memforest.llm.testing import ScriptedChatModel

        return ScriptedChatModel.from_config(cfg)
    raise ConfigError(f"unknown llm backend {cfg.backend!r} (llamacpp, openai, vllm, scripted)")


def build_embedder(cfg: EmbedderConfig) -> Embedder:
    """The configured backend, behind the on-disk vector cache when `cfg.cache_dir` is set."""
    embedder = _backend_embedder(cfg)
    if cfg.cache_dir:
        from memforest.llm.embed_cache import CachedEmbedder

        return CachedEmbedder(embedder, cfg.cache_dir)
    return embedder


def _backend_embedder(cfg: EmbedderConfig) -> Embedder:
    if cfg.backend == "sentence_transformers":
        from memforest.llm.embedders import SentenceTransformerEmbedder

        return SentenceTransformerEmbedder(cfg)
    if cfg.backend == "openai":
        from memforest.llm.embedders import OpenAIEmbedder

        return OpenAIEmbedder(cfg)
    if cfg.backend == "vllm":
        from memforest.llm.embedders import VLLMEmbedder

        return VLLMEmbedder(cfg)
    if cfg.backend == "hash":
        from memforest.llm.testing import HashEmbedder

        return HashEmbedder(cfg.dim)
    raise ConfigError(
        f"unknown embedder backend {cfg.backend!r} (sentence_transformers, openai, vllm, hash)"
    )
