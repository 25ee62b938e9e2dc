"""Every baseline installable here, through its real library, against SmolLM2 served by llama_cpp.server
and MiniLM served by our embeddings endpoint, both behind the logging proxy. The tiny model writes poor
or malformed outputs: these tests check structure and accounting (calls and tokens logged per phase,
a Retrieval returned), never content."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from baselines.base import Endpoints, MemorySystem, Retrieval, Session, SystemUnavailable, Turn
from baselines.common import PhaseClock
from baselines.evermemos import evermemos_system
from baselines.flat_rag import FlatRAGSystem
from baselines.full_context import FullContextSystem
from baselines.lightmem import lightmem_system
from baselines.mem0 import mem0_additive_system
from baselines.mem0.additive import WORKER as MEM0_ADDITIVE_WORKER
from baselines.worker import QUIET_ENV
from benchmarks.serving.stack import ProxiedSystem, ServingStack
from memforest.config import EmbedderConfig
from memforest.errors import ModelError
from memforest.llm.calllog import CallLog, CallRecord
from memforest.llm.testing import HashEmbedder

MODEL = "smollm2"
EMBED_MODEL = "minilm"
DIMS = 384


def sessions() -> list[Session]:
    def pair(sid: str, when: datetime, user: str, reply: str) -> Session:
        turns = (Turn("user", user, None, f"{sid}:0"), Turn("assistant", reply, None, f"{sid}:1"))
        return Session(sid, when, turns)

    return [
        pair("s1", datetime(2023, 3, 1, 9), "I adopted a grey cat called Miso.", "Miso is a lovely name."),
        pair("s2", datetime(2023, 4, 2, 9), "I moved to Lisbon for a new job.", "Lisbon is sunny."),
    ]


def installed(module: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(importlib.util.find_spec(module) is None, reason=f"{module} is not installed")


# ---------------------------------------------------------------- references and plumbing (no model)


def test_full_context_keeps_the_newest_turns_within_budget(tmp_path: Path) -> None:
    system = FullContextSystem(context_tokens=45, answer_tokens=10, prompt_tokens=10,
                               count_tokens=lambda text: len(text.split()))
    assert system.max_tokens == 25
    system.reset("i", tmp_path)
    stats = system.ingest(list(reversed(sessions())))
    assert stats["sessions"] == 2 and stats["turns"] == 4
    assert stats["input"] == {"given": 4, "kept": 4, "unit": "turns", "stored": 4, "lost": {},
                              "upstream": False}
    result = system.retrieve("where do I live?", None)
    assert result.trace["truncated"] and result.trace["turns_kept"] < 4
    assert result.evidence[-1].turn_ids[-1] == "s2:1"  # newest kept, oldest cut
    whole = FullContextSystem(context_tokens=8192, answer_tokens=256)
    whole.reset("i", tmp_path)
    whole.ingest(sessions())
    everything = whole.retrieve("q", None)
    assert [e.session_ids for e in everything.evidence] == [["s1"], ["s2"]]
    assert "Miso" in everything.context and not everything.trace["truncated"]


def test_flat_rag_ranks_turns_and_keeps_ids(tmp_path: Path) -> None:
    system = FlatRAGSystem(HashEmbedder(), top_k=2)
    assert isinstance(system, MemorySystem)
    system.reset("i", tmp_path)
    stats = system.ingest(sessions())
    assert stats["turns_indexed"] == 4 and "ingest_cpu_seconds" in stats
    result = system.retrieve("What is the name of my grey cat?", None)
    assert len(result.evidence) == 2 and result.evidence[0].session_ids == ["s1"]
    assert result.evidence[0].turn_ids == ["s1:0"] and (tmp_path / "vectors.npy").exists()


def endpoints(url: str = "http://127.0.0.1:1/v1", context_tokens: int = 8192) -> Endpoints:
    # the `stack` below serves chat through llama.cpp's server, which refuses json_schema
    return Endpoints(url, MODEL, EMBED_MODEL, DIMS, context_tokens, json_schema=False)


def test_workers_without_a_checkout_are_unavailable(tmp_path: Path) -> None:
    upstream = Path(__file__).parent / "fixtures" / "upstream"
    with pytest.raises(SystemUnavailable, match="no LightMem checkout"):
        lightmem_system(endpoints())
    with pytest.raises(SystemUnavailable, match="does not have the layout"):
        lightmem_system(endpoints(), checkout=str(tmp_path))
    with pytest.raises(SystemUnavailable, match="no Python interpreter"):
        lightmem_system(endpoints(), checkout=str(upstream / "lightmem"), llmlingua_model_path="/m")
    with pytest.raises(SystemUnavailable, match="no EverMemOS checkout"):
        evermemos_system(endpoints(), python="/usr/bin/python3")
    with pytest.raises(SystemUnavailable, match="system config"):
        evermemos_system(endpoints(), python="/usr/bin/python3", checkout=str(upstream / "evermemos"),
                         system_config=str(tmp_path / "absent.yaml"))


def test_mem0_additive_without_an_interpreter_is_skipped_with_install_hint(tmp_path: Path) -> None:
    from benchmarks.harness import runner
    from benchmarks.harness.app import compose_config
    from benchmarks.harness.schema import bench_config

    cfg = bench_config(compose_config(["method=mem0_additive", "llm.backend=scripted",
                                       "embedder.backend=hash", "embedder.dim=64", "dataset.limit=1",
                                       f"output_root={tmp_path}", "progress=false"]))
    reason = runner.run_benchmark(cfg)["skipped"]
    assert reason.startswith("mem0_additive: no interpreter configured (method.system.python)")
    assert 'pip install "mem0ai>=2,<3"' in reason and "method.system.python=" in reason
    assert (Path(cfg.run_dir) / "SKIPPED").read_text().strip() == reason


@pytest.mark.integration
@installed("mem0")
def test_mem0_additive_refuses_an_environment_with_mem0_1() -> None:
    with pytest.raises(SystemUnavailable, match=r"mem0ai 1\.[0-9.]+ is installed .* needs mem0ai>=2,<3"):
        mem0_additive_system(endpoints("http://127.0.0.1:9/v1"), python=sys.executable)


def test_missing_package_is_unavailable_with_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    from baselines.mem0 import Mem0System

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(SystemUnavailable, match=r"memforest\[mem0\]"):
        Mem0System(endpoints("http://x/v1"))


@installed("mem0")
def test_mem0_prompt_date_is_the_session_date() -> None:
    import mem0.memory.utils as prompts

    from baselines.mem0.system import extraction_prompts

    before = prompts.USER_MEMORY_EXTRACTION_PROMPT
    with extraction_prompts(datetime(2021, 7, 4), "Name people."):
        assert "Today's date is 2021-07-04" in prompts.USER_MEMORY_EXTRACTION_PROMPT
        assert prompts.USER_MEMORY_EXTRACTION_PROMPT.endswith("\n\nName people.")
    with extraction_prompts(datetime(2021, 7, 4), None):
        assert not prompts.USER_MEMORY_EXTRACTION_PROMPT.endswith("Name people.")
    assert before == prompts.USER_MEMORY_EXTRACTION_PROMPT


def test_phase_clock_reports_one_phase() -> None:
    clock = PhaseClock()
    with clock.measure("ingest"):
        pass
    with clock.measure("query"):
        pass
    assert set(clock.of("ingest")) == {"ingest_wall_seconds", "ingest_cpu_seconds"}


@pytest.mark.integration
@installed("chromadb")
def test_proxied_system_tags_phases_and_restarts(tmp_path: Path) -> None:
    from baselines.mempalace import MemPalaceSystem

    log = CallLog()
    stack = ServingStack(log, "mempalace", llm_model=MODEL, llm_base_url="http://127.0.0.1:9/v1",
                         embedder=HashEmbedder(dim=64))
    system = ProxiedSystem("mempalace", lambda url: MemPalaceSystem(Endpoints(url, MODEL, "hash", 64, 8192)),
                           stack)
    for round_ in range(2):  # the harness closes a system between instances
        system.reset(f"i{round_}", tmp_path / f"i{round_}")
        system.ingest(sessions())
        assert isinstance(system.retrieve("cat?", None), Retrieval)
        system.close()
        assert not stack.running
    assert {r.tags["phase"] for r in log.records} == {"build", "retrieve"}
    broken = ProxiedSystem("broken", lambda url: FullContextSystem(8192, 256, count_tokens=lambda text: "x"),  # type: ignore[arg-type,return-value]
                           stack)
    broken.reset("i", tmp_path / "b")
    broken.ingest(sessions())
    with pytest.raises(ModelError, match="broken: TypeError"):
        broken.retrieve("q", None)
    broken.close()


# ---------------------------------------------------------------- the real libraries, on the real model


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServingStack]:
    from memforest.llm.embedders import SentenceTransformerEmbedder

    embedder = SentenceTransformerEmbedder(EmbedderConfig())
    # A cap on max_tokens keeps a looping 135M model from generating for minutes per call; one thread,
    # because llama.cpp's spinning threads slow down badly when the two cores are shared.
    serving = ServingStack(CallLog(), "tests", llm_model=MODEL, embedder=embedder, n_ctx=8192, threads=1,
                           max_tokens_cap=64, log_dir=tmp_path_factory.mktemp("serving"))
    with serving:
        yield serving
    embedder.close()


def run_system(stack: ServingStack, system: MemorySystem,
               workdir: Path) -> tuple[dict, Retrieval, list[CallRecord]]:
    assert stack.proxy is not None
    stack.proxy.system = system.name
    mark = len(stack.call_log)
    try:
        system.reset("instance-1", workdir)
        stack.proxy.phase = "build"
        stats = system.ingest(sessions())
        stack.proxy.phase = "retrieve"
        result = system.retrieve("What is the name of my cat?", datetime(2023, 5, 1))
    finally:
        system.close()
    return stats, result, [r for r in stack.call_log.since(mark) if r.tags["system"] == system.name]


def calls(records: list[CallRecord], phase: str, stage: str) -> list[CallRecord]:
    return [r for r in records if r.tags["phase"] == phase and r.stage == stage]


def assert_accounted(records: list[CallRecord], phase: str, stage: str) -> None:
    found = calls(records, phase, stage)
    assert found, f"no {stage} call recorded in phase {phase}"
    assert sum(r.prompt_tokens for r in found) > 0
    if stage == "chat":
        assert sum(r.completion_tokens for r in found) > 0
    assert all(r.error is None for r in found), [r.error for r in found]


@pytest.mark.integration
@pytest.mark.slow
@installed("mem0")
def test_mem0(stack: ServingStack, tmp_path: Path) -> None:
    from baselines.mem0 import Mem0System

    system = Mem0System(endpoints(stack.base_url))
    stats, result, records = run_system(stack, system, tmp_path)
    assert stats["adds"] == 2 and isinstance(result, Retrieval)
    assert_accounted(records, "build", "chat")
    assert_accounted(records, "retrieve", "embed")
    assert (tmp_path / "qdrant").exists() and (tmp_path / "history.db").exists()


@pytest.mark.integration
@pytest.mark.slow
@installed("mempalace")
def test_mempalace(stack: ServingStack, tmp_path: Path) -> None:
    from baselines.mempalace import MemPalaceSystem

    stats, result, records = run_system(stack, MemPalaceSystem(endpoints(stack.base_url)), tmp_path)
    assert stats["documents"] == 2 and len(result.evidence) == 2
    assert {tuple(e.session_ids) for e in result.evidence} == {("s1",), ("s2",)}
    assert result.evidence[0].turn_ids and not calls(records, "build", "chat")  # no LLM on write
    assert_accounted(records, "build", "embed")
    assert_accounted(records, "retrieve", "embed")


@pytest.mark.integration
@pytest.mark.slow
@installed("graphiti_core")
@installed("kuzu")
def test_zep_local_on_kuzu(stack: ServingStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tenacity
    from graphiti_core.llm_client.client import LLMClient

    from baselines.zep_local import ZepLocalSystem

    # Graphiti retries malformed output 4 times with 5-120 s random waits; keep its retries, drop the waits.
    monkeypatch.setattr(LLMClient._generate_response_with_retry.retry, "wait", tenacity.wait_none())
    system = ZepLocalSystem(endpoints(stack.base_url))
    stats, result, records = run_system(stack, system, tmp_path)
    # one per message
    assert stats["episodes"] + stats["failed_episodes"] == 4 and isinstance(result, Retrieval)
    assert set(result.trace["counts"]) == {"edges", "nodes"}
    assert_accounted(records, "build", "chat")
    assert_accounted(records, "retrieve", "embed")
    assert (tmp_path / "graph.kuzu").exists()


@pytest.mark.integration
@pytest.mark.slow
@installed("memoryos")
def test_memoryos(stack: ServingStack, tmp_path: Path) -> None:
    from baselines.memoryos import MemoryOSSystem

    system = MemoryOSSystem(endpoints(stack.base_url))
    stats, result, records = run_system(stack, system, tmp_path)
    assert stats["qa_pairs"] == 2 and stats["mid_term_sessions"] >= 1  # the short-term queue was flushed
    assert isinstance(result, Retrieval)
    assert_accounted(records, "build", "chat")
    assert_accounted(records, "build", "embed")
    assert_accounted(records, "retrieve", "embed")
    assert {r.model for r in calls(records, "build", "chat")} == {MODEL}


# ---------------------------------------------------------------- Mem0 2.x, in its own environment


def mem0_additive_python() -> str:
    """The interpreter named by MEMFOREST_MEM0_ADDITIVE_PYTHON, when it has mem0ai 2.x; else the test is
    skipped."""
    python = os.environ.get("MEMFOREST_MEM0_ADDITIVE_PYTHON")
    if not python:
        pytest.skip("MEMFOREST_MEM0_ADDITIVE_PYTHON is not set (the interpreter of an environment "
                    "with mem0ai>=2,<3)")
    probe = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('mem0ai'))"],
                           capture_output=True, text=True, timeout=60, check=False)
    version = probe.stdout.strip()
    if probe.returncode != 0 or not version.startswith("2."):
        pytest.skip(f"MEMFOREST_MEM0_ADDITIVE_PYTHON={python} has no mem0ai 2.x "
                    f"({version or probe.stderr.strip()[-200:]})")
    return python


@pytest.mark.integration
def test_mem0_additive_prompt_date_is_the_session_date() -> None:
    script = f"""
import importlib.util
spec = importlib.util.spec_from_file_location("additive_worker", {str(MEM0_ADDITIVE_WORKER)!r})
worker = importlib.util.module_from_spec(spec)
spec.loader.exec_module(worker)
import mem0.memory.main as main
with worker.observation_day("2021-07-04"):
    inside = main.generate_additive_extraction_prompt(new_messages="user: hi")
outside = main.generate_additive_extraction_prompt(new_messages="user: hi")
assert "## Observation Date\\n2021-07-04" in inside and "## Current Date\\n2021-07-04" in inside, inside
assert "2021-07-04" not in outside, outside
"""
    done = subprocess.run([mem0_additive_python(), "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **QUIET_ENV}, check=False)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.fixture
def long_context_stack(stack: ServingStack, tmp_path: Path) -> Iterator[ServingStack]:
    """Mem0 2.x's extraction system prompt alone is about 8.6k SmolLM2 tokens: a 16k context, as
    configs/method/mem0_additive.yaml asks of the embedded model (past its 8k training length, which is
    fine for checking structure)."""
    serving = ServingStack(CallLog(tmp_path / "calls.jsonl"), "tests", llm_model=MODEL,
                           embedder=stack.embedder, n_ctx=16384, threads=1,
                           max_tokens_cap=64, log_dir=tmp_path / "serving")
    with serving:
        yield serving


@pytest.mark.integration
@pytest.mark.slow
def test_mem0_additive(long_context_stack: ServingStack, tmp_path: Path) -> None:
    stack = long_context_stack
    system = mem0_additive_system(endpoints(stack.base_url, 16384), python=mem0_additive_python(),
                                  log_path=tmp_path / "worker.log")
    assert system.info["name"] == "mem0" and system.info["mem0ai"].startswith("2.")
    stats, result, records = run_system(stack, system, tmp_path / "store")
    assert stats["adds"] == 2 and 0 <= stats["failed_adds"] <= 2 and "worker_cpu_seconds" in stats
    assert stats["mem0ai"] == system.info["mem0ai"]  # the build records the version of the other environment
    assert isinstance(result, Retrieval) and len(result.evidence) <= 20  # Mem0 2.x's default top_k
    days = {"s1": "2023-03-01 09:00", "s2": "2023-04-02 09:00"}
    for item in result.evidence:
        assert len(item.session_ids) == 1 and item.time == days[item.session_ids[0]]
        assert item.turn_ids == [f"{item.session_ids[0]}:0", f"{item.session_ids[0]}:1"]
    # Every stored memory carries the provenance that evidence is mapped back with, and the session's time.
    stored = stored_memories(tmp_path / "store" / "qdrant")
    assert len(stored) == stats["memories_added"]
    for payload in stored:
        sid = payload["session_id"]
        assert payload["session_date"] == days[sid] and payload["turn_ids"] == [f"{sid}:0", f"{sid}:1"]
        assert (payload["created_at"] == days[sid].replace(" ", "T") + ":00"
                and payload["user_id"] == "instance-1")
    assert_accounted(records, "build", "chat")
    assert_accounted(records, "build", "embed")
    assert_accounted(records, "retrieve", "embed")
    assert (tmp_path / "store" / "history.db").exists()


def stored_memories(qdrant: Path) -> list[dict]:
    """The payloads of the memories Mem0 2.x stored, read by the Qdrant client of its own environment."""
    script = ("import json, sys\nfrom qdrant_client import QdrantClient\n"
              "points, _ = QdrantClient(path=sys.argv[1]).scroll('mem0', limit=10000, with_payload=True)\n"
              "print(json.dumps([p.payload for p in points]))")
    done = subprocess.run([mem0_additive_python(), "-c", script, str(qdrant)], capture_output=True, text=True,
                          timeout=120, check=True)
    return json.loads(done.stdout)
