"""The subprocess worker protocol, exercised with the keyword-matching reference worker."""

from __future__ import annotations

import io
import json
import sys
from datetime import datetime
from pathlib import Path

import pytest

from baselines.base import MemorySystem, Retrieval, Session, SystemUnavailable, Turn
from baselines.worker import WorkerError, WorkerSystem, serve, session_payload

ECHO = Path(__file__).parent / "fixtures" / "echo_worker.py"


def sessions() -> list[Session]:
    def turn(sid: str, i: int, role: str, text: str) -> Turn:
        return Turn(role, text, None, f"{sid}:{i}")

    return [
        Session("s1", datetime(2023, 3, 1, 9), (turn("s1", 0, "user", "I adopted a grey cat called Miso."),
                                                 turn("s1", 1, "assistant", "Miso is a lovely name."))),
        Session("s2", datetime(2023, 4, 2, 9), (turn("s2", 0, "user", "I moved to Lisbon in April."),
                                                 turn("s2", 1, "assistant", "Lisbon is sunny."))),
    ]


def echo(**options: object) -> WorkerSystem:
    return WorkerSystem("echo", sys.executable, ECHO, options)


@pytest.mark.integration
def test_worker_round_trip(tmp_path: Path) -> None:
    system = echo(top_k=2)
    try:
        assert isinstance(system, MemorySystem) and system.info["name"] == "echo"
        system.reset("inst", tmp_path / "w")
        stats = system.ingest(sessions())
        assert stats["turns"] == 4 and stats["sessions"] == 2 and "worker_cpu_seconds" in stats
        assert (tmp_path / "w" / "memory.json").exists()
        result = system.retrieve("What is my cat called?", datetime(2023, 5, 1))
        assert isinstance(result, Retrieval) and result.evidence
        top = result.evidence[0]
        assert top.session_ids == ["s1"] and top.turn_ids == ["s1:0"] and top.time == "2023-03-01T09:00:00"
        assert "Miso" in result.context and result.trace["when"] == "2023-05-01T00:00:00"
    finally:
        system.close()


@pytest.mark.integration
def test_worker_restarts_after_close(tmp_path: Path) -> None:
    system = echo()
    system.reset("a", tmp_path / "a")
    system.ingest(sessions()[:1])
    system.close()
    system.reset("b", tmp_path / "b")  # the harness closes a system between instances
    assert system.ingest(sessions()[1:])["turns"] == 2
    system.close()
    system.close()


@pytest.mark.integration
def test_worker_errors_are_reported(tmp_path: Path) -> None:
    system = echo(fail="retrieve")
    try:
        system.reset("x", tmp_path / "echo-worker-test")
        with pytest.raises(WorkerError, match="asked to fail on retrieve"):
            system.retrieve("anything", None)
        assert system.ingest(sessions())["turns"] == 4  # the worker keeps serving after an error
    finally:
        system.close()


@pytest.mark.integration
def test_worker_death_is_reported(tmp_path: Path) -> None:
    system = echo(exit_on="ingest")
    system.reset("x", tmp_path)
    with pytest.raises(WorkerError, match="exited"):
        system.ingest(sessions())
    system.close()


@pytest.mark.integration
def test_unusable_worker_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(SystemUnavailable, match="no Python interpreter"):
        WorkerSystem("lightmem", None, ECHO)
    with pytest.raises(SystemUnavailable, match="does not exist"):
        WorkerSystem("lightmem", str(tmp_path / "python"), ECHO)
    with pytest.raises(SystemUnavailable, match="not found"):
        WorkerSystem("lightmem", sys.executable, tmp_path / "absent.py")
    with pytest.raises(SystemUnavailable, match="asked to fail on hello"):
        echo(fail="hello")
    broken = tmp_path / "broken.py"
    broken.write_text("import a_package_that_is_not_installed\n")
    with pytest.raises(SystemUnavailable, match="exited"):
        WorkerSystem("broken", sys.executable, broken, log_path=tmp_path / "broken.log")


def test_serve_in_process_and_payload_has_no_gold_labels() -> None:
    class Handler:
        def hello(self, options: dict) -> dict:
            return {"options": options}

        def close(self) -> dict:
            return {}

    requests = [{"id": 1, "op": "hello", "options": {"k": 1}}, {"id": 2, "op": "bogus"},
                {"id": 3, "op": "close"}, {"id": 4, "op": "hello", "options": {}}]
    out = io.StringIO()
    serve(Handler(), io.StringIO("\n".join(json.dumps(r) for r in requests) + "\n"), out)
    replies = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [r["id"] for r in replies] == [1, 2, 3]  # nothing is answered after close
    assert replies[0] == {"id": 1, "ok": True, "result": {"options": {"k": 1}}}
    assert not replies[1]["ok"] and "unknown op" in replies[1]["error"]
    payload = session_payload(sessions()[0])
    assert payload["timestamp"] == "2023-03-01T09:00:00" and payload["speakers"] == []
    named = Session("c1", datetime(2023, 5, 8), (Turn("user", "Hi.", None, "D1:1", speaker="Bo"),),
                    speakers=("Ana", "Bo"))
    assert session_payload(named)["speakers"] == ["Ana", "Bo"]
    assert all("has_answer" not in t for t in payload["turns"])
