"""No library module or adapter changes the process environment when imported: offline and telemetry
settings reach worker processes, and the harness's own process only inside a scoped block."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from baselines.common import quiet_environment
from baselines.worker import QUIET_ENV, TELEMETRY_ENV

REPO = Path(__file__).resolve().parents[1]
ADAPTERS = sorted(f"baselines.{p.parent.name}.{p.stem}" for p in REPO.glob("baselines/*/*.py")
                  if p.stem not in ("__init__",) and not p.stem.endswith("worker"))
HARNESS = ["benchmarks.harness.runner", "benchmarks.harness.systems", "benchmarks.harness.models",
           "benchmarks.harness.app", "baselines.common", "baselines.worker", "memforest.llm.factory"]

IMPORT_ALL = """
import importlib, json, os, sys
before = dict(os.environ)
for name in sys.argv[1:]:
    importlib.import_module(name)
from benchmarks.harness.results import package_versions
package_versions()  # what run_metadata reads of the installed libraries
after = dict(os.environ)
print(json.dumps({k: [before.get(k), after.get(k)] for k in set(before) | set(after)
                  if before.get(k) != after.get(k)}))
"""


def test_importing_every_adapter_and_the_harness_leaves_the_environment_unchanged() -> None:
    assert {"baselines.mem0.system", "baselines.mempalace.system", "baselines.zep_local.system",
            "baselines.memoryos.system"} <= set(ADAPTERS)
    env = {k: v for k, v in os.environ.items() if k not in QUIET_ENV}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run([sys.executable, "-c", IMPORT_ALL, *ADAPTERS, *HARNESS], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == {}


def test_the_quiet_block_sets_telemetry_off_and_restores_what_was_there(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DO_NOT_TRACK", "0")  # a value of the user's own, kept
    for name in TELEMETRY_ENV:
        if name != "DO_NOT_TRACK":
            monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with quiet_environment():
        assert all(os.environ[k] == v for k, v in TELEMETRY_ENV.items())
        assert "HF_HUB_OFFLINE" not in os.environ  # the harness's own models may need the hub
        os.environ["ANONYMIZED_TELEMETRY"] = "library's own"  # what MemPalace does when imported
    assert os.environ["DO_NOT_TRACK"] == "0"
    assert not any(name in os.environ for name in TELEMETRY_ENV if name != "DO_NOT_TRACK")


def test_overlapping_blocks_in_threads_restore_once_at_the_end(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in TELEMETRY_ENV:
        monkeypatch.delenv(name, raising=False)
    inside, leave = threading.Event(), threading.Event()

    def other() -> None:
        with quiet_environment():
            inside.set()
            leave.wait(10)

    thread = threading.Thread(target=other)
    with quiet_environment():
        thread.start()
        inside.wait(10)
    assert os.environ["MEM0_TELEMETRY"] == "False"  # the other block is still open
    leave.set()
    thread.join(10)
    assert "MEM0_TELEMETRY" not in os.environ


def test_workers_still_start_offline_and_quiet() -> None:
    assert QUIET_ENV["HF_HUB_OFFLINE"] == "1" and TELEMETRY_ENV.items() <= QUIET_ENV.items()


BUILD_MEMPALACE = """
import json, os, sys
from baselines.base import Endpoints
from baselines.mempalace.system import MemPalaceSystem
before = dict(os.environ)
system = MemPalaceSystem(Endpoints("http://127.0.0.1:9/v1", "chat", "embed", 8, 1024))
system.reset("instance", sys.argv[1])
import mempalace  # imported by reset; it sets ANONYMIZED_TELEMETRY when first imported
system.close()
print(json.dumps({k: [before.get(k), os.environ.get(k)] for k in set(before) | set(os.environ)
                  if before.get(k) != os.environ.get(k)}))
"""


@pytest.mark.integration
def test_building_a_library_adapter_leaves_the_environment_as_it_was(tmp_path: Path) -> None:
    pytest.importorskip("mempalace")
    env = {k: v for k, v in os.environ.items() if k not in QUIET_ENV}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run([sys.executable, "-c", BUILD_MEMPALACE, str(tmp_path)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == {}
