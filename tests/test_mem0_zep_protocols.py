"""Mem0 and Zep Local drive their libraries as their authors' evaluations do (baselines/README.md, fidelity
table), checked on recording stand-ins of the libraries; and the budget axis."""

from __future__ import annotations

import json
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from library_stubs import Recorder, install

from baselines.base import Endpoints, Session, Turn
from baselines.mem0.protocol import NAME_PEOPLE, Store, ranked_hits, render_sections, speaker_stores

FIXTURES = Path(__file__).parent / "fixtures"


def endpoints() -> Endpoints:
    return Endpoints("http://127.0.0.1:9/v1", "chat", "embed", 64, 8192)


def conversation() -> list[Session]:
    """Two people, two sessions (LoCoMo's shape)."""
    def turn(sid: str, i: int, who: str, text: str, when: datetime) -> Turn:
        return Turn("user", text, when, f"{sid}:{i}", speaker=who)

    one, two = datetime(2023, 5, 8, 13, 56), datetime(2023, 6, 21, 10, 5)
    return [
        Session("s1", one, (turn("s1", 1, "Nadia", "I repaired my sailboat.", one),
                            turn("s1", 2, "Tomas", "Nice! Where do you sail?", one),
                            turn("s1", 3, "Nadia", "On Lake Verrin.", one))),
        Session("s2", two, (turn("s2", 1, "Tomas", "I moved to a new flat.", two),
                            turn("s2", 2, "Nadia", "Congrats on the move.", two))),
    ]


def dialogue() -> list[Session]:
    """A user and an assistant (LongMemEval's shape)."""
    when = datetime(2023, 3, 1, 9)
    return [Session("a", when, (Turn("user", "I adopted a cat.", None, "a:0"),
                                Turn("assistant", "What is its name?", None, "a:1"),
                                Turn("user", "Miso.", None, "a:2")))]


# ---------------------------------------------------------------- Mem0


def test_mem0_writes_one_store_per_speaker_with_roles_reversed(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from baselines.mem0 import Mem0System

    recorder = Recorder()
    install(monkeypatch, recorder)
    system = Mem0System(endpoints())
    system.reset("conv-1", tmp_path)
    stats = system.ingest(conversation())
    by_store: dict[str, list[dict[str, Any]]] = {}
    for add in recorder.adds:
        by_store.setdefault(add["user_id"], []).append(add)
    assert set(by_store) == {"conv-1__Nadia", "conv-1__Tomas"}
    assert stats["adds_per_store"] == {"conv-1__Nadia": 3, "conv-1__Tomas": 3}  # 2 messages per add
    for store, speaker in (("conv-1__Nadia", "Nadia"), ("conv-1__Tomas", "Tomas")):
        for add in by_store[store]:
            assert len(add["messages"]) <= 2
            for m in add["messages"]:
                own = m["content"].startswith(f"{speaker}: ")
                assert m["role"] == ("user" if own else "assistant")
            assert add["prompt"].endswith(NAME_PEOPLE)  # the name-people instruction
            assert add["metadata"]["session_date"] in ("2023-05-08 13:56", "2023-06-21 10:05")
            assert "Today's date is 2023-" in add["prompt"]
    result = system.retrieve("Where does Nadia sail?", None)
    assert ([(s["user_id"], s["limit"]) for s in recorder.searches]
            == [("conv-1__Nadia", 30), ("conv-1__Tomas", 30)])
    assert "Memories of Nadia:" in result.context and "Memories of Tomas:" in result.context
    assert result.trace["per_store"] == {"conv-1__Nadia": 3, "conv-1__Tomas": 3}


def stub_calls(system: Any, tmp_path: Path, log: Path) -> list[dict[str, Any]]:
    """Build and query a LoCoMo conversation and a LongMemEval dialogue; the stub's logged calls."""
    try:
        for instance, sessions in (("conv", conversation()), ("q1", dialogue())):
            system.reset(instance, tmp_path / instance)
            system.ingest(sessions)
            system.retrieve("Where?", None)
    finally:
        system.close()
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_mem0_on_dialogue_keeps_one_store_and_the_roles(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from baselines.mem0 import Mem0System

    recorder = Recorder()
    install(monkeypatch, recorder)
    system = Mem0System(endpoints(), evidence_limit=1)
    system.reset("q1", tmp_path)
    system.ingest(dialogue())
    assert {a["user_id"] for a in recorder.adds} == {"q1"}
    assert [m["role"] for a in recorder.adds for m in a["messages"]] == ["user", "assistant", "user"]
    assert not any(a["prompt"].endswith(NAME_PEOPLE) for a in recorder.adds)
    result = system.retrieve("What is my cat called?", None)
    assert recorder.searches[-1]["limit"] == 30 and len(result.evidence) == 1  # the shared-budget cut


def test_mem0_2_worker_follows_the_same_protocol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from baselines.mem0 import mem0_additive_system

    log = tmp_path / "mem0.jsonl"
    monkeypatch.setenv("MEM0_STUB_LOG", str(log))
    monkeypatch.setenv("PYTHONPATH", str(FIXTURES / "mem0_v2_stub"))
    system = mem0_additive_system(endpoints(), python=sys.executable)
    assert system.runtime_settings == {"mem0ai": "2.0.18", "bm25": False, "entity_boosts": False}
    calls = stub_calls(system, tmp_path, log)
    adds = [c for c in calls if c["op"] == "add"]
    speaker_adds = [a for a in adds if a["user_id"].startswith("conv__")]
    assert {a["user_id"] for a in speaker_adds} == {"conv__Nadia", "conv__Tomas"}
    for add in speaker_adds:
        speaker = add["user_id"].split("__")[1]
        assert all(m["role"] == ("user" if m["content"].startswith(speaker) else "assistant")
                   for m in add["messages"])
        assert add["prompt"]["instructions"] == NAME_PEOPLE
        assert add["prompt"]["current_date"] == add["metadata"]["session_date"][:10]
    assert all(a["prompt"]["instructions"] is None for a in adds if a["user_id"] == "q1")
    searches = [(c["filters"]["user_id"], c["top_k"], c["threshold"]) for c in calls if c["op"] == "search"]
    assert searches == [("conv__Nadia", 30, 0.1), ("conv__Tomas", 30, 0.1), ("q1", 20, 0.1)]


@pytest.mark.parametrize(("method", "expected"), [
    ("mem0_additive", [("conv__Nadia", 30), ("conv__Tomas", 30), ("q1", 20)]),
    ("mem0_additive_mb", [("conv", 200), ("q1", 200)]),  # memory-benchmarks: one store per conversation
])
def test_mem0_2_searches_at_its_protocols_top_k(method: str, expected: list[tuple[str, int]], tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """mem0_additive searches at the 1.x scripts' budgets and layout, mem0_additive_mb at
    memory-benchmarks' (one store, top-k 200), on both dataset shapes; both built from their method
    configs."""
    from benchmarks.harness.app import compose_config
    from benchmarks.harness.schema import bench_config

    log = tmp_path / "mem0.jsonl"
    monkeypatch.setenv("MEM0_STUB_LOG", str(log))
    monkeypatch.setenv("PYTHONPATH", str(FIXTURES / "mem0_v2_stub"))
    cfg = bench_config(compose_config([f"method={method}", f"method.system.python={sys.executable}"]))
    options = {k: v for k, v in cfg.method.system.items() if k != "_target_"}
    from baselines.mem0 import mem0_additive_system

    system = mem0_additive_system(endpoints(), **options)
    calls = stub_calls(system, tmp_path, log)
    assert [(c["filters"]["user_id"], c["top_k"]) for c in calls if c["op"] == "search"] == expected


def test_mem0_2_refuses_an_unknown_protocol() -> None:
    from baselines.mem0 import mem0_additive_system

    with pytest.raises(ValueError, match="memory_benchmarks"):
        mem0_additive_system(endpoints(), python=sys.executable, protocol="paper")


def test_mem0_context_lists_each_speaker_and_cuts_to_the_budget() -> None:
    stores = speaker_stores("c", ["Ann", "Bo"], str)
    assert (stores == [Store("c__Ann", "Ann", "Memories of Ann"), Store("c__Bo", "Bo", "Memories of Bo")]
            and speaker_stores("c", [], str) == [Store("c")]
            and speaker_stores("c", ["Ann", "Bo"], str, per_speaker=False) == [Store("c", "Ann")])
    found: list[tuple[Store, list[dict[str, Any]]]] = [
        (stores[0], [{"text": "Ann sails", "time": "2023-05-08", "score": 0.9},
                     {"text": "Ann reads", "time": None, "score": 0.2}]),
        (stores[1], [{"text": "Bo moved", "time": "2023-06-21", "score": 0.5}])]
    sections = [s.section for s in stores]

    def context(kept: list[dict[str, Any]]) -> str:
        return render_sections(sections, ((k["section"], k["time"], k["text"]) for k in kept))

    kept = ranked_hits(found)
    assert context(kept).splitlines()[:2] == ["Memories of Ann:", "[2023-05-08] Ann sails"]
    assert [(k["text"], k["rank"]) for k in kept] == [("Ann sails", 0), ("Bo moved", 1), ("Ann reads", 2)]
    kept = ranked_hits(found, limit=1)
    assert [k["text"] for k in kept] == ["Ann sails"] and "Memories of Bo:\n(none)" in context(kept)


# ---------------------------------------------------------------- Zep


def test_zep_adds_one_episode_per_message_and_searches_edges_and_nodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from baselines.zep_local import ZepLocalSystem

    recorder = Recorder()
    install(monkeypatch, recorder)
    system = ZepLocalSystem(endpoints())
    system.reset("conv", tmp_path)
    stats = system.ingest(conversation())
    assert stats["episodes"] == 5 and len(recorder.episodes) == 5
    s1 = conversation()[0]
    first = [e for e in recorder.episodes if e["name"].startswith("s1#")]
    assert ([e["reference_time"].replace(tzinfo=None) for e in first]
            == [s1.timestamp + timedelta(seconds=i) for i in range(3)])
    assert ([e["episode_body"] for e in first]
            == ["Nadia: I repaired my sailboat.", "Tomas: Nice! Where do you sail?",
                "Nadia: On Lake Verrin."])
    assert all(e["source"] == "message" and e["group_id"] == "conv" for e in recorder.episodes)
    result = system.retrieve("Where does Nadia sail?", None)
    assert ([(s["kind"], s["limit"], s["reranker"]) for s in recorder.searches]
            == [("edges", 20, "rrf"), ("nodes", 20, "rrf")])
    assert "<FACTS>" in result.context and "<ENTITIES>" in result.context
    assert "- I repaired" not in result.context  # facts, not raw episodes
    # LoCoMo: each fact with its event time, as zep_locomo_search.py writes it (LongMemEval: a range)
    assert "(event_time: 2023-05-08 13:56)" in result.context and " - present)" not in result.context
    assert "- Nadia: sails on a lake" in result.context
    assert result.evidence[0].session_ids == ["s1"] and result.evidence[0].turn_ids == ["s1:1"]
    assert stats["input"] == {"given": 5, "kept": 5, "unit": "episodes", "stored": 5, "lost": {},
                              "upstream": False}
    assert result.trace["counts"] == {"edges": 5, "nodes": 1}
    system.close()


def test_zep_longmemeval_query_is_dated_and_cut_as_zeps_script(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """zep_longmem_eval.ipynb searches `(date: <question_date>) question`, cut to 255 characters; its
    LoCoMo script searches the question alone."""
    from baselines.zep_local import ZepLocalSystem

    recorder = Recorder()
    install(monkeypatch, recorder)
    asked = datetime(2023, 5, 30, 23, 40)
    system = ZepLocalSystem(endpoints())
    system.reset("q1", tmp_path / "q1")
    system.ingest(dialogue())
    result = system.retrieve("What is my cat called?", asked)
    assert "(2023-03-01 09:00 - present)" in result.context and "event_time" not in result.context
    dated = "(date: 2023/05/30 (Tue) 23:40) What is my cat called?"
    assert [s["query"] for s in recorder.searches] == [dated, dated]
    assert result.trace["query"] == recorder.searches[0]["query"]
    long_question = "Which " + "very " * 80 + "long question?"
    system.retrieve(long_question, asked)
    assert recorder.searches[-1]["query"] == ("(date: 2023/05/30 (Tue) 23:40) " + long_question)[:255]
    assert len(recorder.searches[-1]["query"]) == 255
    system.close()
    recorder.searches.clear()
    system = ZepLocalSystem(endpoints())
    system.reset("conv", tmp_path / "conv")
    system.ingest(conversation())
    system.retrieve(long_question, asked)
    assert [s["query"] for s in recorder.searches] == [long_question] * 2  # LoCoMo: no date, no cut
    system.close()


def test_zep_shared_budget_keeps_the_best_ranked_facts_and_entities(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from baselines.zep_local import ZepLocalSystem

    install(monkeypatch, Recorder())
    system = ZepLocalSystem(endpoints(), evidence_limit=3)
    system.reset("conv", tmp_path)
    system.ingest(conversation())
    evidence = system.retrieve("Where?", None).evidence
    # equal fused scores: by place in their own lists (fact, entity, fact); listed facts first, then entities
    assert [e.text.startswith("Nadia:") for e in evidence] == [False, False, True]
    assert [e.rank for e in evidence] == [0, 2, 1]
    system.close()


def test_mem0_2_ranking_signals_reach_the_run_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    """Without fastembed and spaCy's model in its environment Mem0 2.x ranks by similarity alone: the
    harness warns and keeps what the worker reported for run.json (`system_runtime`)."""
    from benchmarks.harness import systems
    from benchmarks.harness.app import compose_config
    from benchmarks.harness.schema import bench_config
    from benchmarks.serving.stack import ProxiedSystem
    from memforest.llm.calllog import CallLog
    from memforest.llm.testing import HashEmbedder, ScriptedChatModel

    monkeypatch.setenv("MEM0_STUB_LOG", str(tmp_path / "mem0.jsonl"))
    monkeypatch.setenv("PYTHONPATH", str(FIXTURES / "mem0_v2_stub"))
    cfg = bench_config(compose_config(["method=mem0_additive", f"method.system.python={sys.executable}",
                                       "llm.backend=scripted", "embedder.backend=hash", "embedder.dim=64"]))
    models = systems.Models(HashEmbedder(64), ScriptedChatModel(), CallLog())
    system = systems.build_system(cfg.method, cfg.llm, cfg.embedder, models)
    assert isinstance(system, ProxiedSystem)
    assert system.runtime_settings == {"mem0ai": "2.0.18", "bm25": False, "entity_boosts": False}
    assert sum("runs WITHOUT" in r.getMessage() for r in caplog.records) == 2
    system.close()
