"""Deterministic models for tests: a scripted chat model and a hashing embedder.

They are selected explicitly (`llm.backend=scripted`, `embedder.backend=hash`) and go through exactly
the same scheduler, call log and store as the real backends. They are never a default.
"""

from __future__ import annotations

import importlib
import json
import re
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from memforest.config import LLMConfig
from memforest.errors import ConfigError
from memforest.llm.base import ChatRequest, ChatResponse, EmbedKind, Usage, normalize_rows

Responder = Callable[[ChatRequest], "str | dict[str, Any] | Exception"]
_WORD = re.compile(r"[A-Za-z0-9']+")


class ScriptedChatModel:
    """Answers each request with `responder(request)` (default: `rule_responder`), after an
    optional fixed latency. Counts requests (`calls`), `generate` calls (`batches`) and the largest
    number of requests seen in flight. `batched=True` makes it take whole waves, as in-process vLLM does."""

    def __init__(
        self,
        responder: Responder | None = None,
        latency_s: float = 0.0,
        max_concurrency: int = 4,
        name: str = "scripted",
        batched: bool = False,
    ) -> None:
        self.responder = responder or rule_responder
        self.latency_s = latency_s
        self.max_concurrency = max_concurrency
        self.name = name
        self.batched = batched
        self.calls = 0
        self.batches = 0
        self.max_in_flight = 0
        self._in_flight = 0
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, cfg: LLMConfig) -> ScriptedChatModel:
        """`llm.backend=scripted`: `cfg.responder` names the responder as "module:function"."""
        responder = load_responder(cfg.responder) if cfg.responder else None
        return cls(responder, max_concurrency=cfg.concurrency)

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResponse | Exception]:
        with self._lock:
            self.batches += 1
        return [self._one(r) for r in requests]

    def _one(self, request: ChatRequest) -> ChatResponse | Exception:
        with self._lock:
            self.calls += 1
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
        try:
            if self.latency_s:
                time.sleep(self.latency_s)
            out = self.responder(request)
        finally:
            with self._lock:
                self._in_flight -= 1
        if isinstance(out, Exception):
            return out
        text = out if isinstance(out, str) else json.dumps(out)
        prompt_tokens = sum(len(m["content"].split()) for m in request.messages)
        return ChatResponse(text, Usage(prompt_tokens, 0, len(text.split())), "stop", self.name)

    def close(self) -> None:
        pass


def load_responder(spec: str) -> Responder:
    """The callable named by "module:function"."""
    module_name, _, attr = spec.partition(":")
    try:
        responder = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as e:
        raise ConfigError(f"llm.responder {spec!r}: {e}") from None
    if not callable(responder):
        raise ConfigError(f"llm.responder {spec!r} is not callable")
    return responder


class HashEmbedder:
    """Signed feature hashing of lower-cased words and word bigrams: lexical similarity, no model."""

    def __init__(self, dim: int = 256, name: str = "hash") -> None:
        self.dim = dim
        self.name = name

    def embed(self, texts: Sequence[str], kind: EmbedKind = "passage") -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            words = [_stem(w) for w in _WORD.findall(text.lower()) if w not in _STOP]
            for feature in words + [a + " " + b for a, b in zip(words, words[1:])]:
                h = zlib.crc32(feature.encode())
                out[row, h % self.dim] += 1.0 if (h >> 16) & 1 else -1.0
        return normalize_rows(out)

    def close(self) -> None:
        pass


_STOP = frozenset(
    ["a", "an", "the", "is", "are", "was", "were", "be", "been", "to", "of", "in", "on", "at", "for", "and",
     "or", "but", "with", "by", "from", "that", "this", "it", "its", "as", "i", "me", "my", "you", "your",
     "he", "she", "they", "we", "our", "their", "his", "her", "user", "assistant", "said", "says"]
)


def _stem(word: str) -> str:
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def rule_responder(request: ChatRequest) -> str | dict[str, Any] | Exception:
    """Deterministic answers to MemForest's own prompts, derived from the prompt text."""
    handler = _RULES.get(request.prompt_id)
    if handler is None:
        return {"answer": ""} if request.json_schema else "I do not know."
    return handler(request)


def _user_text(request: ChatRequest) -> str:
    return request.messages[-1]["content"]


def _extract(request: ChatRequest) -> dict[str, Any]:
    text = _user_text(request)
    date = re.search(r"Dialogue date: (\d{4}-\d{2}-\d{2})", text)
    body = text.split("Dialogue:\n", 1)[-1].split("\n\nReturn", 1)[0]
    facts = []
    for line in body.splitlines():
        speaker, _, content = line.partition(": ")
        if speaker not in ("user", "assistant") or not content.strip():
            continue
        for sentence in re.split(r"(?<=[.!?])\s+", content.strip()):
            words = _WORD.findall(sentence)
            if len(words) < 3:
                continue
            iso = re.search(r"\b\d{4}-\d{2}-\d{2}\b", sentence)
            residence = re.search(r"\b(live|lived|lives|moved|relocated)\b", sentence, re.I)
            entities = [w for w in words[1:] if w[0].isupper()][:4]
            facts.append({
                "text": f"The {speaker} said: {sentence.strip()}",
                "origin": speaker,
                "role": "state",
                "participants": [speaker],
                "entities": entities,
                "topics": sorted({w.lower() for w in words if len(w) > 4}, key=len, reverse=True)[:2]
                    or ["misc"],
                "time_text": "",
                "event_start": iso.group(0) if iso else "",
                "event_end": "",
                "attribute": "residence" if residence else "",
                "domain": "home" if residence else "",
                "collection": "",
            })
    _ = date
    return {"facts": facts[:6]}


def _equivalent(request: ChatRequest) -> dict[str, Any]:
    m = re.search(r"Fact A: (.*)\nFact B: (.*)\n", _user_text(request))
    if not m:
        return {"same": False}

    def norm(s: str) -> list[str]:
        return [w for w in _WORD.findall(s.lower()) if w not in _STOP]

    return {"same": norm(m.group(1)) == norm(m.group(2))}


def _summarize(request: ChatRequest) -> dict[str, list[str]]:
    entries = [line[2:] for line in _user_text(request).splitlines() if line.startswith("- ")]
    return {"sentences": [" ".join(e.split()[:30])[:200] for e in entries][:8]}


def _words(text: str) -> set[str]:
    return {_stem(w) for w in _WORD.findall(text.lower()) if w not in _STOP}


def _plan(request: ChatRequest) -> dict[str, Any]:
    text = _user_text(request)
    question = re.search(r"Question: (.*)", text)
    q = question.group(1) if question else ""
    trees = re.findall(r"^(\d+)\. ", text.split("Trees:", 1)[-1], flags=re.M)
    direction = "before" if re.search(r"\bbefore\b", q) else "after" if re.search(r"\bafter\b", q) else "none"
    kind = "temporal" if direction != "none" or re.search(r"\bwhen\b|how long|how many days", q) else \
        "aggregate" if re.search(r"how many|in total|\btotal\b", q) else "lookup"
    return {"kind": kind, "direction": direction, "anchors": [],
            "plans": [{"tree": int(i), "query": q} for i in trees]}


def _browse(request: ChatRequest) -> dict[str, Any]:
    text = _user_text(request)
    query = _words(text.split("\n", 1)[0])
    options = re.findall(r"^(\d+)\. (.*)$", text.split("Options:", 1)[-1], flags=re.M)
    limit = re.search(r"at most (\d+)", request.messages[0]["content"])
    beam = int(limit.group(1)) if limit else 10
    ranked = sorted(options, key=lambda o: (-len(query & _words(o[1])), int(o[0])))
    return {"selected": [int(i) for i, _ in ranked[:beam]]}


def _answer(request: ChatRequest) -> str:
    evidence = _user_text(request).split("Memory evidence:\n", 1)[-1].split("\n\nQuestion:", 1)[0]
    lines = [line for line in evidence.splitlines() if line.strip()]
    return lines[0] if lines else "I do not know."


_RULES: dict[str, Callable[[ChatRequest], Any]] = {
    "query_plan": _plan,
    "browse_select": _browse,
    "answer_from_memory": _answer,
    "extract_facts": _extract,
    "fact_equivalence": _equivalent,
    "interval_summary": _summarize,
}

