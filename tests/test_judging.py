"""Judges: prompt selection, request shape, verdict parsing and records, with a scripted fake model."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from benchmarks.datasets import load_dataset
from benchmarks.judging.judges import (
    Judge,
    JudgeItem,
    load_official_longmemeval,
    official_longmemeval_prompt,
    parse_contains_yes,
    parse_label,
    parse_yes_no,
)
from memforest.llm.base import ChatRequest, ChatResponse


def judge_on(model: object, judge_id: str = "longmemeval", official_dir: Path | None = None,
             max_tokens: int = 192) -> Judge:
    return Judge(model, judge_id, official_dir, max_tokens)  # type: ignore[arg-type]


class FakeJudgeModel:
    """Answers every request with `reply(request)`; records what it was asked."""

    def __init__(
        self,
        reply: Callable[[ChatRequest], ChatResponse | Exception],
        batched: bool = True,
        max_concurrency: int = 1,
        name: str = "fake-judge",
    ) -> None:
        self.reply = reply
        self.batched = batched
        self.max_concurrency = max_concurrency
        self.name = name
        self.calls: list[list[ChatRequest]] = []
        self._lock = threading.Lock()

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResponse | Exception]:
        with self._lock:
            self.calls.append(list(requests))
        return [self.reply(request) for request in requests]

    def close(self) -> None:
        pass


def _text(text: str) -> Callable[[ChatRequest], ChatResponse]:
    return lambda request: ChatResponse(text=text)


def _item(category: str = "multi-session", abstention: bool = False, qid: str = "q1") -> JudgeItem:
    return JudgeItem(
        question_id=qid,
        question="How many races?",
        answer="3",
        response="Three races.",
        category=category,
        abstention=abstention,
        attempt=2,
        method="memforest",
        dataset="sample",
    )


def test_parse_yes_no() -> None:
    assert parse_yes_no("Yes") is True
    assert parse_yes_no("  **yes.**") is True
    assert parse_yes_no("No, the response says Boston.") is False
    assert parse_yes_no("<think>it says yes somewhere</think>\nNO") is False
    assert parse_yes_no("Maybe") is None
    assert parse_yes_no("") is None


def test_parse_contains_yes_matches_the_official_rule() -> None:
    assert parse_contains_yes("Yes.") is True
    assert parse_contains_yes("no") is False


def test_parse_label() -> None:
    assert parse_label('{"reason": "same city", "label": "CORRECT"}') is True
    assert parse_label('```json\n{"label": "WRONG"}\n```') is False
    assert parse_label('{"label": "correct"}') is True
    assert parse_label('{"reason": "a {nested} brace", "label": "WRONG"}') is False
    assert parse_label("label: CORRECT (it names the same place)") is True
    assert parse_label("This is INCORRECT.") is False
    assert parse_label('{"label": "CORRECT"') is True  # truncated JSON, regex fallback
    assert parse_label("no idea") is None


def test_longmemeval_judge_picks_type_prompts() -> None:
    model = FakeJudgeModel(_text("yes"))
    judge = judge_on(model)
    items = [
        _item("temporal-reasoning"),
        _item("knowledge-update"),
        _item("single-session-preference"),
        _item("single-session-user"),
        _item("multi-session", abstention=True),
    ]
    verdicts = judge.judge(items)
    assert [v.prompt_id for v in verdicts] == [
        "judge.longmemeval.temporal",
        "judge.longmemeval.update",
        "judge.longmemeval.preference",
        "judge.longmemeval.default",
        "judge.abstention",
    ]
    assert len(model.calls) == 1
    request = model.calls[0][0]
    assert request.stage == "judge" and request.prompt_version == 1 and request.json_schema is None
    assert request.messages[0]["role"] == "user"
    content = request.messages[0]["content"]
    assert "How many races?" in content and "Three races." in content and "off by one" in content
    verdict = verdicts[0]
    assert verdict.correct and verdict.parsed and verdict.error is None
    assert (verdict.question_id, verdict.attempt, verdict.method, verdict.dataset) == (
        "q1",
        2,
        "memforest",
        "sample",
    )
    assert verdict.judge_id == "longmemeval" and verdict.judge_model == "fake-judge"
    assert (
        verdict.prompt_source == "builtin" and verdict.prompt_sha256 is None and verdict.raw_output == "yes"
    )
    assert verdict.to_dict()["correct"] is True


def test_json_judges_and_unparsable_output() -> None:
    model = FakeJudgeModel(
        lambda r: ChatResponse(text='{"reason": "ok", "label": "WRONG"}', model="served-name")
    )
    verdicts = judge_on(model, "locomo-generous").judge(
        [_item("single-hop"), _item("adversarial", abstention=True)]
    )
    assert verdicts[0].prompt_id == "judge.locomo.generous" and verdicts[0].judge_model == "served-name"
    assert not verdicts[0].correct and verdicts[0].parsed
    assert model.calls[0][0].json_schema is not None and model.calls[0][1].json_schema is None
    assert verdicts[1].prompt_id == "judge.abstention" and not verdicts[1].parsed
    strict = judge_on(FakeJudgeModel(_text("CORRECT")), "strict").judge([_item()])[0]
    assert strict.prompt_id == "judge.strict" and strict.correct


def test_failures_become_recorded_errors() -> None:
    def flaky(request: ChatRequest) -> ChatResponse | Exception:
        return (
            TimeoutError("judge timed out") if "bad" in request.messages[0]["content"] else ChatResponse("no")
        )

    items = [_item(qid=f"q{i}") for i in range(5)]
    items[3] = JudgeItem("q3", "bad question", "x", "y", "multi-session")
    model = FakeJudgeModel(flaky, batched=False, max_concurrency=3)
    verdicts = judge_on(model).judge(items)
    assert [v.question_id for v in verdicts] == ["q0", "q1", "q2", "q3", "q4"]
    assert all(len(call) == 1 for call in model.calls) and len(model.calls) == 5
    assert verdicts[3].error == "TimeoutError: judge timed out" and not verdicts[3].correct
    assert not verdicts[3].parsed and verdicts[3].raw_output == ""
    assert all(v.parsed and not v.correct for i, v in enumerate(verdicts) if i != 3)

    def explode(request: ChatRequest) -> ChatResponse:
        raise ConnectionError("down")

    crashed = judge_on(FakeJudgeModel(explode)).judge([_item(), _item(qid="q2")])
    assert all(v.error == "ConnectionError: down" for v in crashed)


def test_judge_items_from_loaded_questions() -> None:
    data = load_dataset("sample")
    items = [
        JudgeItem.from_question(q, "Miami", attempt=0, method="m", dataset=data.name)
        for _, q in data.questions()
    ]
    verdicts = judge_on(FakeJudgeModel(_text("Yes"))).judge(items)
    assert len(verdicts) == data.num_questions and all(v.correct for v in verdicts)
    assert sum(v.prompt_id == "judge.abstention" for v in verdicts) == 1


def test_unknown_or_incomplete_judges() -> None:
    with pytest.raises(ValueError, match="unknown judge"):
        judge_on(FakeJudgeModel(_text("yes")), "lenient")
    with pytest.raises(ValueError, match="official_dir"):
        judge_on(FakeJudgeModel(_text("yes")), "longmemeval-official")


OFFICIAL_STUB = """import openai
import backoff


def get_anscheck_prompt(task, question, answer, response, abstention=False):
    if abstention:
        return "STUB-ABSTAIN|{}|{}|{}".format(question, answer, response)
    return "STUB-{}|{}|{}|{}".format(task, question, answer, response)


if __name__ == "__main__":
    raise SystemExit("not run")
"""


def _checkout(tmp_path: Path) -> Path:
    evaluation = tmp_path / "LongMemEval" / "src" / "evaluation"
    evaluation.mkdir(parents=True)
    (evaluation / "evaluate_qa.py").write_text(OFFICIAL_STUB, encoding="utf-8")
    return tmp_path / "LongMemEval"


def test_official_prompt_is_read_from_a_checkout(tmp_path: Path) -> None:
    checkout = _checkout(tmp_path)
    digest = hashlib.sha256(OFFICIAL_STUB.encode()).hexdigest()
    text, source, sha = official_longmemeval_prompt(checkout, "temporal-reasoning", "Q?", "A", "R")
    assert text == "STUB-temporal-reasoning|Q?|A|R" and sha == digest
    assert source.endswith("src/evaluation/evaluate_qa.py")
    assert load_official_longmemeval(checkout).sha256 == digest
    model = FakeJudgeModel(_text("Yes, it is correct."))
    verdicts = judge_on(model, "longmemeval-official", official_dir=checkout).judge(
        [_item("knowledge-update"), _item("multi-session", abstention=True)]
    )
    requests = model.calls[0]
    assert requests[0].messages[0]["content"].startswith("STUB-knowledge-update|How many races?|3|")
    assert requests[1].messages[0]["content"].startswith("STUB-ABSTAIN|")
    assert requests[0].stage == "judge" and requests[0].max_tokens == 10
    assert all(v.correct and v.prompt_sha256 == digest and v.prompt_source == source for v in verdicts)
    assert verdicts[0].judge_id == "longmemeval-official"


def test_official_prompt_missing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="LongMemEval evaluator"):
        load_official_longmemeval(tmp_path)
    evaluation = tmp_path / "src" / "evaluation"
    evaluation.mkdir(parents=True)
    (evaluation / "evaluate_qa.py").write_text("x = 1\n", encoding="utf-8")
    with pytest.raises(ValueError, match="get_anscheck_prompt"):
        load_official_longmemeval(tmp_path)
