"""An OpenAI-compatible server on loopback whose answers take as long as a served GPU backbone's would.

The content of each answer comes from a source: the embedded chat model (`source: model`), or the
answers a previous run recorded, replayed by request (`source: replay`: the request's messages and JSON
schema are hashed; the n-th identical request gets the n-th recorded answer, the last one after that;
a request never seen falls back to the model when one is given, else fails with HTTP 500). The answer
is held back until the latency model (`benchmarks.serving.latency_model`) says a vLLM server would have
finished it; the usage it returns carries the modelled prefix-cache hits as `cached_tokens`. With
output caps (`benchmarks.serving.output_caps`), the model source is asked for at most
`min(max_tokens, cap)` completion tokens of the request's prompt kind, and an answer stopped there comes
back as vLLM returns an answer cut at max_tokens: the text so far, finish_reason "length" (`capped`).
With `bounds` (`output_caps.SourceBounds`), the model source decodes a request's JSON schema with its
unbounded arrays and strings bounded, sized to the source's token limit (`bounded`, `source_bounds`);
a request for a JSON object with no schema whose prompt asks for a reply shape the server knows
(`benchmarks.serving.reply_shapes`: Mem0's fact list and memory actions) is decoded by the model source
under that shape's schema, bounded alike (`shape`). The request's key stays that of the request as
sent. The source's answers are served as generated, never checked against the request's schema (a
server does not check; the client does). A recorded answer longer than its cap is charged (decoded and
reported in the usage) at the cap, its text whole.

Every request served is one line of `served_calls.jsonl` (when a path is given):
    key, arrival, admitted, queue_s, running, ttft_s, decode_s, service_s, compute_s, overrun_s,
    prompt_tokens, cached_tokens, completion_tokens (charged), source_completion_tokens, kind, cap,
    capped, max_tokens (the request's), source_max_tokens (asked of the source), bounded and
    source_bounds (the items / chars the source decoded the schema's arrays and strings under), shape
    (the reply shape recognised in a schema-less JSON request, `unknown` for one none recognises, else
    null), source (model | replay | fallback), finish_reason, text, error
`compute_s` is how long the content source took; `overrun_s > 0` means the content was ready later
than the modelled finish, so that request took longer than simulated (reported, never hidden). A
`served_calls.jsonl` is also what `source: replay` reads.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from benchmarks.jsonl import JsonlWriter
from benchmarks.serving.latency_model import Clock, LatencyModel, LatencyParams
from benchmarks.serving.model_server import ModelServer, served_answers
from benchmarks.serving.output_caps import OutputCaps, SourceBounds, request_kind
from benchmarks.serving.reply_shapes import SHAPES, reply_shape, shape_label, shape_role
from memforest.llm.base import ChatModel, ChatRequest, ChatResponse, Embedder, Usage

SOURCES = ("model", "replay")


def request_key(request: ChatRequest) -> str:
    """What identifies a request for replay: its messages and its JSON schema."""
    data = json.dumps([list(request.messages), request.json_schema], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(data.encode()).hexdigest()[:32]


def prompt_text(request: ChatRequest) -> str:
    return "".join(f"<{m['role']}>{m['content']}" for m in request.messages)


class ReplaySource:
    """Answers recorded in a served_calls.jsonl, by request key, in the order they were recorded."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise FileNotFoundError(f"replay source {self.path} not found")
        self._answers: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in _rows(self.path):
            if not row.get("error") and isinstance(row.get("text"), str):
                self._answers[str(row["key"])].append(row)
        self._used: dict[str, int] = defaultdict(int)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return sum(len(v) for v in self._answers.values())

    def answer(self, key: str) -> ChatResponse | None:
        with self._lock:
            rows = self._answers.get(key)
            if not rows:
                return None
            row = rows[min(self._used[key], len(rows) - 1)]
            self._used[key] += 1
        # the source's own length, so that the replaying server applies its caps to it as recorded
        completion = row.get("source_completion_tokens", row.get("completion_tokens"))
        usage = Usage(int(row.get("prompt_tokens") or 0), 0, int(completion or 0))
        return ChatResponse(row["text"], usage, str(row.get("finish_reason") or "stop"))


class LatencyModelServer(ModelServer):
    """Chat through the latency model; embeddings (when an embedder is given) are served at once."""

    def __init__(self, params: LatencyParams, *, chat: ChatModel | None = None,
                 replay: ReplaySource | None = None, embedder: Embedder | None = None,
                 model_name: str = "simulated", log_path: str | Path | None = None,
                 clock: Clock | None = None, port: int = 0, caps: OutputCaps | None = None,
                 bounds: SourceBounds | None = None) -> None:
        if chat is None and replay is None:
            raise ValueError("LatencyModelServer needs a chat model or a replay source")
        self.bounds = bounds or SourceBounds()
        self.params, self.replay, self.source_model = params, replay, chat
        self.caps = caps or OutputCaps({})
        self.kinds: dict[str, int] = defaultdict(int)  # requests served per prompt kind
        self.capped: dict[str, int] = defaultdict(int)  # of which stopped at (or longer than) the cap
        self.truncated: dict[str, int] = defaultdict(int)  # of which finished "length" (any max_tokens)
        self.bounded: dict[str, int] = defaultdict(int)  # of which the source decoded under bounds
        self.shapes: dict[str, int] = defaultdict(int)  # schema-less JSON requests by reply shape
        self.model = LatencyModel(params, clock)
        self._log = JsonlWriter(Path(log_path)) if log_path else None
        self.counts: dict[str, int] = defaultdict(int)
        self._counts_lock = threading.Lock()
        # the base class serves embeddings; chat goes through `generate` below (never batched here:
        # each request has its own modelled latency)
        super().__init__(embedder, _NoBatch(chat), model_name=model_name, port=port)

    def close(self) -> None:
        super().close()
        if self._log is not None:
            self._log.close()

    def generate(self, request: ChatRequest) -> ChatResponse | Exception:
        key, kind = request_key(request), request_kind(request)
        limit = self.caps.limit(kind, request.max_tokens)
        shape, label = reply_shape(request), shape_label(request)
        first = str(request.messages[0].get("content") or "") if request.messages else ""
        schema, bounds = (shape.schema_for(first) if shape is not None else request.json_schema), None
        if schema is not None:
            schema, bounds = self.bounds.fit(schema, limit)
        timing = self.model.admit()
        try:
            start = self.model.clock.now()
            source, result = self._content(key, replace(request, max_tokens=limit, json_schema=schema))
            bounds = bounds if source != "replay" else None
            compute = self.model.clock.now() - start
            if isinstance(result, Exception):
                failed = Charge(kind, 0, None, False, request.max_tokens, limit, bounds, label)
                self._record(key, timing, compute, 0.0, source, None, str(result), failed)
                return result
            own = result.usage.completion_tokens
            charged, cap, hit = self.caps.charged(kind, own, finish_reason=result.finish_reason,
                                                  max_tokens=request.max_tokens)
            cached = self.model.cached_tokens(prompt_text(request), result.usage.prompt_tokens)
            self.model.serve(timing, result.usage.prompt_tokens, cached, charged)
            left = self.model.wait_until_done(timing)
            result.usage = Usage(result.usage.prompt_tokens, cached, charged)
            charge = Charge(kind, own, cap, hit, request.max_tokens, limit, bounds, label)
            self._record(key, timing, compute, max(0.0, -left), source, result, None, charge)
            return result
        finally:
            self.model.release()

    def _content(self, key: str, request: ChatRequest) -> tuple[str, ChatResponse | Exception]:
        """The answer to `request` (its max_tokens already lowered to the cap) and where it came from:
        the recorded one, else the source model's as generated."""
        if self.replay is not None:
            found = self.replay.answer(key)
            if found is not None:
                return "replay", found
            if self.source_model is None:
                return "replay", RuntimeError(f"no recorded answer for request {key}")
        assert self.source_model is not None
        try:
            return (("fallback" if self.replay is not None else "model"),
                    served_answers(self.source_model, [request])[0])
        except Exception as exc:  # the model's failure is the request's answer (HTTP 500)
            return "model", exc

    def _record(self, key: str, timing: Any, compute: float, overrun: float, source: str,
                result: ChatResponse | None, error: str | None, charge: Charge) -> None:
        with self._counts_lock:
            self.counts[source] += 1
            self.counts["overrun"] += overrun > 0
            self.kinds[charge.kind] += 1
            self.capped[charge.kind] += charge.capped
            self.truncated[charge.kind] += result is not None and result.finish_reason == "length"
            self.bounded[charge.kind] += charge.bounds is not None
            if charge.shape is not None:
                self.shapes[charge.shape] += 1
        if self._log is None:
            return
        usage = result.usage if result is not None else Usage()
        self._log.write({
            "key": key, "arrival": round(timing.arrival, 6), "admitted": round(timing.admitted, 6),
            "queue_s": round(timing.queue_s, 6), "running": timing.running, "ttft_s": round(timing.ttft_s, 6),
            "decode_s": round(timing.decode_s, 6), "service_s": round(timing.service_s, 6),
            "compute_s": round(compute, 6), "overrun_s": round(overrun, 6),
            "prompt_tokens": usage.prompt_tokens, "cached_tokens": usage.cached_prompt_tokens,
            "completion_tokens": usage.completion_tokens, "source_completion_tokens": charge.source_tokens,
            "kind": charge.kind, "cap": charge.cap, "capped": charge.capped, "max_tokens": charge.max_tokens,
            "source_max_tokens": charge.source_max_tokens, "bounded": charge.bounds is not None,
            "source_bounds": asdict(charge.bounds) if charge.bounds is not None else None,
            "shape": charge.shape, "shape_role": shape_role(charge.shape), "source": source,
            "finish_reason": result.finish_reason if result is not None else None,
            "text": result.text if result is not None else None, "error": error,
        })

    def summary(self) -> dict[str, Any]:
        """What run.json records about the simulation."""
        with self._counts_lock:
            counts, kinds, capped = dict(self.counts), dict(self.kinds), dict(self.capped)
            truncated, bounded, shapes = dict(self.truncated), dict(self.bounded), dict(self.shapes)
        return {"params": asdict(self.params), "served": counts, "peak_running": self.model.peak_running,
                "replay_answers": len(self.replay) if self.replay is not None else None,
                "output_caps": dict(self.caps.caps), "kinds": kinds, "capped": capped,
                "truncated": truncated, "source_bounds": asdict(self.bounds),
                "bounded": bounded, "shapes": shapes,
                "reply_shapes": {shape.name: shape.describe() for shape in SHAPES}}


@dataclass(frozen=True)
class Charge:
    """What one answer was charged: its prompt kind, the source's completion tokens, the cap applied
    (None: uncapped), whether the answer hit it (stopped at the cap, or recorded longer than it), the
    request's max_tokens, the max_tokens the source was asked for (the lower of it and the cap), the
    bounds the source decoded the schema's arrays and strings under (None: the schema as sent), and the
    reply shape of a schema-less JSON request (`reply_shapes.shape_label`)."""

    kind: str
    source_tokens: int
    cap: int | None
    capped: bool
    max_tokens: int
    source_max_tokens: int
    bounds: SourceBounds | None = None
    shape: str | None = None


class _NoBatch:
    """Stands in for the chat model in the base class: never batched, never called directly."""

    batched = False
    max_concurrency = 1

    def __init__(self, chat: ChatModel | None) -> None:
        self.name = chat.name if chat is not None else "replay"

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResponse | Exception]:
        raise NotImplementedError("LatencyModelServer.generate serves chat")

    def close(self) -> None:
        pass


def _rows(path: Path) -> list[dict[str, Any]]:
    """The complete JSON lines of a file (a line torn by an interruption is skipped)."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            out.append(row)
    return out
