"""Prompts, each beside its response schema, with an id and version written into every call record."""

from dataclasses import dataclass


@dataclass(frozen=True)
class PromptSpec:
    id: str
    version: int
