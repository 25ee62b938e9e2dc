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
import weakref
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
    """The GGUF model's own vocabulary, loaded alone (no weights, no context: `llama_cpp.Llama` with
    `vocab_only` still makes a context, and llama.cpp then warns of a training-context overflow)."""
    import llama_cpp
    from llama_cpp._logger import set_verbose

    from memforest.llm.llamacpp import packaged_gguf_path

    path = cfg.model_path or packaged_gguf_path()
    set_verbose(False)  # llama.cpp's own log lines, as `Llama(verbose=False)` sets it
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(str(path).encode("utf-8"), params)
    if not model:
        raise ValueError(f"cannot read the vocabulary of {path}")
    vocab = llama_cpp.llama_model_get_vocab(model)

    def count(text: str) -> int:
        if not text:
            return 0
        data = text.encode("utf-8")
        # with no room for tokens, llama_tokenize answers minus the number it needs
        return abs(int(llama_cpp.llama_tokenize(vocab, data, len(data), None, 0, False, False)))

    counter = TokenCounter(f"llama.cpp vocabulary of {path}", True, count)
    weakref.finalize(counter, llama_cpp.llama_model_free, model)
    return counter


def transformers_counter(model: str) -> TokenCounter:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model, local_files_only=True)

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False)) if text else 0

    return TokenCounter(f"transformers tokenizer of {model}", True, count)
