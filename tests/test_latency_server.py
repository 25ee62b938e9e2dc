"""The simulated server's content source: it is asked for at most min(max_tokens, cap) tokens, an answer
stopped there comes back as vLLM returns a cut answer (HTTP 200, the text so far, finish_reason "length"),
a cut JSON answer is served as generated (never turned into a server error), and all of it is recorded
per call and counted."""

import json
from collections.abc import Sequence

import httpx
import pytest

from benchmarks.serving.latency_model import LatencyParams
from benchmarks.serving.latency_server import LatencyModelServer, ReplaySource
from benchmarks.serving.model_server import ModelServer, UncheckedChatModel, served_answers
from benchmarks.serving.output_caps import OutputCaps
from memforest.llm.base import ChatRequest, ChatResponse, InvalidOutputError, Usage, generate_each

FAST = LatencyParams(name="fast", ttft_base_s=0.001, prefill_tokens_per_s=1e6, decode_s_per_token=0.0001,
                     max_concurrency=4, block_chars=8)
RAMBLING_JSON = '{"facts": [' + ", ".join(f'"fact number {i}"' for i in range(100)) + "]}"


class TokenModel:
    """A test model that honours max_tokens as an engine does: it writes `text` word by word and stops at
    max_tokens with finish_reason "length". `generate` checks answers (as the embedded model does);
    `generate_unchecked` returns them as generated. Records the max_tokens of every request."""

    batched = False
    max_concurrency = 1
    name = "token-model"

    def __init__(self, text: str) -> None:
        self.words = text.split(" ")
        self.asked: list[int] = []

    def _complete(self, request: ChatRequest) -> ChatResponse:
        self.asked.append(request.max_tokens)
        cut = len(self.words) > request.max_tokens
        words = self.words[: request.max_tokens]
        return ChatResponse(" ".join(words), Usage(7, 0, len(words)), "length" if cut else "stop", self.name)

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResponse | Exception]:
        return generate_each(requests, self._complete)

    def generate_unchecked(self, requests: Sequence[ChatRequest]) -> list[ChatResponse | Exception]:
        return [self._complete(r) for r in requests]

    def close(self) -> None:
        pass


class CheckedOnly(TokenModel):
    """The same model without an unchecked path."""

    generate_unchecked = None  # type: ignore[assignment]


def _post(url: str, max_tokens: int, json_object: bool = True) -> httpx.Response:
    body = {"model": "m", "messages": [{"role": "user", "content": "extract the facts"}],
            "max_tokens": max_tokens, **({"response_format": {"type": "json_object"}} if json_object else {})}
    return httpx.post(url + "/chat/completions", json=body, timeout=30)


def _rows(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_source_stops_at_the_cap_and_the_cut_json_comes_back_with_finish_length(tmp_path):
    served = tmp_path / "served_calls.jsonl"
    model = TokenModel(RAMBLING_JSON)
    with LatencyModelServer(FAST, chat=model, log_path=served, caps=OutputCaps({"json": 30})) as server:
        capped = _post(server.base_url, 2000)
        own_limit = _post(server.base_url, 20)  # the request's own max_tokens, below the cap
        summary = server.summary()
    assert model.asked == [30, 20]
    assert capped.status_code == 200 and own_limit.status_code == 200
    choice = capped.json()["choices"][0]
    assert choice["finish_reason"] == "length"
    assert choice["message"]["content"] == " ".join(RAMBLING_JSON.split(" ")[:30])
    with pytest.raises(json.JSONDecodeError):  # served as generated: unterminated, not repaired
        json.loads(choice["message"]["content"])
    assert capped.json()["usage"]["completion_tokens"] == 30
    rows = _rows(served)
    assert [(r["max_tokens"], r["source_max_tokens"], r["source_completion_tokens"], r["completion_tokens"],
             r["finish_reason"], r["capped"], r["error"]) for r in rows] == [
        (2000, 30, 30, 30, "length", True, None), (20, 20, 20, 20, "length", False, None)]
    assert rows[0]["decode_s"] == pytest.approx(30 * FAST.decode_s_per_token, rel=1e-3)
    assert summary["capped"] == {"json": 1} and summary["truncated"] == {"json": 2}


def test_an_answer_within_the_cap_is_untouched(tmp_path):
    served = tmp_path / "served_calls.jsonl"
    model = TokenModel('{"facts": ["a short one"]}')
    with LatencyModelServer(FAST, chat=model, log_path=served, caps=OutputCaps({"default": 30})) as server:
        reply = _post(server.base_url, 512).json()
        summary = server.summary()
    assert reply["choices"][0]["finish_reason"] == "stop"
    assert json.loads(reply["choices"][0]["message"]["content"]) == {"facts": ["a short one"]}
    assert summary["capped"] == {"json": 0} and summary["truncated"] == {"json": 0}
    assert _rows(served)[0]["source_max_tokens"] == 30


def test_a_model_without_an_unchecked_path_keeps_its_checked_answers():
    request = ChatRequest(messages=({"role": "user", "content": "x"},), stage="served", prompt_id="external",
                          json_schema={"type": "object"}, max_tokens=5, allow_truncation=True)
    unchecked = served_answers(TokenModel(RAMBLING_JSON), [request])[0]
    assert isinstance(unchecked, ChatResponse) and unchecked.finish_reason == "length"
    assert isinstance(TokenModel(""), UncheckedChatModel)
    assert not isinstance(CheckedOnly(""), UncheckedChatModel)
    assert isinstance(served_answers(CheckedOnly(RAMBLING_JSON), [request])[0], InvalidOutputError)


def test_the_plain_model_server_serves_cut_json_as_generated():
    with ModelServer(chat=TokenModel(RAMBLING_JSON), model_name="m") as server:
        reply = _post(server.base_url, 12)
    assert reply.status_code == 200 and reply.json()["choices"][0]["finish_reason"] == "length"


def test_a_capped_answer_replays_with_its_finish_reason_and_charge(tmp_path):
    served = tmp_path / "served_calls.jsonl"
    caps = OutputCaps({"json": 30})
    with LatencyModelServer(FAST, chat=TokenModel(RAMBLING_JSON), log_path=served, caps=caps) as server:
        first = _post(server.base_url, 2000).json()
    with LatencyModelServer(FAST, replay=ReplaySource(served), caps=caps) as server:
        again = _post(server.base_url, 2000).json()
        summary = server.summary()
    assert again["choices"] == first["choices"] and again["usage"]["completion_tokens"] == 30
    assert summary["served"]["replay"] == 1 and summary["capped"] == {"json": 1}


@pytest.mark.slow
def test_the_embedded_model_stops_at_the_cap_and_its_cut_json_is_served(tmp_path):
    from memforest.config import LLMConfig
    from memforest.llm.llamacpp import LlamaCppChatModel

    served = tmp_path / "served_calls.jsonl"
    chat = LlamaCppChatModel(LLMConfig(instances=1, threads_per_instance=1, context_tokens=1024))
    try:
        with LatencyModelServer(FAST, chat=chat, log_path=served, caps=OutputCaps({"json": 16})) as server:
            body = {"model": "m", "max_tokens": 2000, "response_format": {"type": "json_object"},
                    "messages": [{"role": "user", "content": "Write a long JSON object about cats."}]}
            reply = httpx.post(server.base_url + "/chat/completions", json=body, timeout=120)
    finally:
        chat.close()
    assert reply.status_code == 200
    row = _rows(served)[0]
    assert (row["source_max_tokens"], row["max_tokens"]) == (16, 2000)
    assert row["source_completion_tokens"] <= 16 and row["error"] is None
    assert reply.json()["choices"][0]["finish_reason"] == row["finish_reason"]
    assert row["capped"] == (row["finish_reason"] == "length")
