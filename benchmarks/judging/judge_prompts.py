"""The judges' prompts as data (id + version), each beside how its output is read (`OutputFormat`:
yes/no, "yes" anywhere, or a CORRECT/WRONG label as JSON under `LABEL_SCHEMA`), and the official
LongMemEval prompt, read from a local checkout at run time (`judges` names the judges that use them)."""

from __future__ import annotations

import ast
import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

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
OFFICIAL_PROMPT_ID = "judge.longmemeval.official"
OFFICIAL_MAX_TOKENS = 10  # as the official evaluation script: only whether "yes" appears matters


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
