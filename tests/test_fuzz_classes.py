"""The fuzz suite, one test per class of hostile input: session files, command lines, options,
damaged stores, model faults and secrets. Every case ends in success or one clear refusal: no
traceback, no hang, no change to the store by a rejected operation, no secret in a log or message.

`make test` runs the fast profile; `make fuzz` (MEMFOREST_FUZZ=long) the long one, with counts per class."""

from __future__ import annotations

import builtins
import itertools
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import RESIDENCE
from fuzz_strategies import (
    EXCEPTIONS,
    config_files,
    damage,
    damages,
    model_plans,
    overrides,
    secrets,
    session_files,
    texts,
)
from fuzzkit import FAKE, cli, fingerprint, fuzz_settings, outcome, record, watchdog
from hypothesis import given
from hypothesis import strategies as st

from memforest.errors import MemForestError

_cases = itertools.count()


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A store holding RESIDENCE for user `u` (scripted model, 64-d hash embedder), checkpointed; in
    memory when the machine has /dev/shm (the cases copy it thousands of times and fsync every commit)."""
    shm = Path("/dev/shm")
    base = (Path(tempfile.mkdtemp(prefix="memforest-fuzz-", dir=shm)) if shm.is_dir()
            else tmp_path_factory.mktemp("fuzz"))
    root = base / "template"
    data = base / "residence.json"
    data.write_text(json.dumps(RESIDENCE[:4]))
    code, _, err = cli(["ingest", "--store", str(root), "--user", "u", *FAKE, str(data)])
    assert code == 0, err
    assert not (root / "users" / "u" / "memory.sqlite-wal").exists()
    yield root
    shutil.rmtree(base, ignore_errors=True)


@contextmanager
def case(template: Path) -> Iterator[Path]:
    """A private copy of the template store, removed afterwards."""
    root = template.parent / f"case{next(_cases)}"
    shutil.copytree(template, root / "store")
    (root / "fresh.json").write_text(json.dumps([{**RESIDENCE[4], "session_id": "fresh"}]))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def settle(kind: str, code: int | str, err: str, store: Path, before: dict[str, str], detail: str) -> str:
    """Record a CLI case: a refusal must leave the store's databases as they were."""
    result = outcome(code, err)
    if result == "refused" and fingerprint(store) != before:
        result = "changed"
    record(kind, result, f"{detail}\nexit {code}\n{err}")
    return result


def check_ok(store: Path, user: str) -> bool:
    code, out, err = cli(["check", "--store", str(store), "--user", user, *FAKE])
    return code == 0 and json.loads(out)["ok"]


# ---------------------------------------------------------------- session files


@fuzz_settings(2500, 40)
@given(content=session_files, user=st.sampled_from(["u", "newbie"]), tight=st.booleans())
def test_session_files(template: Path, content: bytes, user: str, tight: bool) -> None:
    with case(template) as root:
        store, path = root / "store", root / "in.json"
        path.write_bytes(content)
        limits = ["-o", "limits.turn_chars=3000", "-o", "limits.turns_per_session=3"] if tight else []
        before = fingerprint(store)
        code, _, err = cli(["ingest", "--store", str(store), "--user", user, *FAKE, *limits, str(path)])
        result = settle("session_files", code, err, store, before, repr(content[:300]))
        if result == "ok":
            assert check_ok(store, user)


# ---------------------------------------------------------------- command lines

COMMANDS = ["ingest", "show", "ask", "delete-session", "correct-session", "check", "refresh", "merge",
            "calls", "bogus", ""]


def argument_items(root: Path) -> st.SearchStrategy[list[str]]:
    store = str(root / "store")
    paths = st.sampled_from([store, str(root / "fresh.json"), str(root / "missing"), str(root), "",
                             str(root / "fresh.json" / "x"),
                             str(root / "store" / "users" / "u" / "memory.sqlite")])
    return st.one_of(
        st.tuples(st.just("--store"), paths), st.tuples(st.just("--user"), st.one_of(st.just("u"), texts)),
        st.tuples(st.just("--from"), st.one_of(st.just("u"), texts)), st.tuples(st.just("--to"), texts),
        st.tuples(st.just("--from-store"), paths), st.tuples(st.just("--config"), paths),
        st.tuples(st.just("--calls"),
                  st.sampled_from([str(root / "calls.jsonl"), str(root), str(root / "x" / "y")])),
        st.tuples(st.sampled_from(["--tree", "--mode", "--date"]), texts),
        st.tuples(st.just("-o"), overrides.map(lambda o: o[0] if o else "")),
        st.sampled_from([("--json",), ("--no-answer",), ("--help",), ("-o",), ("--store",)]),
        paths.map(lambda p: (p,)), texts.map(lambda t: (t,)),
    ).map(list)


def well_formed(command: str, root: Path) -> list[str]:
    """The arguments `command` needs to succeed on the template store."""
    store = ["--store", str(root / "store")]
    fresh = str(root / "fresh.json")
    return {"ingest": [*store, "--user", "u", fresh], "show": [*store, "--user", "u"],
            "ask": [*store, "--user", "u", "--no-answer", "where do I live?"],
            "check": [*store, "--user", "u"], "delete-session": [*store, "--user", "u", "boston"],
            "refresh": [*store, "--user", "u"],
            "correct-session": [*store, "--user", "u", str(root / "one.json")],
            "merge": [*store, "--from", "u", "--to", "v"],
            "calls": [str(root / "calls.jsonl")]}.get(command, [])


@fuzz_settings(2000, 40)
@given(data=st.data())
def test_command_lines(template: Path, data: st.DataObject) -> None:
    with case(template) as root:
        store = root / "store"
        (root / "calls.jsonl").write_bytes(data.draw(st.sampled_from([b"", b"\x00\xff", b"[1]\n", b"{}\n"]))
                                          + b'{"stage": "extract", "latency_s": 0.1}\n')
        (root / "one.json").write_text(json.dumps({**RESIDENCE[0], "turns": RESIDENCE[2]["turns"]}))
        command = data.draw(st.sampled_from(COMMANDS))
        items = data.draw(st.lists(argument_items(root), max_size=6))
        base = data.draw(st.sampled_from([[], well_formed(command, root)]))
        argv = [command, *base, *[token for item in items for token in item]]
        if command not in ("calls", "bogus", ""):
            argv += FAKE  # the test models, whatever else the command line says
        before = fingerprint(store)
        code, _, err = cli(argv)
        settle("cli_arguments", code, err, store, before, repr(argv))


def test_real_exit_codes_in_a_subprocess(template: Path) -> None:
    """A few cases through a real process: 0 committed, 2 refused, 1 damaged store found by check."""
    with case(template) as root:
        store = str(root / "store")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), *sys.path])}

        def run(*argv: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([sys.executable, "-m", "memforest.cli", *argv], capture_output=True,
                                  text=True, env=env, timeout=120)

        done = run("ingest", "--store", store, "--user", "u", *FAKE, str(root / "fresh.json"))
        again = run("ingest", "--store", store, "--user", "u", *FAKE, str(root / "fresh.json"))
        (root / "store" / "users" / "u" / "memory.sqlite").write_bytes(b"")
        checked = run("check", "--store", store, "--user", "u", *FAKE)
        assert (done.returncode, again.returncode, checked.returncode) == (0, 2, 1), \
            (again.stderr, checked.stderr)
        assert again.stderr.startswith("memforest: error: ") and len(again.stderr.splitlines()) == 1
        assert "0 bytes" in json.loads(checked.stdout)["problems"][0] and "Traceback" not in checked.stderr


# ---------------------------------------------------------------- options


@fuzz_settings(2000, 40)
@given(items=overrides, config=config_files, as_yaml=st.booleans(), op=st.sampled_from(["ingest", "ask"]))
def test_config_overrides(template: Path, items: list[str], config: Any, as_yaml: bool, op: str) -> None:
    import yaml

    with case(template) as root:
        store = root / "store"
        argv = [op, "--store", str(store), "--user", "u", *FAKE]
        for item in items:
            argv += ["-o", item]
        argv += FAKE[:4]  # the test models stay selected
        if config is not None:
            path = root / "c.yaml"
            path.write_text(yaml.safe_dump(config) if as_yaml else json.dumps(config)
                            if not isinstance(config, str)
                            else config, encoding="utf-8", errors="surrogateescape")
            argv += ["--config", str(path)]
        argv += [str(root / "fresh.json")] if op == "ingest" else ["--no-answer", "where do I live?"]
        before = fingerprint(store)
        code, _, err = cli(argv)
        if settle("config_overrides", code, err, store, before, repr(argv)) == "ok" and op == "ingest":
            assert check_ok(store, "u")


# ---------------------------------------------------------------- damaged stores

OPERATIONS = ["ingest", "ask", "show", "delete-session", "refresh", "correct-session", "merge"]


@fuzz_settings(2500, 40)
@given(how=damages, op=st.sampled_from(OPERATIONS))
def test_damaged_stores(template: Path, how: list[tuple[Any, ...]], op: str) -> None:
    with case(template) as root:
        store, user_dir = root / "store", root / "store" / "users" / "u"
        for one in how:
            damage(user_dir, one)
        before = fingerprint(store)
        code, out, err = cli(["check", "--store", str(store), "--user", "u", *FAKE])
        result = outcome(code, err)
        if result == "ok" or result == "refused":
            report = json.loads(out)  # check always reports, and never writes the database
            result = "changed" if fingerprint(store) != before else result
            assert report["ok"] == (code == 0)
        if result in ("ok", "refused"):
            args = ["--store", str(store), "--user", "u", *FAKE]
            argv = {"ingest": ["ingest", *args, str(root / "fresh.json")],
                    "ask": ["ask", *args, "where do I live?"], "show": ["show", *args],
                    "delete-session": ["delete-session", *args, "boston"], "refresh": ["refresh", *args],
                    "correct-session": ["correct-session", *args, str(root / "one.json")],
                    "merge": ["merge", "--store", str(store), "--from", "u", "--to", "v", *FAKE]}[op]
            (root / "one.json").write_text(json.dumps(RESIDENCE[0]))
            code, _, err = cli(argv)
            result = outcome(code, err)
            if result == "refused" and fingerprint(store) != before:
                result = "changed"
        record("damaged_stores", result, f"{how} {op}\nexit {code}\n{err}")


# ---------------------------------------------------------------- model faults


def planned_responder(plan: dict[str, Any]) -> Any:
    from memforest.llm.base import InvalidOutputError, TransientModelError
    from memforest.llm.testing import rule_responder

    errors = {"TransientModelError": TransientModelError, "InvalidOutputError": InvalidOutputError,
              **{name: getattr(builtins, name) for name in EXCEPTIONS if hasattr(builtins, name)}}

    def respond(request: Any) -> Any:
        how = plan.get(request.stage, "ok")
        if how == "ok":
            return rule_responder(request)
        kind, value = how
        if kind == "raise":
            return errors[value](f"injected {value}")
        if kind == "json":
            return json.dumps(value)
        if kind == "text":
            return value
        time.sleep(value)  # a backend that gives up after its own timeout
        return TransientModelError(f"timed out after {value:.3f} s")

    return respond


@fuzz_settings(1000, 25)
@given(plan=model_plans, degraded=st.booleans(), op=st.sampled_from(["ingest", "embed", "planner", "refresh",
                                                                      "correct", "held lock"]))
def test_model_faults(template: Path, plan: dict[str, Any], degraded: bool, op: str) -> None:
    from memforest.api import MemForest
    from memforest.config import MemForestConfig
    from memforest.llm.testing import HashEmbedder, ScriptedChatModel

    with case(template) as root:
        store = root / "store"
        cfg = MemForestConfig(degraded_ok=degraded)
        cfg.llm.max_retries, cfg.llm.json_retries, cfg.llm.backoff_s, cfg.limits.lock_wait_s = 1, 1, 0.0, 0.05
        forest = MemForest(store, cfg, llm=ScriptedChatModel(planned_responder(plan)),
                           embedder=HashEmbedder(64))
        before = fingerprint(store)
        result, detail = "ok", ""
        try:
            with watchdog(60):
                _model_operation(forest, op, root)
        except MemForestError as e:
            result, detail = "refused", str(e)
            if fingerprint(store) != before:
                result = "changed"
        except Exception as e:  # noqa: BLE001 - anything else is a crash
            result, detail = (("hang" if type(e).__name__ == "Hang" else "traceback"),
                              f"{type(e).__name__}: {e}")
        finally:
            forest.close()
        if result == "ok" and op in ("ingest", "correct", "refresh"):
            assert check_ok(store, "u")
        record("model_faults", result, f"{plan} degraded={degraded} {op}: {detail}")


def _model_operation(forest: Any, op: str, root: Path) -> None:
    fresh = json.loads((root / "fresh.json").read_text())
    if op == "ingest":
        forest.ingest_sessions("u", fresh)
    elif op in ("embed", "planner"):
        forest.query("u", "Where do I live now?", mode=op)
    elif op == "refresh":
        forest.refresh("u")
    elif op == "correct":
        forest.correct_session("u", {**RESIDENCE[0], "turns": RESIDENCE[1]["turns"]})
    else:
        _while_the_lock_is_held(forest, root, fresh)


def _while_the_lock_is_held(forest: Any, root: Path, fresh: list[dict[str, Any]]) -> None:
    """A writer stuck in a slow model call holds the lock; another writer's wait times out."""
    from memforest.store.lock import write_lock

    held, release = threading.Event(), threading.Event()

    def stuck() -> None:
        with write_lock(root / "store" / "users" / "u" / "write.lock", "u", 5):
            held.set()
            release.wait(10)

    thread = threading.Thread(target=stuck)
    thread.start()
    held.wait(5)
    try:
        forest.ingest_sessions("u", fresh)
    finally:
        release.set()
        thread.join()


# ---------------------------------------------------------------- secrets


def leaky_responder(request: Any) -> Any:
    """Fails extraction with a server error echoing a credential (MEMFOREST_FUZZ_ECHO)."""
    from memforest.llm.testing import rule_responder

    if request.stage == "extract":
        return RuntimeError(os.environ["MEMFOREST_FUZZ_ECHO"])
    return rule_responder(request)


@fuzz_settings(500, 20)
@given(secret=secrets, degraded=st.booleans())
def test_secrets(template: Path, secret: tuple[str, str], degraded: bool,
                 monkeypatch: pytest.MonkeyPatch) -> None:
    token, shape = secret
    monkeypatch.setenv("MEMFOREST_FUZZ_ECHO", shape.format(s=token))
    with case(template) as root:
        store, log = root / "store", root / "calls.jsonl"
        before = fingerprint(store)
        code, out, err = cli(["ingest", "--store", str(store), "--user", "u", *FAKE, "--calls", str(log),
                              "-o", "llm.responder=test_fuzz_classes:leaky_responder", "-o",
                              "llm.max_retries=0", "-o", f"degraded_ok={str(degraded).lower()}",
                              str(root / "fresh.json")])
        written = log.read_text() if log.exists() else ""
        result = settle_secret(code, err, store, before)
        if token in out + err + written:
            result = "leak"
        record("secrets", result, f"{shape}\n{err}\n{written[-500:]}")


def settle_secret(code: int | str, err: str, store: Path, before: dict[str, str]) -> str:
    result = outcome(code, err)
    return "changed" if result == "refused" and fingerprint(store) != before else result


def test_the_template_store_is_sound(template: Path) -> None:
    """The template is a real store: its database passes SQLite's own check."""
    con = sqlite3.connect(template / "users" / "u" / "memory.sqlite")
    try:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        con.close()
