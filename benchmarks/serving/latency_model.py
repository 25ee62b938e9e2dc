"""A vLLM-shaped latency model of one served backbone, for CPU comparisons of write paths.

A request is admitted when fewer than `max_concurrency` requests are running (vLLM's `max_num_seqs`);
later ones wait in a first-come queue. Once admitted, its latency is

    ttft  = ttft_base_s + (uncached + cached_cost * cached) / prefill_tokens_per_s
                          * (1 + prefill_load * (running - 1))
    tpot  = decode_s_per_token * (1 + decode_batch_slope * (running - 1))
    total = ttft + completion_tokens * tpot

where `running` counts the requests in flight at admission (itself included): prefill is slowed by the
decode steps it shares the GPU with (chunked prefill), and each decode step grows with the batch.
`cached` prompt tokens are those whose prefix the automatic prefix cache already holds: the prompt is
cut into blocks of `block_chars` characters and a block is cached when the chain of blocks up to it
was seen before (an LRU of `cache_blocks` blocks), as vLLM hashes KV blocks by their whole prefix.

The parameters are assumptions shaped after vLLM's behaviour, not measurements; the named configs in
`configs/llm/*_simulated.yaml` say where their values come from. Every result produced with the model
is labelled `simulated: true`.

Time is read from a `Clock` (real by default, a `FakeClock` in tests), so the model's shape is
testable without waiting."""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class LatencyParams:
    name: str = "qwen3_30b_a3b_h100"
    ttft_base_s: float = 0.02  # scheduling, tokenisation and detokenisation overhead per request
    prefill_tokens_per_s: float = 12_000.0  # prompt tokens per second of one request prefilled alone
    prefill_load: float = 0.01  # relative prefill slow-down per other running request
    cached_cost: float = 0.0  # cost of a cached prompt token relative to an uncached one
    decode_s_per_token: float = 0.008  # seconds per output token at batch size 1
    decode_batch_slope: float = 0.015  # relative growth of the per-token time per other running request
    max_concurrency: int = 256  # requests running at once; more wait in the queue
    block_chars: int = 64  # prefix-cache block, in characters of the rendered prompt (~16 tokens)
    cache_blocks: int = 12_500  # prefix-cache capacity in blocks (~200k tokens of KV cache)

    def __post_init__(self) -> None:
        positive = ("prefill_tokens_per_s", "decode_s_per_token", "max_concurrency", "block_chars",
                    "cache_blocks")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"latency model {self.name}: {name} must be positive")
        for name in ("ttft_base_s", "prefill_load", "cached_cost", "decode_batch_slope"):
            if getattr(self, name) < 0:
                raise ValueError(f"latency model {self.name}: {name} must not be negative")


class Clock(Protocol):
    def now(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class RealClock:
    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class FakeClock:
    """A clock that only moves when slept on (tests)."""

    def __init__(self, start: float = 0.0) -> None:
        self.t = start
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self.t

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.t += max(0.0, seconds)


class PrefixCache:
    """Which leading part of a prompt the prefix cache holds; an LRU of block hashes."""

    def __init__(self, block_chars: int, capacity_blocks: int) -> None:
        self.block_chars, self.capacity = block_chars, capacity_blocks
        self._blocks: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def _chain(self, text: str) -> list[str]:
        """The hash of every full block together with all blocks before it."""
        out, h = [], hashlib.sha1()
        for start in range(0, len(text) - self.block_chars + 1, self.block_chars):
            h.update(text[start : start + self.block_chars].encode("utf-8", "surrogatepass"))
            out.append(h.hexdigest())
        return out

    def lookup_and_insert(self, text: str) -> float:
        """The fraction of `text` (in characters) served from the cache; the prompt's blocks are then
        cached (most recently used)."""
        chain = self._chain(text)
        with self._lock:
            hit = 0
            for key in chain:
                if key not in self._blocks:
                    break
                hit += 1
            for key in chain:
                self._blocks[key] = None
                self._blocks.move_to_end(key)
            while len(self._blocks) > self.capacity:
                self._blocks.popitem(last=False)
        return hit * self.block_chars / len(text) if text else 0.0


@dataclass
class Timing:
    """How one request was served, in the model's terms."""

    arrival: float
    admitted: float
    running: int  # requests in flight at admission, itself included
    ttft_s: float = 0.0
    decode_s: float = 0.0

    @property
    def queue_s(self) -> float:
        return self.admitted - self.arrival

    @property
    def service_s(self) -> float:
        return self.ttft_s + self.decode_s


class LatencyModel:
    """Admission (the concurrency cap), the prefix cache and the latency formula of one server."""

    def __init__(self, params: LatencyParams, clock: Clock | None = None) -> None:
        self.params = params
        self.clock = clock or RealClock()
        self.cache = PrefixCache(params.block_chars, params.cache_blocks)
        self._cond = threading.Condition()
        self._running = 0
        self.peak_running = 0

    @property
    def running(self) -> int:
        with self._cond:
            return self._running

    def admit(self) -> Timing:
        """Wait (first come, first served) for a free slot; the request then counts as running."""
        arrival = self.clock.now()
        with self._cond:
            while self._running >= self.params.max_concurrency:
                self._cond.wait(timeout=1.0)
            self._running += 1
            self.peak_running = max(self.peak_running, self._running)
            running = self._running
        return Timing(arrival, self.clock.now(), running)

    def release(self) -> None:
        with self._cond:
            self._running -= 1
            self._cond.notify()

    def ttft(self, prompt_tokens: int, cached_tokens: int, running: int) -> float:
        p = self.params
        cached = min(max(cached_tokens, 0), prompt_tokens)
        work = (prompt_tokens - cached) + p.cached_cost * cached
        return p.ttft_base_s + work / p.prefill_tokens_per_s * (1.0 + p.prefill_load * (running - 1))

    def time_per_token(self, running: int) -> float:
        p = self.params
        return p.decode_s_per_token * (1.0 + p.decode_batch_slope * (running - 1))

    def cached_tokens(self, prompt_text: str, prompt_tokens: int) -> int:
        """Prompt tokens the prefix cache serves (its character fraction of the prompt's tokens)."""
        return int(self.cache.lookup_and_insert(prompt_text) * prompt_tokens)

    def serve(self, timing: Timing, prompt_tokens: int, cached_tokens: int, completion_tokens: int) -> Timing:
        """Fill in the modelled service time of an admitted request."""
        timing.ttft_s = self.ttft(prompt_tokens, cached_tokens, timing.running)
        timing.decode_s = completion_tokens * self.time_per_token(timing.running)
        return timing

    def wait_until_done(self, timing: Timing) -> float:
        """Sleep until the modelled finish (admission + service time); the time still left when called
        (negative: the content was ready later than the model says it would be)."""
        left = timing.admitted + timing.service_s - self.clock.now()
        self.clock.sleep(left)
        return left
