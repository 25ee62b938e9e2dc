"""Counting tokens as the answer model does, for the token evidence budget and the answer prompt's window.

The counter is the answer model's own tokenizer where the harness can load it: the model's
`count_tokens` if it offers one, the GGUF's vocabulary for llama.cpp (a vocabulary-only `Llama`, apart
from the instances that generate), and the model's Hugging Face tokenizer for vLLM and OpenAI-compatible
servers when it is on this machine (never downloaded). Otherwise, or when loading fails, a deterministic
estimate of four characters per token counts instead. run.json records which counter counted
(`token_counter`: its name, and `exact: false` for the estimate with the reason).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from memforest.config import LLMConfig

log = logging.getLogger(__name__)
CHARS_PER_TOKEN = 4  # the estimate: about four characters per token, the usual figure for English BPE


def estimate_tokens(text: str) -> int:
    """`ceil(len(text) / 4)`: monotone in the text's length, 0 for the empty text."""
    return -(-len(text) // CHARS_PER_TOKEN)


@dataclass(frozen=True)
class TokenCounter:
    name: str  # what counts, e.g. `llama.cpp vocabulary of <file>` or `estimate: 4 characters per token`
    exact: bool  # the answer model's own tokenizer
    count: Callable[[str], int]
    reason: str = ""  # why the estimate counts instead of a tokenizer

    def describe(self) -> dict[str, Any]:
        """As run.json records it."""
        return {"name": self.name, "exact": self.exact, **({"reason": self.reason} if self.reason else {})}


def estimating_counter(reason: str) -> TokenCounter:
    return TokenCounter(f"estimate: {CHARS_PER_TOKEN} characters per token", False, estimate_tokens, reason)


def token_counter(cfg: LLMConfig, model: object | None = None) -> TokenCounter:
    """The counter of the answer model that `cfg` describes (`model`: the built chat model, if any)."""
    own = getattr(model, "count_tokens", None)
    if callable(own):
        return TokenCounter(f"{cfg.backend} model {cfg.model}", True, own)
    try:
        if cfg.backend == "llamacpp":
            return llamacpp_counter(cfg)
        if cfg.backend in ("vllm", "openai"):
            return transformers_counter(cfg.model)
    except Exception as exc:  # no tokenizer here: say so, and estimate
        why = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"
        log.warning("no tokenizer for %s (%s); token counts are estimates", cfg.model, why)
        return estimating_counter(why)
    return estimating_counter(f"the {cfg.backend} backend has no tokenizer")


def llamacpp_counter(cfg: LLMConfig) -> TokenCounter:
    import llama_cpp

    from memforest.llm.llamacpp import packaged_gguf_path

    path = cfg.model_path or packaged_gguf_path()
    vocab = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)

    def count(text: str) -> int:
        return len(vocab.tokenize(text.encode("utf-8"), add_bos=False, special=False)) if text else 0

    return TokenCounter(f"llama.cpp vocabulary of {path}", True, count)


def transformers_counter(model: str) -> TokenCounter:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model, local_files_only=True)

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False)) if text else 0

    return TokenCounter(f"transformers tokenizer of {model}", True, count)
