"""A separate process that changes a cache file in place while its memory is open, for the tests of
mapped caches (a crash shows as a negative return code, not a dead test runner).

Usage: python cache_probe.py build STORE | answers STORE | damage STORE FILE DAMAGE [mapped]
`build` writes a store of a few sessions (user `u`, its tables partitioned) and its caches; `answers`
prints the answers to `QUESTIONS` as JSON; `damage` opens the memory, answers, applies DAMAGE to
the cache file FILE (in `cache/`), answers again and prints {"before", "after", "mapped" (maps in
use before the damage), "reloaded" (whether the version was read again)} as JSON. With `mapped`,
every cache file is memory-mapped, however small (else small ones are read into memory)."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

QUESTIONS = ["Where did I move to?", "What do I keep near the door in Boston?", "Denver trip plans",
             "item3x2 Miami"]


def small_tables() -> None:
    """The bounds the stores of these tests are built with, so their tables are partitioned."""
    import memforest.index.forest_index
    import memforest.resident.vector_table

    memforest.resident.vector_table.EXACT_ROWS = 12
    memforest.index.forest_index.ROOTS_EXACT_ROWS = 4


def open_memory(store: Path) -> Any:
    from memforest.api import MemForest
    from memforest.config import MemForestConfig
    from memforest.llm.testing import HashEmbedder, ScriptedChatModel

    return MemForest(store, MemForestConfig(), llm=ScriptedChatModel(), embedder=HashEmbedder())


def answers(forest: Any, user: str = "u") -> list[list[list[object]]]:
    out = []
    for q in QUESTIONS:
        result = forest.query(user, q, answer=False)
        out.append([[e.id, e.text, round(e.score, 6)] for e in result.evidence])
    return out


def _in_place(path: Path, change: Callable[[bytes], bytes]) -> None:
    """Rewrite the file's bytes through the same inode (as `cp` over it, or an editor, would)."""
    data = path.read_bytes()
    with open(path, "r+b") as f:
        new = change(data)
        f.seek(0)
        f.write(new)
        f.truncate(len(new))


def _flip_keep_time(path: Path) -> None:
    st = path.stat()
    _in_place(path, lambda b: b[:-100] + bytes([b[-100] ^ 0xFF]) + b[-99:])
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _truncate_and_regrow(path: Path) -> None:
    size = path.stat().st_size
    os.truncate(path, 0)
    os.truncate(path, size)


def _cp_other(path: Path) -> None:
    """`cp` another cache file of the store over this one (same inode, other contents)."""
    others = sorted(p for p in path.parent.glob("*.cache") if p != path)
    shutil.copyfile(others[0], path)


DAMAGE: dict[str, Callable[[Path], None]] = {
    "truncate half": lambda p: os.truncate(p, p.stat().st_size // 2),
    "truncate to header": lambda p: os.truncate(p, 64),
    "truncate to nothing": lambda p: os.truncate(p, 0),
    "truncate and regrow": _truncate_and_regrow,
    "zero in place": lambda p: _in_place(p, lambda b: b"\0" * len(b)),
    "zero payload": lambda p: _in_place(p, lambda b: b[:256] + b"\0" * (len(b) - 256)),
    "flip bytes": lambda p: _in_place(p, lambda b: bytes(x ^ 0x5A for x in b[:64]) + b[64:-4096]
                                      + bytes(x ^ 0xFF for x in b[-4096:])),
    "flip one byte, time kept": _flip_keep_time,
    "cp another cache over": _cp_other,
    "cp garbage over": lambda p: _in_place(p, lambda b: b"not a cache at all " * (len(b) // 19 + 1)),
    "grow": lambda p: _in_place(p, lambda b: b + b"\0" * 8192),
}


def _renamed_over(path: Path) -> None:
    """Another file renamed over this one, as our writers do: the map keeps the old contents."""
    other = path.with_name(".other.tmp")
    other.write_bytes(b"not a cache at all" * 100)
    os.replace(other, path)


DAMAGE["renamed over"] = _renamed_over


def damage(store: Path, name: str, how: str) -> dict[str, object]:
    forest = open_memory(store)
    before = answers(forest)
    caches = forest._resident.caches_of("u", forest._open_db("u", False))
    mapped, snap = len(caches.mapped), forest._resident.get("u")
    DAMAGE[how](store / "users" / "u" / "cache" / name)
    after = answers(forest)
    reloaded = forest._resident.get("u") is not snap
    forest.close()
    return {"before": before, "after": after, "mapped": mapped, "reloaded": reloaded}


def main() -> None:
    command, store = sys.argv[1], Path(sys.argv[2])
    if sys.argv[-1] == "mapped":
        import memforest.resident.cache_file

        memforest.resident.cache_file.READ_BELOW = 0
    small_tables()
    if command == "build":
        from conftest import make_sessions

        forest = open_memory(store)
        forest.ingest_sessions("u", make_sessions(8, 4))
        answers(forest)
        forest.close()
        print("built")
    elif command == "answers":
        forest = open_memory(store)
        print(json.dumps(answers(forest)))
        forest.close()
    else:
        print(json.dumps(damage(store, sys.argv[3], sys.argv[4])))


if __name__ == "__main__":
    main()
