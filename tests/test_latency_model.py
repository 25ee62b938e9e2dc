"""The latency model's shape (on a fake clock) and a loopback round trip through the latency server."""

import json
import threading
import time

import httpx
import pytest

from benchmarks.serving.latency_model import FakeClock, LatencyModel, LatencyParams, PrefixCache
from benchmarks.serving.latency_server import LatencyModelServer, ReplaySource
from benchmarks.serving.proxy import LoggingProxy
from memforest.llm.calllog import CallLog
from memforest.llm.testing import ScriptedChatModel

PARAMS = LatencyParams(name="test", ttft_base_s=0.01, prefill_tokens_per_s=1000.0, prefill_load=0.05,
                       decode_s_per_token=0.01, decode_batch_slope=0.1, max_concurrency=3, block_chars=8,
                       cache_blocks=1000)


def _service(model: LatencyModel, prompt: int, completion: int, running: int = 1, cached: int = 0) -> float:
    return model.ttft(prompt, cached, running) + completion * model.time_per_token(running)


def test_latency_grows_with_prompt_length_output_and_load():
    model = LatencyModel(PARAMS, FakeClock())
    prompts = [_service(model, p, 50) for p in (10, 100, 1000, 10_000)]
    assert prompts == sorted(prompts) and len(set(prompts)) == 4
    outputs = [_service(model, 100, c) for c in (1, 10, 100)]
    assert outputs == sorted(outputs) and len(set(outputs)) == 3
    ttfts = [model.ttft(1000, 0, r) for r in (1, 2, 8, 64)]
    assert ttfts == sorted(ttfts) and len(set(ttfts)) == 4
    tpots = [model.time_per_token(r) for r in (1, 2, 8, 64)]
    assert tpots == sorted(tpots) and len(set(tpots)) == 4


def test_cache_hits_shorten_prefill():
    model = LatencyModel(PARAMS, FakeClock())
    assert model.ttft(1000, 800, 1) < model.ttft(1000, 0, 1)
    cache = PrefixCache(block_chars=8, capacity_blocks=1000)
    prompt = "system: extract facts. " * 20
    assert cache.lookup_and_insert(prompt + "cell one") == 0.0
    again = cache.lookup_and_insert(prompt + "cell two, another one")
    assert 0.5 < again < 1.0  # the shared prefix is served from the cache, the new tail is not
    assert cache.lookup_and_insert("different start " + prompt) == 0.0  # a prefix cache, not a bag of blocks


def test_prefix_cache_evicts_least_recently_used():
    cache = PrefixCache(block_chars=4, capacity_blocks=4)
    cache.lookup_and_insert("aaaabbbb")
    cache.lookup_and_insert("ccccdddd")
    cache.lookup_and_insert("eeeeffff")  # evicts the first prompt's blocks
    assert cache.lookup_and_insert("aaaabbbb") == 0.0
    assert cache.lookup_and_insert("eeeeffff") == 1.0


def test_serving_waits_for_the_modelled_time_on_a_fake_clock():
    clock = FakeClock(100.0)
    model = LatencyModel(PARAMS, clock)
    timing = model.admit()
    model.serve(timing, 500, 0, 20)
    assert timing.running == 1 and timing.queue_s == 0.0
    left = model.wait_until_done(timing)
    assert left == pytest.approx(timing.service_s)
    assert clock.now() == pytest.approx(100.0 + timing.service_s)
    model.release()
    assert model.running == 0


def test_concurrency_cap_is_respected():
    model = LatencyModel(PARAMS, FakeClock())
    seen, lock = [], threading.Lock()

    def one() -> None:
        timing = model.admit()
        with lock:
            seen.append(model.running)
        time.sleep(0.01)
        model.release()
        assert timing.running <= PARAMS.max_concurrency

    threads = [threading.Thread(target=one) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 12 and max(seen) <= 3 and model.peak_running == 3


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError, match="max_concurrency"):
        LatencyParams(max_concurrency=0)


def _chat(url: str, text: str) -> dict:
    body = {"model": "m", "messages": [{"role": "user", "content": text}], "max_tokens": 16}
    resp = httpx.post(url + "/chat/completions", json=body, timeout=30)
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_loopback_round_trip_through_the_proxy_then_replay(tmp_path):
    fast = LatencyParams(name="fast", ttft_base_s=0.05, prefill_tokens_per_s=1e6, decode_s_per_token=0.001,
                         max_concurrency=4, block_chars=8)
    served = tmp_path / "served_calls.jsonl"
    log = CallLog(tmp_path / "calls.jsonl")
    with LatencyModelServer(fast, chat=ScriptedChatModel(), log_path=served) as server, \
            LoggingProxy(server.base_url, log, system="s") as proxy:
        start = time.perf_counter()
        first = _chat(proxy.base_url, "hello there, a long enough prompt")
        elapsed = time.perf_counter() - start
        second = _chat(proxy.base_url, "hello there, a long enough prompt")
        assert server.summary()["served"]["model"] == 2
    assert elapsed >= 0.05  # held back by the model
    assert first["choices"][0]["message"]["content"] == second["choices"][0]["message"]["content"]
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    rows = [json.loads(line) for line in served.read_text().splitlines()]
    assert len(rows) == 2 and {r["source"] for r in rows} == {"model"}
    assert all(r["service_s"] >= 0.05 and r["text"] for r in rows)
    assert len(log.records) == 2 and all(r.stage == "chat" for r in log.records)
    # replay: the recorded answers, no model
    with LatencyModelServer(fast, replay=ReplaySource(served)) as server:
        again = _chat(server.base_url, "hello there, a long enough prompt")
        assert again["choices"][0]["message"]["content"] == first["choices"][0]["message"]["content"]
        body = {"model": "m", "messages": [{"role": "user", "content": "never recorded"}]}
        assert httpx.post(server.base_url + "/chat/completions", json=body, timeout=30).status_code == 500
        assert server.summary()["served"] == {"replay": 2, "overrun": 0}
