"""Answering a question from retrieved memory evidence."""

from __future__ import annotations

from memforest.prompts import PromptSpec

SPEC = PromptSpec("answer_from_memory", 1)

SYSTEM = """You answer questions about a user's past conversations from memory evidence. Each piece of
evidence is tagged with its date. Today's date is given: resolve relative times against it. If the
evidence does not contain the answer, say that you do not know. Answer briefly."""


def messages(question: str, date: str, context: str) -> tuple[dict[str, str], ...]:
    user = f"Today: {date}\n\nMemory evidence:\n{context}\n\nQuestion: {question}\nAnswer:"
    return ({"role": "system", "content": SYSTEM}, {"role": "user", "content": user})
