"""Store commands of the `memforest` command line."""

from __future__ import annotations

import argparse


def add_commands(sub: argparse._SubParsersAction) -> None:  # noqa: SLF001
    """Registered later by the store and query layers."""
