"""Responders for the scripted test model, named in config as `llm.responder=responders:<name>`
(pytest puts this folder on the import path)."""

from __future__ import annotations

import re
import time
from typing import Any

from memforest.llm import testing
from memforest.llm.base import ChatRequest


def harness_responder(request: ChatRequest) -> Any:
    """The library's rules, plus the harness's answers (the first note) and judges (yes when every
    word of the gold answer is in the response)."""
    text = request.messages[-1]["content"]
    if request.prompt_id.startswith("answer."):
        notes = [line for line in text.split("\n\n")[0].splitlines()[1:] if line.strip()]
        return notes[0] if notes else "I do not know."
    if request.prompt_id.startswith("judge."):
        gold = re.search(r"(?:Reference answer|Gold answer|Rubric|Note): (.*)", text)
        response = re.search(r"Response to grade: (.*)", text)
        words = set(re.findall(r"\w+", (gold.group(1) if gold else "").lower()))
        hit = (bool(words)
               and words <= set(re.findall(r"\w+", (response.group(1) if response else "").lower())))
        if request.json_schema is not None:
            return {"reason": "scripted", "label": "CORRECT" if hit else "WRONG"}
        return "yes" if hit else "no"
    return testing.rule_responder(request)


def slow_harness_responder(request: ChatRequest) -> Any:
    """`harness_responder` after a pause, so that a run lasts long enough to be interrupted."""
    time.sleep(0.05)
    return harness_responder(request)


BUSY = {"answers": False}  # set by a test: answers fail as an overloaded server fails them


def busy_answer_responder(request: ChatRequest) -> Any:
    """`harness_responder`, but answer requests time out while BUSY["answers"] is set."""
    if BUSY["answers"] and request.prompt_id.startswith("answer."):
        raise TimeoutError("the server took too long")
    return harness_responder(request)
