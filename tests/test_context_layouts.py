"""Each adapter's answer context is its `render` of its evidence items (one rendering path), and a
subset of the items that a token budget keeps (cut in rank order, rendered in list order) keeps the
system's headers and sections: Zep's facts and entities with the note on their dates, LightMem's
"Memories for user <name>" groups, EverMemOS's episodes with their subjects under its conversation
header, MemPalace's dated sessions. Libraries as the protocol tests stand them in."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import pytest
from library_stubs import Recorder, install
from test_baseline_protocols import (
    UPSTREAM,
    b_first,
    chat,
    conversation,
    endpoints,
    evermemos,
    lightmem,
    stub_packages,
)
from test_baseline_protocols import run_worker as run_system

from baselines.base import EvidenceItem, Retrieval
from baselines.worker import WorkerSystem, render_layout

ECHO = Path(__file__).parent / "fixtures" / "echo_worker.py"


def run_worker(system: Any, sessions: list, workdir: Path) -> tuple[dict, Retrieval]:
    stats, result = run_system(system, sessions, workdir)
    return stats, cast(Retrieval, result)


def best(evidence: Sequence[EvidenceItem], n: int) -> list[EvidenceItem]:
    """The `n` best-ranked items in their list order, as the token budget keeps them."""
    order = sorted(range(len(evidence)), key=lambda i: (evidence[i].rank is None, evidence[i].rank or 0, i))
    return [evidence[i] for i in sorted(order[:n])]


def one_path(system: Any, result: Retrieval) -> None:
    assert result.evidence and result.context == system.render(result.evidence)
    assert [e.rank for e in sorted(result.evidence, key=lambda e: e.rank or 0)] == list(
        range(len(result.evidence)))


@pytest.fixture
def record_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "record.jsonl"
    monkeypatch.setenv("UPSTREAM_STUB_RECORD", str(path))
    return path


# ---------------------------------------------------------------- Zep Local


@pytest.mark.parametrize("shape", ["locomo", "longmemeval"])
def test_zep_cut_keeps_both_sections_and_the_date_note(shape: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from baselines.zep_local import ZepLocalSystem
    from baselines.zep_local.system import FACT_NOTES

    install(monkeypatch, Recorder())
    system = ZepLocalSystem(endpoints())
    system.reset("conv", tmp_path)
    system.ingest(conversation() if shape == "locomo" else chat())
    result = system.retrieve("Where?", datetime(2023, 5, 30))
    one_path(system, result)
    assert [e.section for e in result.evidence] == ["facts"] * (len(result.evidence) - 1) + ["entities"]
    kept = best(result.evidence, 3)  # equal fused scores: fact, entity, fact
    assert [e.section for e in kept] == ["facts", "facts", "entities"]
    context = system.render(kept)
    note = FACT_NOTES["conversation" if shape == "locomo" else "chat"]
    assert note in context and context.count("<FACTS>") == context.count("<ENTITIES>") == 1
    facts, entities = context.split("<ENTITIES>")
    assert facts.count("\n- ") == 2 and entities.count("\n- ") == 1
    assert ("(event_time: " in facts) == (shape == "locomo")
    assert "<FACTS>\n\n</FACTS>" in system.render(kept[2:])  # no facts kept: the section stays, empty
    system.close()


def test_zep_ranks_facts_and_entities_by_their_fused_scores() -> None:
    from baselines.zep_local.system import search_ranks

    facts = [EvidenceItem("f0", score=0.9), EvidenceItem("f1", score=0.4)]
    entities = [EvidenceItem("e0", score=1.0), EvidenceItem("e1", score=0.4)]
    listed = search_ranks(facts, entities)
    assert [e.text for e in listed] == ["f0", "f1", "e0", "e1"] and [e.rank for e in listed] == [1, 2, 0, 3]
    unscored = search_ranks([EvidenceItem("f0"), EvidenceItem("f1")], [EvidenceItem("e0", score=1.0)])
    assert [e.rank for e in unscored] == [0, 2, 1]  # interleaved by their own ranks


# ---------------------------------------------------------------- MemPalace


@pytest.fixture
def mempalace_stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with stub_packages(monkeypatch, "mempalace_raw", ("chromadb", "mempalace")):
        yield


def test_mempalace_cut_keeps_each_session_under_its_date(mempalace_stub: None, tmp_path: Path) -> None:
    from baselines.mempalace import MemPalaceSystem

    system = MemPalaceSystem(endpoints(), top_k=2)
    system.reset("i", tmp_path)
    system.ingest(chat())
    result = system.retrieve("What is my cat's name?", None)
    one_path(system, result)
    kept = best(result.evidence, 1)
    assert system.render(kept) == f"[{kept[0].time}]\n{kept[0].text}" and kept[0].rank == 0
    system.close()


# ---------------------------------------------------------------- LightMem and EverMemOS (workers)


def test_lightmem_cut_keeps_the_speaker_sections(record_file: Path, tmp_path: Path) -> None:
    system: Any = lightmem(UPSTREAM / "lightmem", tmp_path)
    _, result = run_worker(system, conversation(), tmp_path / "w")
    one_path(system, result)
    sections = [e.section for e in result.evidence]
    assert sections == sorted(sections, key=sections.index)  # listed by speaker, as the context shows them
    assert result.evidence[0].rank == 0 and sections[0] == "Ana"  # the best-ranked memory's speaker first
    kept = best(result.evidence, 3)
    context = system.render(kept)
    assert context.startswith("Memories for user Ana:\n\n") and "\n\nMemories for user Bo:\n\n" in context
    assert all(e.text in context for e in kept) and context.count("[Memory recorded on:") == 3
    _, plain = run_worker(lightmem(UPSTREAM / "lightmem", tmp_path), chat(), tmp_path / "chat")
    assert plain.context == "\n".join(e.text for e in plain.evidence)  # "time weekday memory" lines
    assert all(e.section is None for e in plain.evidence)


@pytest.mark.parametrize("sessions", [conversation(), b_first()], ids=["a_first", "b_first"])
def test_evermemos_cut_keeps_its_header_and_episode_subjects(sessions: list, record_file: Path,
                                                             tmp_path: Path) -> None:
    system: Any = evermemos(UPSTREAM / "evermemos", tmp_path, use_reranker=False)
    _, result = run_worker(system, sessions, tmp_path / "w")
    one_path(system, result)
    assert result.trace["layout_matches_upstream"] is True  # the layout writes upstream's formatted_context
    kept = best(result.evidence, 2)
    context = system.render(kept)
    assert context.startswith("Episodes memories for conversation between Ana and Bo:\n\n")
    assert context.count("\n---") == 2 and all(e.text.split(": ", 1)[0].endswith(" said") for e in kept)
    assert system.render([]) == ""  # upstream's context of no memories


def test_a_worker_layout_renders_any_subset_and_old_workers_keep_their_context(tmp_path: Path) -> None:
    layout = {"head": "H\n", "section": "== {section}\n", "item": "* {text} ({time})", "sections_join": "\n"}
    system = WorkerSystem("echo", sys.executable, ECHO, {"layout": layout})
    _, result = run_worker(system, chat(), tmp_path / "w")
    assert result.context == system.render(result.evidence) != "not read"  # the layout, not the worker's text
    assert result.context.startswith("H\n== s1\n* ") and "\n== s2\n* " in result.context
    assert [e.rank for e in result.evidence] == [0, 1]
    assert render_layout(layout, []) == "H\n" and render_layout({"empty": "-"}, []) == "-"
    with pytest.raises(ValueError, match="unknown layout keys"):
        render_layout({"header": "x"}, [])
    old = WorkerSystem("echo", sys.executable, ECHO, {})
    _, plain = run_worker(old, chat(), tmp_path / "old")
    assert plain.context == old.render(plain.evidence) and plain.evidence[0].rank is None


# ---------------------------------------------------------------- full_context


def test_full_context_renders_each_session_under_its_date(tmp_path: Path) -> None:
    from baselines.full_context import FullContextSystem

    system = FullContextSystem(8192, 256)
    system.reset("i", tmp_path)
    system.ingest(chat())
    result = system.retrieve("q", None)
    assert result.context == system.render(result.evidence)
    assert system.render(result.evidence[-1:]).startswith(f"[{result.evidence[-1].time}]\n")
