"""Whether a new fact states the same thing as an existing canonical fact."""

from __future__ import annotations

from memforest.prompts import PromptSpec

SPEC = PromptSpec("fact_equivalence", 1)

SCHEMA = {
    "type": "object",
    "properties": {"same": {"type": "boolean"}},
    "required": ["same"],
}

SYSTEM = """You compare two memory facts. They are the same fact only if they make the same claim about
the same subject for the same time. A changed value (a new address, a new job, a different amount or
date) is NOT the same fact: it is an update and both must be kept. Answer in JSON."""


def messages(existing: str, new: str) -> tuple[dict[str, str], ...]:
    user = f"Fact A: {existing}\nFact B: {new}\n\nAre A and B the same fact?"
    return ({"role": "system", "content": SYSTEM}, {"role": "user", "content": user})
