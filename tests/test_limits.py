"""Every `limits.*` option is the one a write obeys, on every way in: an input over the configured
bound is refused naming the option, and the same input is taken once the option is raised."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from memforest.api import MemForest
from memforest.cli import main
from memforest.config import MemForestConfig, with_overrides
from memforest.errors import InputError, StoreError
from memforest.llm.testing import HashEmbedder
from memforest.sessions import parse_session
from memforest.store.lock import write_lock
from memforest.types import Session, Turn

FAKE = ["-o", "llm.backend=scripted", "-o", "embedder.backend=hash", "-o", "embedder.dim=64",
        "-o", "chunk.max_turns=64"]


def session(sid: str = "s1", turns: int = 2, chars: int = 10) -> dict[str, Any]:
    return {"session_id": sid, "timestamp": "2023-05-01T10:00", "turns": [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"t{i} ".ljust(chars, "x")}
            for i in range(turns)]}


# (option, value that refuses, value that accepts, the sessions of one call)
CASES = [
    ("turn_chars", 10, 11, [session(chars=11)]),
    ("turns_per_session", 2, 6, [session(turns=6)]),
    ("turns_per_session", 5_000, 6_000, [session(turns=6_000)]),
    ("sessions_per_call", 1, 2, [session("s1"), session("s2")]),
]
IDS = ["turn_chars", "turns_per_session", "turns_per_session_above_the_default", "sessions_per_call"]


def configured(option: str, value: Any) -> MemForestConfig:
    return with_overrides(MemForestConfig(),
                          {"limits": {option: value}, "chunk": {"max_turns": 64}}).validate()


@pytest.fixture
def forest_with(tmp_path: Path) -> Iterator[Callable[[str, Any], MemForest]]:
    made: list[MemForest] = []

    def build(option: str, value: Any) -> MemForest:
        forest = MemForest(tmp_path / "store", configured(option, value), embedder=HashEmbedder(64),
                           generate=False)
        made.append(forest)
        return forest

    yield build
    for forest in made:
        forest.close()


def stored(tmp_path: Path) -> bool:
    return (tmp_path / "store" / "users" / "u" / "memory.sqlite").exists()


@pytest.mark.parametrize(("option", "low", "high", "sessions"), CASES, ids=IDS)
def test_the_api_obeys_each_input_limit(forest_with: Callable[[str, Any], MemForest], tmp_path: Path,
                                        option: str, low: int, high: int,
                                        sessions: list[dict[str, Any]]) -> None:
    with pytest.raises(InputError, match=f"limits.{option}={low}"):
        forest_with(option, low).ingest_sessions("u", sessions)
    assert not stored(tmp_path)
    report = forest_with(option, high).ingest_sessions("u", sessions)
    assert report.sessions == len(sessions)


@pytest.mark.parametrize(("option", "low", "high", "sessions"),
                         [c for c in CASES if c[0] != "sessions_per_call"], ids=IDS[:3])
def test_one_session_and_a_correction_obey_the_limits(forest_with: Callable[[str, Any], MemForest],
                                                      option: str, low: int, high: int,
                                                      sessions: list[dict[str, Any]]) -> None:
    [raw] = sessions
    with pytest.raises(InputError, match=f"limits.{option}={low}"):
        forest_with(option, low).ingest_session("u", raw["session_id"], raw["turns"], raw["timestamp"])
    forest_with(option, low).ingest_sessions("u", [session()])  # within every limit
    with pytest.raises(InputError, match=f"limits.{option}={low}"):
        forest_with(option, low).correct_session("u", raw)
    forest = forest_with(option, high)
    forest.correct_session("u", raw)
    assert len(forest.snapshot("u").state.sessions[raw["session_id"]].turns) == len(raw["turns"])
    forest.ingest_session("u", "s9", raw["turns"], raw["timestamp"])


def test_sessions_built_by_the_caller_obey_the_limits(forest_with: Callable[[str, Any], MemForest]) -> None:
    typed = [Session(f"s{i}", 1.6e9, [Turn("user", "x" * 20, 1.6e9)] * 3) for i in range(2)]
    for option, low in (("turn_chars", 19), ("turns_per_session", 2), ("sessions_per_call", 1)):
        with pytest.raises(InputError, match=f"limits.{option}={low}"):
            forest_with(option, low).ingest_sessions("u", typed)
    assert forest_with("turn_chars", 20).ingest_sessions("u", typed).sessions == 2


def test_no_limit_is_read_from_anywhere_but_the_configuration() -> None:
    with pytest.raises(TypeError):
        parse_session(session())  # type: ignore[call-arg]


@pytest.fixture
def held_lock(tmp_path: Path) -> Iterator[Callable[[float], None]]:
    """Hold user u's write lock, as another writer would, and let it go after a delay."""
    folder = tmp_path / "store" / "users" / "u"
    release = threading.Event()
    taken = threading.Event()

    def hold() -> None:
        with write_lock(folder / "write.lock", "u", 5.0):
            taken.set()
            release.wait(30)

    thread = threading.Thread(target=hold)

    def start(release_after_s: float) -> None:
        thread.start()
        assert taken.wait(10)
        threading.Timer(release_after_s, release.set).start()

    yield start
    release.set()
    thread.join()


def test_the_api_waits_for_the_write_lock_as_long_as_configured(forest_with: Callable[[str, Any], MemForest],
                                                                held_lock: Callable[[float], None]) -> None:
    forest_with("lock_wait_s", 600.0).ingest_sessions("u", [session("s1")])
    held_lock(1.0)
    with pytest.raises(StoreError, match="limits.lock_wait_s"):
        forest_with("lock_wait_s", 0.2).ingest_sessions("u", [session("s2")])
    assert forest_with("lock_wait_s", 20.0).ingest_sessions("u", [session("s2")]).sessions == 1


# ---------------------------------------------------------------- the command line


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(("option", "low", "high", "sessions"), CASES, ids=IDS)
def test_the_command_line_obeys_each_input_limit(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 option: str, low: int, high: int,
                                                 sessions: list[dict[str, Any]]) -> None:
    data = tmp_path / "in.json"
    data.write_text(json.dumps(sessions))
    common = ["--store", str(tmp_path / "store"), "--user", "u", *FAKE]
    code, _, err = cli(capsys, "ingest", *common, "-o", f"limits.{option}={low}", str(data))
    assert code == 2 and err.count("\n") == 1 and f"limits.{option}={low}" in err
    assert not stored(tmp_path)
    code, out, err = cli(capsys, "ingest", *common, "-o", f"limits.{option}={high}", str(data))
    assert code == 0, err
    assert json.loads(out)["sessions"] == len(sessions)


def test_the_command_line_correction_obeys_the_limits(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    data, one = tmp_path / "in.json", tmp_path / "one.json"
    data.write_text(json.dumps([session()]))
    one.write_text(json.dumps(session(turns=6)))
    common = ["--store", str(tmp_path / "store"), "--user", "u", *FAKE]
    assert cli(capsys, "ingest", *common, str(data))[0] == 0
    code, _, err = cli(capsys, "correct-session", *common, "-o", "limits.turns_per_session=2", str(one))
    assert code == 2 and "limits.turns_per_session=2" in err
    assert cli(capsys, "correct-session", *common, "-o", "limits.turns_per_session=6", str(one))[0] == 0


def test_the_command_line_waits_for_the_write_lock_as_long_as_configured(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], held_lock: Callable[[float], None]) -> None:
    data = tmp_path / "in.json"
    common = ["--store", str(tmp_path / "store"), "--user", "u", *FAKE]
    data.write_text(json.dumps([session("s1")]))
    assert cli(capsys, "ingest", *common, str(data))[0] == 0
    held_lock(1.0)
    data.write_text(json.dumps([session("s2")]))
    code, _, err = cli(capsys, "ingest", *common, "-o", "limits.lock_wait_s=0.2", str(data))
    assert code == 2 and err.count("\n") == 1 and "limits.lock_wait_s" in err
    assert cli(capsys, "ingest", *common, "-o", "limits.lock_wait_s=20", str(data))[0] == 0
