"""LLM judges: prompts as data (id + version), verdict parsing, and a runner over any ChatModel.

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

import ast
import hashlib
import json
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from benchmarks.datasets.records import Question
from memforest.errors import ModelUnavailableError
from memforest.llm.base import ChatModel, ChatRequest, ChatResponse

OutputFormat = Literal["yes_no", "contains_yes", "json_label"]


@dataclass(frozen=True)
class JudgePrompt:
    prompt_id: str
    version: int
    template: str  # format fields: question, answer, response
    output: OutputFormat


_ONE_WORD = "\n\nReply with one word: yes or no."
_YES_NO_TAIL = (
    "\n\nQuestion: {question}\nReference answer: {answer}\nResponse to grade: {response}" + _ONE_WORD
)
_SAME_ANSWER = (
    "Grade a response to a question about a user's chat history against the reference answer. "
    "Say yes if the response gives the reference answer, in any wording, or reasons its way to it. "
    "Say no if it gives another answer, covers only part of what the reference requires, or does not answer."
)
LONGMEMEVAL_PROMPTS: dict[str, JudgePrompt] = {
    "default": JudgePrompt("judge.longmemeval.default", 1, _SAME_ANSWER + _YES_NO_TAIL, "yes_no"),
    "temporal-reasoning": JudgePrompt(
        "judge.longmemeval.temporal",
        1,
        _SAME_ANSWER + " Counts of days, weeks or months that are off by one from the reference "
        "(19 days where the reference says 18) still earn a yes." + _YES_NO_TAIL,
        "yes_no",
    ),
    "knowledge-update": JudgePrompt(
        "judge.longmemeval.update",
        1,
        _SAME_ANSWER + " The fact may have changed over time: a response that also mentions older values "
        "earns a yes, provided it gives the reference (latest) value as the answer." + _YES_NO_TAIL,
        "yes_no",
    ),
    "single-session-preference": JudgePrompt(
        "judge.longmemeval.preference",
        1,
        "Grade a personalised response. The rubric below describes what a good response looks like for this "
        "user. Say yes if the response draws on the user's own details the way the rubric describes; it need "
        "not cover every point of the rubric. Say no if it ignores or gets wrong what the user told before."
        "\n\nQuestion: {question}\nRubric: {answer}\nResponse to grade: {response}" + _ONE_WORD,
        "yes_no",
    ),
}
ABSTENTION_PROMPT = JudgePrompt(
    "judge.abstention",
    1,
    "This question cannot be answered from the user's history; the note says why. Say yes if the response "
    "recognises that: it says it does not know, that the information is missing or incomplete, or that only "
    "related information was mentioned. Say no if it answers as though the question were answerable."
    "\n\nQuestion: {question}\nNote: {answer}\nResponse to grade: {response}" + _ONE_WORD,
    "yes_no",
)
_JSON_TAIL = (
    "\n\nQuestion: {question}\nGold answer: {answer}\nResponse to grade: {response}\n\n"
    'Reply with JSON only: {{"reason": "<one short sentence>", "label": "CORRECT" or "WRONG"}}.'
)
LOCOMO_GENEROUS_PROMPT = JudgePrompt(
    "judge.locomo.generous",
    1,
    "Grade a response to a question about a long conversation between two people against the gold answer. "
    "Be generous: label it CORRECT when it refers to the same thing, person, place, event or time as the "
    "gold answer, even if it is worded differently, longer, or more detailed. A date or period counts as the "
    "same when it names the same time in another format or relative to a nearby date. Label it WRONG when it "
    "points to something else, misses the point of the gold answer, or does not answer." + _JSON_TAIL,
    "json_label",
)
STRICT_PROMPT = JudgePrompt(
    "judge.strict",
    1,
    "Grade a response against the gold answer strictly. Label it CORRECT only if it states the gold answer "
    "in substance: the same entities, the same numbers, and dates at the same precision; wording may differ. "
    "Label it WRONG if it gives only part of the gold answer, hedges between options, or adds any claim that "
    "contradicts the gold answer." + _JSON_TAIL,
    "json_label",
)
LABEL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "reason": {"type": "string", "maxLength": 300},
        "label": {"type": "string", "enum": ["CORRECT", "WRONG"]},
    },
    "required": ["reason", "label"],
}
JUDGE_IDS = ("longmemeval", "locomo-generous", "strict", "longmemeval-official")
OFFICIAL_PROMPT_ID = "judge.longmemeval.official"
OFFICIAL_GOLD = "answer_official"  # the record field holding the official gold an erratum replaced
OFFICIAL_GOLD_SUFFIX = "@official_gold"  # the judge id suffix of verdicts graded against that gold
OFFICIAL_MAX_TOKENS = 10  # as the official evaluation script: only whether "yes" appears matters


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


_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL | re.IGNORECASE)


def _visible(text: str) -> str:
    return _THINK.sub("", text).strip()


def parse_yes_no(text: str) -> bool | None:
    """The first word decides: yes -> True, no -> False, anything else -> None."""
    match = re.search(r"[A-Za-z]+", _visible(text))
    word = match.group(0).lower() if match else ""
    return True if word == "yes" else False if word == "no" else None


def parse_contains_yes(text: str) -> bool:
    """The official LongMemEval rule: correct when "yes" occurs anywhere in the output."""
    return "yes" in text.lower()


def parse_label(text: str) -> bool | None:
    """`{"label": "CORRECT"|"WRONG"}` -> bool; falls back to the first bare label in the text."""
    visible = _visible(text)
    outer = visible[visible.find("{") : visible.rfind("}") + 1]
    for blob in [visible, outer, *re.findall(r"\{.*?\}", visible, re.DOTALL)]:
        try:
            data = json.loads(blob, strict=False)
        except json.JSONDecodeError:
            continue
        label = str(data.get("label", "")).strip().upper() if isinstance(data, dict) else ""
        if label in ("CORRECT", "WRONG"):
            return label == "CORRECT"
    match = re.search(r"\b(CORRECT|WRONG|INCORRECT)\b", visible) or re.search(
        r"\b(correct|wrong|incorrect)\b", visible, re.IGNORECASE
    )
    return match.group(1).upper() == "CORRECT" if match else None


def parse_output(output: OutputFormat, text: str) -> bool | None:
    if output == "yes_no":
        return parse_yes_no(text)
    if output == "contains_yes":
        return parse_contains_yes(text)
    return parse_label(text)


@dataclass(frozen=True)
class OfficialLongMemEval:
    """The official `get_anscheck_prompt` read from a LongMemEval checkout, and the file's sha256."""

    path: Path
    sha256: str
    get_anscheck_prompt: Callable[..., str]


def load_official_longmemeval(checkout_dir: str | Path) -> OfficialLongMemEval:
    """Compile only `get_anscheck_prompt` from `src/evaluation/evaluate_qa.py` in `checkout_dir`.

    The module itself imports `openai` and `backoff` at the top, which this project does not need, so
    the function is taken from the parsed source instead of importing the whole file."""
    path = (Path(checkout_dir).expanduser() / "src" / "evaluation" / "evaluate_qa.py").resolve()
    if not path.is_file():
        raise FileNotFoundError(f"no LongMemEval evaluator at {path}; point judge.official_dir at a checkout")
    return _compile_official(str(path), path.stat().st_mtime_ns)


@lru_cache(maxsize=4)
def _compile_official(path_text: str, mtime_ns: int) -> OfficialLongMemEval:
    path = Path(path_text)
    raw = path.read_bytes()
    source = raw.decode("utf-8")
    tree = ast.parse(source, filename=str(path))
    functions: list[ast.stmt] = [
        node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "get_anscheck_prompt"
    ]
    if not functions:
        raise ValueError(f"{path} defines no get_anscheck_prompt")
    namespace: dict[str, Any] = {}
    exec(compile(ast.Module(body=functions, type_ignores=[]), str(path), "exec"), namespace)
    return OfficialLongMemEval(path, hashlib.sha256(raw).hexdigest(), namespace["get_anscheck_prompt"])


def official_longmemeval_prompt(
    checkout_dir: str | Path,
    question_type: str,
    question: str,
    answer: str,
    response: str,
    abstention: bool = False,
) -> tuple[str, str, str]:
    """The official judge prompt text, with the source file's path and sha256."""
    official = load_official_longmemeval(checkout_dir)
    text = official.get_anscheck_prompt(question_type, question, answer, response, abstention=abstention)
    return text, str(official.path), official.sha256


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
