"""LLM judges: a runner over any ChatModel that grades responses with the prompts of `judge_prompts`
(prompts as data, id + version, each beside how its output is read) and returns typed verdicts.

Built-in judges, written for this project:
- `longmemeval`: yes/no, one prompt per LongMemEval question type (the default for LongMemEval);
- `locomo-generous`: CORRECT/WRONG as JSON, lenient about wording and date format (LoCoMo default);
- `strict`: CORRECT/WRONG as JSON, the response must give the gold answer in substance.
Abstention questions are always judged on whether the response declines to answer.
`longmemeval-official` reads the official prompt function from a local LongMemEval checkout at run time.
Every Verdict names the judge, the prompt (id/version, or official file and sha256) and the model,
and carries the judge's `judge_hash` (benchmarks.judging.pinning) and its `repeat`.

A judge asks about each response `repeats` times, repeat r with seed `seed + r`, one verdict per repeat.
A deterministic local judge at temperature 0 (llama.cpp greedy decoding, the scripted model) gives the
same verdict on every repeat by construction: repeats measure a judge only where it samples
(temperature > 0) or where its server is not deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.datasets.records import Question
from benchmarks.judging.judge_prompts import (
    ABSTENTION_PROMPT,
    LABEL_SCHEMA,
    LOCOMO_GENEROUS_PROMPT,
    LONGMEMEVAL_PROMPTS,
    OFFICIAL_MAX_TOKENS,
    OFFICIAL_PROMPT_ID,
    STRICT_PROMPT,
    JudgePrompt,
    OutputFormat,
    load_official_longmemeval,
    official_longmemeval_prompt,
    parse_contains_yes,
    parse_label,
    parse_output,
    parse_yes_no,
)
from memforest.errors import ModelUnavailableError
from memforest.llm.base import ChatModel, ChatRequest, ChatResponse

__all__ = ["load_official_longmemeval", "parse_contains_yes", "parse_label", "parse_yes_no"]  # re-exported

JUDGE_IDS = ("longmemeval", "locomo-generous", "strict", "longmemeval-official")
OFFICIAL_GOLD = "answer_official"  # the record field holding the official gold an erratum replaced
OFFICIAL_GOLD_SUFFIX = "@official_gold"  # the judge id suffix of verdicts graded against that gold


@dataclass(frozen=True)
class JudgeItem:
    """One response to grade. `method`, `dataset` and `attempt` tie it back to its answer record."""

    question_id: str
    question: str
    answer: str
    response: str
    category: str
    abstention: bool = False
    attempt: int = 0
    method: str = ""
    dataset: str = ""
    gold: str = "answer"  # the record field `answer` holds: "answer", or "answer_official" (errata)

    @classmethod
    def from_question(
        cls, question: Question, response: str, attempt: int = 0, method: str = "", dataset: str = ""
    ) -> JudgeItem:
        return cls(
            question.question_id,
            question.question,
            question.answer,
            response,
            question.category,
            question.abstention,
            attempt,
            method,
            dataset,
        )


@dataclass(frozen=True)
class Verdict:
    """One graded response: the raw judge output, its reading, and the judge/prompt/model behind it.
    `parsed` is False when the output could not be read (then `correct` is False)."""

    question_id: str
    attempt: int
    method: str
    dataset: str
    judge_id: str
    prompt_id: str
    prompt_version: int
    prompt_source: str  # "builtin", or the path of the official file
    prompt_sha256: str | None
    judge_model: str
    raw_output: str
    correct: bool
    parsed: bool
    error: str | None = None
    judge_hash: str | None = None  # benchmarks.judging.pinning; None: written before judges were pinned
    repeat: int = 0  # 0..judge.repeats-1
    gold: str = "answer"  # the record field graded against: "answer", or "answer_official" (errata)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class PreparedRequest:
    """A judge request and how to read its output, with where its prompt came from."""

    request: ChatRequest
    output: OutputFormat
    source: str
    sha256: str | None


class Judge:
    """Grades JudgeItems with one judge id on one model; returns `repeats` Verdicts per item, in item
    order (an item's repeats together, repeat 0 first). Repeat r samples with seed `seed + r`."""

    def __init__(
        self,
        model: ChatModel,
        judge_id: str,
        official_dir: str | Path | None,
        max_tokens: int,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int = 0,
        repeats: int = 1,
        judge_hash: str | None = None,
    ) -> None:
        if judge_id not in JUDGE_IDS:
            raise ValueError(f"unknown judge {judge_id!r}; choose one of {', '.join(JUDGE_IDS)}")
        if judge_id == "longmemeval-official" and official_dir is None:
            raise ValueError("the longmemeval-official judge needs official_dir (a LongMemEval checkout)")
        if repeats < 1:
            raise ValueError(f"a judge asks at least once per response, got repeats={repeats}")
        self.model = model
        self.judge_id = judge_id
        self.official_dir = official_dir
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.seed = seed
        self.repeats = repeats
        self.judge_hash = judge_hash

    def prompt_for(self, item: JudgeItem) -> JudgePrompt:
        """The built-in prompt that grades `item` under this judge."""
        if item.abstention:
            return ABSTENTION_PROMPT
        if self.judge_id == "locomo-generous":
            return LOCOMO_GENEROUS_PROMPT
        if self.judge_id == "strict":
            return STRICT_PROMPT
        return LONGMEMEVAL_PROMPTS.get(item.category, LONGMEMEVAL_PROMPTS["default"])

    def prepare(self, item: JudgeItem, repeat: int = 0) -> PreparedRequest:
        """The request for `item` at `repeat` (seed `seed + repeat`)."""
        sampling: dict[str, Any] = {"temperature": self.temperature, "top_p": self.top_p,
                                    "seed": self.seed + repeat}
        if self.judge_id == "longmemeval-official":
            assert self.official_dir is not None
            text, source, sha = official_longmemeval_prompt(
                self.official_dir, item.category, item.question, item.answer, item.response, item.abstention
            )
            request = ChatRequest(
                messages=({"role": "user", "content": text},),
                stage="judge",
                prompt_id=OFFICIAL_PROMPT_ID,
                max_tokens=OFFICIAL_MAX_TOKENS,
                allow_truncation=True,
                **sampling,
            )
            return PreparedRequest(request, "contains_yes", source, sha)
        prompt = self.prompt_for(item)
        text = prompt.template.format(question=item.question, answer=item.answer, response=item.response)
        schema = LABEL_SCHEMA if prompt.output == "json_label" else None
        request = ChatRequest(
            messages=({"role": "user", "content": text},),
            stage="judge",
            prompt_id=prompt.prompt_id,
            prompt_version=prompt.version,
            json_schema=schema,
            max_tokens=self.max_tokens,
            allow_truncation=schema is None,
            **sampling,
        )
        return PreparedRequest(request, prompt.output, "builtin", None)

    def judge(self, items: Sequence[JudgeItem], repeats: Sequence[int] | None = None) -> list[Verdict]:
        """Verdicts of `items` at each of `repeats` (every repeat unless given), item by item."""
        asked = [(item, r) for item in items for r in (range(self.repeats) if repeats is None else repeats)]
        prepared = [self.prepare(item, r) for item, r in asked]
        results = self._generate([p.request for p in prepared])
        for result in results:
            if isinstance(result, ModelUnavailableError):  # a verdict needs a judge that is there
                raise result
        return [
            self._verdict(item, p, result, r)
            for (item, r), p, result in zip(asked, prepared, results, strict=True)
        ]

    def _generate(self, requests: list[ChatRequest]) -> list[ChatResponse | Exception]:
        if getattr(self.model, "batched", True) or len(requests) <= 1:
            try:
                return list(self.model.generate(requests))
            except Exception as exc:  # a failed call becomes a recorded error per item
                return [exc] * len(requests)
        workers = max(1, int(getattr(self.model, "max_concurrency", 1)))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(self._generate_one, requests))

    def _generate_one(self, request: ChatRequest) -> ChatResponse | Exception:
        try:
            return self.model.generate([request])[0]
        except Exception as exc:  # a failed call becomes a recorded error, not a lost batch
            return exc

    def _verdict(
        self, item: JudgeItem, prepared: PreparedRequest, result: ChatResponse | Exception, repeat: int = 0
    ) -> Verdict:
        model_name = getattr(self.model, "name", type(self.model).__name__)
        error: str | None = None
        raw = ""
        parsed: bool | None = None
        if isinstance(result, Exception):
            error = f"{type(result).__name__}: {result}"
        else:
            raw = result.text
            model_name = result.model or model_name
            parsed = parse_output(prepared.output, raw)
        return Verdict(
            question_id=item.question_id,
            attempt=item.attempt,
            method=item.method,
            dataset=item.dataset,
            judge_id=self.judge_id,
            prompt_id=prepared.request.prompt_id,
            prompt_version=prepared.request.prompt_version,
            prompt_source=prepared.source,
            prompt_sha256=prepared.sha256,
            judge_model=model_name,
            raw_output=raw,
            correct=bool(parsed),
            parsed=parsed is not None,
            error=error,
            judge_hash=self.judge_hash,
            repeat=repeat,
            gold=item.gold,
        )
