"""Answer prompts of the harness: one per dataset kind, each with an id and a version.

Every method (MemForest and the baselines) answers through the same prompt for a dataset, so that
accuracy differences come from the retrieved memory, not from the prompt.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from benchmarks.datasets.records import DAY_NAMES, MONTH_NAMES
from memforest.llm.base import ChatRequest, Message


@dataclass(frozen=True)
class AnswerPrompt:
    prompt_id: str
    version: int
    system: str
    user: str  # format fields: context, question, date_line


LONGMEMEVAL_ANSWER = AnswerPrompt(
    prompt_id="answer.longmemeval",
    version=1,
    system=(
        "You are the memory of a personal assistant. Below are notes recovered from earlier chats "
        "between the user and the assistant, each with the date it comes from. Answer the user's "
        "question from these notes alone.\n"
        "- When notes disagree, the most recent one describes the current state.\n"
        "- Work out dates, durations and counts from the dates on the notes and today's date; "
        "'yesterday' or 'last week' in a note is relative to that note's date.\n"
        "- For counts or totals, add up every distinct item across all notes.\n"
        "- If the notes do not contain what is asked, say that you do not have that information.\n"
        "- Keep the answer short: the fact itself, with a brief reason only when you calculated something."
    ),
    user="Memory notes:\n{context}\n\n{date_line}Question: {question}\nAnswer:",
)

LOCOMO_ANSWER = AnswerPrompt(
    prompt_id="answer.locomo",
    version=1,
    system=(
        "You have notes from a long, multi-session conversation between two people. Each note carries "
        "the date of the session it comes from. Answer the question about these people from the notes.\n"
        "- Give a short phrase, not a sentence, whenever possible.\n"
        "- Turn relative times into calendar dates using the session date (for example, 'last Friday' "
        "in a session of 12 May 2023 is 5 May 2023).\n"
        "- If several notes are needed, combine them; if they disagree, prefer the later one.\n"
        "- If the notes say nothing about it, answer that it is not mentioned."
    ),
    user="Conversation notes:\n{context}\n\n{date_line}Question: {question}\nShort answer:",
)

ANSWER_PROMPTS: dict[str, AnswerPrompt] = {"longmemeval": LONGMEMEVAL_ANSWER, "locomo": LOCOMO_ANSWER}


def format_reference_date(moment: datetime) -> str:
    """`Tuesday, 30 May 2023, 23:40`, independent of the locale."""
    return (
        f"{DAY_NAMES[moment.weekday()]}, {moment.day} {MONTH_NAMES[moment.month - 1]} "
        f"{moment.year}, {moment:%H:%M}"
    )


def build_answer_messages(
    dataset_kind: str, question: str, question_date: datetime | None, context: str
) -> tuple[tuple[Message, ...], str, int]:
    """Messages asking for a concise answer, with the prompt's id and version."""
    if dataset_kind not in ANSWER_PROMPTS:
        raise ValueError(f"no answer prompt for dataset kind {dataset_kind!r}")
    prompt = ANSWER_PROMPTS[dataset_kind]
    date_line = f"Today's date: {format_reference_date(question_date)}\n" if question_date else ""
    user = prompt.user.format(
        context=context.strip() or "(no notes found)", question=question.strip(), date_line=date_line
    )
    messages: tuple[Message, ...] = (
        {"role": "system", "content": prompt.system},
        {"role": "user", "content": user},
    )
    return messages, prompt.prompt_id, prompt.version


def answer_request(
    dataset_kind: str,
    question: str,
    question_date: datetime | None,
    context: str,
    max_tokens: int,
    seed: int | None = None,
    temperature: float = 0.0,
) -> ChatRequest:
    """A ChatRequest (stage "answer") for `build_answer_messages`."""
    messages, prompt_id, version = build_answer_messages(dataset_kind, question, question_date, context)
    return ChatRequest(
        messages=messages,
        stage="answer",
        prompt_id=prompt_id,
        prompt_version=version,
        max_tokens=max_tokens,
        temperature=temperature,
        seed=seed,
        allow_truncation=True,
    )


TEMPLATE_TOKENS = 8  # per message: what a chat template adds around it (role markers, separators)


def context_room(dataset_kind: str, question: str, question_date: datetime | None, context_tokens: int,
                 max_tokens: int, count: Callable[[str], int]) -> int:
    """Tokens left for the context in the answer prompt: the served window (`context_tokens`) less the
    answer's `max_tokens` and the prompt's own text (its messages with an empty context)."""
    messages, _, _ = build_answer_messages(dataset_kind, question, question_date, "")
    text = sum(count(m["content"]) + TEMPLATE_TOKENS for m in messages)
    return context_tokens - max_tokens - text
