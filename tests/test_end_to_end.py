"""The embedded CPU default end to end: real llama.cpp model and MiniLM embedder, no network."""

import json
import subprocess
import sys

import pytest

from memforest.api import MemForest
from memforest.config import MemForestConfig
from memforest.demo import QUESTION, example_sessions
from memforest.describe import describe

pytestmark = pytest.mark.slow


def _cli(*args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "memforest.cli", *args], capture_output=True, text=True,
                         timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    store = tmp_path_factory.mktemp("e2e")
    with MemForest(store, MemForestConfig()) as forest:
        report = forest.ingest_sessions("demo", example_sessions())
        in_memory = json.loads(json.dumps(describe(forest.snapshot("demo").state)))
        calls = list(forest.log.records)
    return store, report, in_memory, calls


def test_ingest_with_the_embedded_default(built):
    _, report, desc, calls = built
    assert report.cells == 8 and report.sessions == 5
    assert desc["counts"]["trees_by_family"]["session"] == 5
    assert {"extract", "summarize"} <= {c.stage for c in calls}
    assert all(c.prompt_tokens > 0 for c in calls if c.error is None)
    for tree in desc["trees"]:
        for node in tree["nodes"]:
            assert node["text"] and node["mode"] in ("leaf", "llm", "degraded")


def test_reopened_in_a_new_process_shows_identical_memory(built):
    store, _, in_memory, _ = built
    shown = json.loads(_cli("show", "--store", str(store), "--user", "demo", "--json"))
    assert shown == in_memory


def test_ask_json_is_well_formed(built):
    store, *_ = built
    out = json.loads(_cli("ask", "--store", str(store), "--user", "demo", "--json", "--date", "2024-08-01",
                          QUESTION))
    assert isinstance(out["answer"], str) and out["answer"].strip()
    assert 0 < len(out["evidence"]) <= 10
    for e in out["evidence"]:
        assert {"kind", "id", "text", "time", "score", "tree_id", "via"} <= set(e)
    trace = out["trace"]
    assert {"recalled", "browse", "temporal", "latency", "llm_calls", "version"} <= set(trace)
    assert trace["recalled"] and trace["browse"]
    assert trace["llm_calls"]["by_stage"]["answer"]["calls"] == 1
