"""Every baseline installable here, through its real library, against SmolLM2 served by llama_cpp.server
and MiniLM served by our embeddings endpoint, both behind the logging proxy. The tiny model writes poor
or malformed outputs: these tests check structure and accounting (calls and tokens logged per phase,
a Retrieval returned), never content."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from baselines.base import MemorySystem, Retrieval, SystemUnavailable
from baselines.common import PhaseClock
from baselines.evermemos import evermemos_system
from baselines.flat_rag import FlatRAGSystem
from baselines.full_context import FullContextSystem
from baselines.lightmem import lightmem_system
from benchmarks.datasets.records import Session, Turn
from benchmarks.serving import ProxiedSystem, ServingStack
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
    system = FullContextSystem(max_tokens=25, count_tokens=lambda text: len(text.split()))
    system.reset("i", tmp_path)
    assert system.ingest(list(reversed(sessions()))) == {"sessions": 2, "turns": 4}
    result = system.retrieve("where do I live?", None)
    assert result.trace["truncated"] and result.trace["turns_kept"] < 4
    assert result.evidence[-1].turn_ids[-1] == "s2:1"  # newest kept, oldest cut
    whole = FullContextSystem()
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


def test_workers_without_a_checkout_are_unavailable(tmp_path: Path) -> None:
    with pytest.raises(SystemUnavailable, match="no LightMem checkout"):
        lightmem_system(None, None, "http://127.0.0.1:1/v1", MODEL)
    with pytest.raises(SystemUnavailable, match="no Python interpreter"):
        lightmem_system(None, str(tmp_path), "http://127.0.0.1:1/v1", MODEL)
    with pytest.raises(SystemUnavailable, match="no EverMemOS checkout"):
        evermemos_system("/usr/bin/python3", None, "http://127.0.0.1:1/v1", MODEL)
    with pytest.raises(SystemUnavailable, match="system config"):
        evermemos_system("/usr/bin/python3", str(tmp_path), "http://127.0.0.1:1/v1", MODEL)


def test_missing_package_is_unavailable_with_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    from baselines.mem0 import Mem0System

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(SystemUnavailable, match=r"memforest\[mem0\]"):
        Mem0System("http://x/v1", MODEL, "http://x/v1", EMBED_MODEL, DIMS)


@installed("mem0")
def test_mem0_prompt_date_is_the_session_date() -> None:
    import mem0.memory.utils as prompts

    from baselines.mem0.system import extraction_date

    before = prompts.USER_MEMORY_EXTRACTION_PROMPT
    with extraction_date(datetime(2021, 7, 4)):
        assert "Today's date is 2021-07-04" in prompts.USER_MEMORY_EXTRACTION_PROMPT
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
    system = ProxiedSystem("mempalace", lambda url: MemPalaceSystem(url, "hash"), stack)
    for round_ in range(2):  # the harness closes a system between instances
        system.reset(f"i{round_}", tmp_path / f"i{round_}")
        system.ingest(sessions())
        assert isinstance(system.retrieve("cat?", None), Retrieval)
        system.close()
        assert not stack.running
    assert {r.tags["phase"] for r in log.records} == {"ingest", "query"}
    broken = ProxiedSystem("broken", lambda url: FullContextSystem(max_tokens="x"), stack)  # type: ignore[arg-type]
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


def run_system(stack: ServingStack, system: MemorySystem, workdir: Path) -> tuple[dict, Retrieval, list[CallRecord]]:
    assert stack.proxy is not None
    stack.proxy.system = system.name
    mark = len(stack.call_log)
    try:
        system.reset("instance-1", workdir)
        stack.proxy.phase = "ingest"
        stats = system.ingest(sessions())
        stack.proxy.phase = "query"
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

    system = Mem0System(stack.base_url, MODEL, stack.base_url, EMBED_MODEL, DIMS)
    stats, result, records = run_system(stack, system, tmp_path)
    assert stats["adds"] == 2 and isinstance(result, Retrieval)
    assert_accounted(records, "ingest", "chat")
    assert_accounted(records, "query", "embed")
    assert (tmp_path / "qdrant").exists() and (tmp_path / "history.db").exists()


@pytest.mark.integration
@pytest.mark.slow
@installed("mempalace")
def test_mempalace(stack: ServingStack, tmp_path: Path) -> None:
    from baselines.mempalace import MemPalaceSystem

    stats, result, records = run_system(stack, MemPalaceSystem(stack.base_url, EMBED_MODEL), tmp_path)
    assert stats["documents"] == 2 and len(result.evidence) == 2
    assert {tuple(e.session_ids) for e in result.evidence} == {("s1",), ("s2",)}
    assert result.evidence[0].turn_ids and not calls(records, "ingest", "chat")  # no LLM on write
    assert_accounted(records, "ingest", "embed")
    assert_accounted(records, "query", "embed")


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
    system = ZepLocalSystem(stack.base_url, MODEL, stack.base_url, EMBED_MODEL, DIMS)
    stats, result, records = run_system(stack, system, tmp_path)
    assert stats["episodes"] + stats["failed_episodes"] == 2 and isinstance(result, Retrieval)
    assert set(result.trace["counts"]) == {"edges", "nodes", "episodes", "communities"}
    assert_accounted(records, "ingest", "chat")
    assert_accounted(records, "query", "embed")
    assert (tmp_path / "graph.kuzu").exists()


@pytest.mark.integration
@pytest.mark.slow
@installed("memoryos")
def test_memoryos(stack: ServingStack, tmp_path: Path) -> None:
    from baselines.memoryos import MemoryOSSystem
    from memforest.llm.embedders import OpenAIEmbedder

    embedder = OpenAIEmbedder(EmbedderConfig(backend="openai", base_url=stack.base_url, model=EMBED_MODEL, dim=DIMS))
    system = MemoryOSSystem(stack.base_url, MODEL, embedder)
    stats, result, records = run_system(stack, system, tmp_path)
    embedder.close()
    assert stats["qa_pairs"] == 2 and stats["mid_term_sessions"] >= 1  # the short-term queue was flushed
    assert isinstance(result, Retrieval)
    assert_accounted(records, "ingest", "chat")
    assert_accounted(records, "ingest", "embed")
    assert_accounted(records, "query", "embed")
    assert {r.model for r in calls(records, "ingest", "chat")} == {MODEL}
