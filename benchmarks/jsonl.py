"""The one JSONL appender of the harness and its servers: one JSON object per line, each line written
and flushed in a single call, a line torn by an earlier interruption ended first."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memforest.llm.calllog import ends_with_newline


class JsonlWriter:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._file = path.open("a", encoding="utf-8")
        if path.stat().st_size and not ends_with_newline(path):
            self._file.write("\n")
            self._file.flush()

    def write(self, row: Mapping[str, Any]) -> None:
        line = json.dumps(row, ensure_ascii=False, default=str) + "\n"
        with self._lock:
            self._file.write(line)
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()
