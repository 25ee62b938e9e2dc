"""The paper's ablation switches reach their code paths: tree families, the six retrieval settings,
chunk size and the evidence budget (structure and counts, never the scripted model's wording)."""

import pytest
from conftest import RESIDENCE, make_sessions

from memforest.config import QUERY_MODES, LimitsConfig, MemForestConfig, with_overrides
from memforest.errors import ConfigError
from memforest.facts.chunking import chunk_session
from memforest.sessions import parse_sessions


def _families(forest, user):
    return {info.family for info in forest.snapshot(user).state.trees.values()}


def test_defaults_are_unchanged():
    cfg = MemForestConfig().validate()
    assert cfg.tree.families == ["session", "entity", "scene"]
    assert cfg.query.mode == "embed" and cfg.chunk.max_turns == 2 and cfg.query.final_units == 10


@pytest.mark.parametrize("families",
                         [["session"], ["entity"], ["scene"], ["entity", "scene"], ["session", "scene"]])
def test_tree_families_build_only_the_selected(scripted_forest, families):
    forest = scripted_forest(tree__families=families)
    forest.ingest_sessions("bob", RESIDENCE)
    built = _families(forest, "bob")
    assert built and built <= set(families)
    state = forest.snapshot("bob").state
    assert state.facts  # facts are extracted whatever the families
    if "session" in families:
        assert sum(i.family == "session" for i in state.trees.values()) == len(RESIDENCE)


def test_all_families_by_default(scripted_forest):
    forest = scripted_forest()
    forest.ingest_sessions("bob", RESIDENCE)
    assert _families(forest, "bob") == {"session", "entity", "scene"}


@pytest.mark.parametrize("value", [[], ["session", "bogus"], ["scene", "scene"]])
def test_bad_family_selection_is_refused(value):
    with pytest.raises(ConfigError, match="tree.families"):
        with_overrides(MemForestConfig(), {"tree": {"families": value}}).validate()


def test_every_mode_is_a_choice_and_unknown_ones_are_refused():
    for mode in QUERY_MODES:
        with_overrides(MemForestConfig(), {"query": {"mode": mode}}).validate()
    with pytest.raises(ConfigError, match="query.mode"):
        with_overrides(MemForestConfig(), {"query": {"mode": "nearest"}}).validate()


@pytest.mark.parametrize("mode", QUERY_MODES)
def test_each_retrieval_mode_reaches_its_path(scripted_forest, mode):
    forest = scripted_forest(query__final_units=4)
    forest.ingest_sessions("u", make_sessions(6, 6))
    result = forest.query("u", "What did I mention about Denver?", answer=False, mode=mode)
    trace, evidence = result.trace, result.evidence
    assert trace["mode"] == mode
    assert 0 < len(evidence) <= 4
    calls = trace["llm_calls"]["by_stage"]
    kinds = {e.kind for e in evidence}
    if mode == "flat":
        assert trace["recalled"] == [] and kinds == {"fact"} and {e.via for e in evidence} == {"flat"}
        assert not calls
    elif mode == "root":
        assert kinds == {"summary"} and {e.via for e in evidence} == {"root"}
        recalled = [r["tree_id"] for r in trace["recalled"]]
        assert {e.tree_id for e in evidence} <= set(recalled[:4])
        assert not calls
    elif mode == "embed":
        assert not calls and "plan" not in trace
    elif mode == "embed_planner":
        assert calls.keys() == {"plan"} and calls["plan"]["calls"] == 1
        assert len(trace["browse"]) == len(trace["plan"]["queries"])
    elif mode == "llm":
        assert "plan" not in calls and calls["browse"]["calls"] >= 1
        assert [q[1] for q in trace["plan"]["queries"]] == [result.question] * len(trace["recalled"])
    else:  # planner
        assert calls["plan"]["calls"] == 1 and calls["browse"]["calls"] >= 1


def test_flat_mode_takes_k_facts(scripted_forest):
    forest = scripted_forest(query__final_units=3, query__mode="flat")
    forest.ingest_sessions("u", make_sessions(6, 6))
    assert len(forest.query("u", "topic about Miami", answer=False).evidence) == 3


def test_flat_mode_over_cells_serves_k_cells_of_a_memory_without_facts(tmp_path):
    from memforest.api import MemForest
    from memforest.llm.testing import HashEmbedder

    cfg = MemForestConfig()
    cfg.tree.summary_mode = "extractive"
    with MemForest(tmp_path / "store", cfg, embedder=HashEmbedder(), generate=False) as forest:
        forest.ingest_sessions("u", make_sessions(6, 6))
        assert not len(forest.snapshot("u").state.facts)
        for units, served in (("facts", 0), ("cells", 3)):
            forest.config.query.mode, forest.config.query.flat_units = "flat", units
            forest.config.query.final_units = 3
            result = forest.query("u", "topic about Miami", answer=False)
            assert len(result.evidence) == served and {e.kind for e in result.evidence} <= {"cell"}
            assert all(e.via == "flat" and len(e.session_ids) == 1 for e in result.evidence)
    with pytest.raises(ConfigError):
        with_overrides(MemForestConfig(), {"query": {"flat_units": "turns"}}).validate()


@pytest.mark.parametrize("k", [1, 5, 20])
def test_evidence_budget_k_bounds_the_context(scripted_forest, k):
    forest = scripted_forest(query__final_units=k)
    forest.ingest_sessions("u", make_sessions(10, 6))
    evidence = forest.query("u", "What did I mention about Denver?", answer=False).evidence
    assert len(evidence) == min(k, 60)


@pytest.mark.parametrize(("max_turns", "cells"), [(1, 12), (2, 6), (5, 3), (64, 1), (0, 1)])
def test_chunk_size_sets_the_cells_per_session(max_turns, cells):
    session = parse_sessions(make_sessions(1, 12), LimitsConfig())[0]
    cfg = with_overrides(MemForestConfig(),
                         {"chunk": {"max_turns": max_turns, "max_chars": 100_000}}).validate()
    out = chunk_session(session, cfg.chunk)
    assert len(out) == cells
    assert sum(c.turn_hi - c.turn_lo + 1 for c in out) == 12


@pytest.mark.parametrize("value", [-1, 65])
def test_chunk_size_out_of_range_is_refused(value):
    with pytest.raises(ConfigError, match="chunk.max_turns"):
        with_overrides(MemForestConfig(), {"chunk": {"max_turns": value}}).validate()


def test_whole_session_cells_reach_the_write_path(scripted_forest):
    forest = scripted_forest(chunk__max_turns=0)
    report = forest.ingest_sessions("u", make_sessions(3, 8))
    assert report.cells == 3
