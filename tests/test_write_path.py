import json
import math
from collections import Counter

import numpy as np
import pytest
from conftest import RESIDENCE, make_sessions

from memforest.describe import describe
from memforest.errors import InputError, MemForestError, ModelError
from memforest.llm.base import TransientModelError
from memforest.llm.testing import rule_responder


def _stage(forest, stage):
    return [r for r in forest.log.records if r.stage == stage]


@pytest.mark.parametrize("sessions,turns,p", [(3, 6, 4), (5, 4, 3), (2, 8, 16)])
def test_extraction_runs_in_ceil_c_over_p_waves(scripted_forest, sessions, turns, p):
    forest = scripted_forest(concurrency=p)
    report = forest.ingest_sessions("u", make_sessions(sessions, turns))
    cells = sessions * math.ceil(turns / 2)
    assert report.cells == cells
    extract = _stage(forest, "extract")
    assert len(extract) == cells
    assert len({r.wave for r in extract}) == math.ceil(cells / p)
    assert forest.scheduler.model.max_in_flight <= p


def test_summary_refresh_is_level_wise_across_trees(scripted_forest):
    p = 4
    forest = scripted_forest(concurrency=p)
    forest.ingest_sessions("u", make_sessions(6, 8))
    state = forest.snapshot("u").state
    summarize = _stage(forest, "summarize")
    tallest = max(info.tree.height for info in state.trees.values())
    levels = Counter(r.level for r in summarize)
    assert sorted(levels) == list(range(1, tallest + 1))
    for level, n in levels.items():
        internal = sum(1 for i in state.trees.values() for node in i.tree.nodes.values()
                       if node.level == level)
        assert n == internal  # first ingest: every internal node is new
        assert len({r.wave for r in summarize if r.level == level}) == math.ceil(n / p)
    # levels never interleave: every level-L wave precedes every level-(L+1) wave
    for lo, hi in zip(sorted(levels), sorted(levels)[1:]):
        assert (max(r.wave for r in summarize if r.level == lo)
                < min(r.wave for r in summarize if r.level == hi))


def test_second_ingest_refreshes_only_dirty_paths(scripted_forest):
    forest = scripted_forest()
    forest.ingest_sessions("u", make_sessions(12, 4))
    before = forest.snapshot("u").state
    old = {k: (d.text, d.embedding.copy()) for k, d in before.nodes.items()}
    n_calls = len(forest.log)
    forest.ingest_sessions("u", make_sessions(13, 4)[12:])
    after = forest.snapshot("u").state
    summarize = [r for r in forest.log.records[n_calls:] if r.stage == "summarize"]
    changed = {k for k, d in after.nodes.items() if k not in old or old[k][0] != d.text
               or not np.array_equal(old[k][1], d.embedding)}
    internal_changed = {k for k in changed if after.trees[k[0]].tree.nodes[k[1]].level > 0}
    assert len(summarize) == len(internal_changed) > 0
    untouched_trees = [t for t in before.trees if t.startswith("session:") and t != "session:s012"]
    for t in untouched_trees:
        assert not any(k[0] == t for k in changed)
    # every changed internal node is an ancestor of a new or moved leaf
    for tid, nid in internal_changed:
        assert after.trees[tid].tree.nodes[nid].count > 0


def test_reopen_gives_identical_description(scripted_forest, tmp_path):
    forest = scripted_forest(path=tmp_path / "s")
    forest.ingest_sessions("bob", RESIDENCE)
    first = describe(forest.snapshot("bob").state)
    reopened = scripted_forest(path=tmp_path / "s")
    assert describe(reopened.snapshot("bob").state) == first
    for info in reopened.snapshot("bob").state.trees.values():
        info.tree.validate()


def test_canonical_facts_merge_occurrences(scripted_forest):
    forest = scripted_forest()
    same = [{"session_id": f"r{i}", "timestamp": f"2023-0{i + 1}-01", "turns": [
        {"role": "user", "content": "My dog Pepper likes long walks."},
        {"role": "assistant", "content": "Pepper sounds lovely."}]} for i in range(3)]
    forest.ingest_sessions("u", same[:1])
    forest.ingest_sessions("u", same[1:])
    facts = forest.snapshot("u").state.facts
    pepper = [f for f in facts.values() if "long walks" in f.text]
    assert len(pepper) == 1 and sorted(o.session_id for o in pepper[0].occurrences) == ["r0", "r1", "r2"]


def test_near_duplicates_go_through_llm_checks(scripted_forest):
    forest = scripted_forest(canon__min_cosine=0.5)
    forest.ingest_sessions("u", [{"session_id": "a", "timestamp": "2023-01-01", "turns": [
        {"role": "user", "content": "I adopted a cat named Miso."},
        {"role": "user", "content": "I adopted a cat named Miso!"},
        {"role": "user", "content": "I adopted a cat named Tofu."}]}])
    checks = _stage(forest, "dedup")
    assert 1 <= len(checks) <= 4 * 3
    texts = [f.text for f in forest.snapshot("u").state.facts.values()]
    assert sum("Miso" in t for t in texts) == 1  # equivalent: merged
    assert sum("Tofu" in t for t in texts) == 1  # an update stays a separate fact


def test_entity_tree_activates_and_backfills(scripted_forest):
    forest = scripted_forest()
    sess = [{"session_id": f"k{i}", "timestamp": f"2023-0{i + 1}-02", "turns": [
        {"role": "user", "content": f"Today I cooked with Karla recipe number {i}."},
        {"role": "user", "content": f"Then I asked Karla about dish {i}."}]} for i in range(2)]
    forest.ingest_sessions("u", sess[:1])
    assert "entity:karla" not in forest.snapshot("u").state.trees  # 2 facts, 1 session
    forest.ingest_sessions("u", sess[1:])
    state = forest.snapshot("u").state
    tree = state.trees["entity:karla"].tree
    assert len(tree) == 4  # back-filled with the first session's facts
    assert [leaf.key_lo[0] for leaf in tree.leaves()] == sorted(leaf.key_lo[0] for leaf in tree.leaves())


@pytest.mark.parametrize("bad,message", [
    ([{"session_id": "x", "timestamp": "2023-01-01", "turns": []}], "non-empty"),
    ([{"session_id": "x", "timestamp": "2023-01-01", "turns": [{"role": "robot", "content": "hi"}]}],
     "unknown role"),
    ([{"session_id": "x", "timestamp": "2023-01-01", "turns": [{"role": "user", "content": "  "}]}],
     "nothing readable"),
    ([{"session_id": "x", "timestamp": "not a date", "turns": [{"role": "user", "content": "hi"}]}],
     "cannot parse"),
    ([{"session_id": "x", "turns": [{"role": "user", "content": "hi"}]}], "missing timestamp"),
    ([{"session_id": "../x", "timestamp": "2023-01-01", "turns": [{"role": "user", "content": "hi"}]}],
     "unsafe"),
    ([{"session_id": "s000", "timestamp": "2023-01-01", "turns": [{"role": "user", "content": "hi"}]}],
     "already stored"),
    ([{"session_id": "d", "timestamp": "2023-01-01", "turns": [{"role": "user", "content": "hi"}]}] * 2,
     "duplicate"),
])
def test_bad_input_is_a_clear_error_and_changes_nothing(scripted_forest, bad, message):
    forest = scripted_forest()
    forest.ingest_sessions("u", make_sessions(1, 2))
    before = describe(forest.snapshot("u").state)
    with pytest.raises(InputError, match=message):
        forest.ingest_sessions("u", bad)
    assert describe(forest.snapshot("u").state) == before


def test_unsafe_user_id_is_rejected(scripted_forest, tmp_path):
    forest = scripted_forest()
    with pytest.raises(InputError, match="unsafe"):
        forest.ingest_sessions("../evil", make_sessions(1, 2))
    assert not (tmp_path / "evil").exists()


def test_model_failure_fails_atomically_or_degrades(scripted_forest):
    forest = scripted_forest()
    forest.ingest_sessions("u", make_sessions(2, 2))
    before = describe(forest.snapshot("u").state)

    def broken(request):
        return TransientModelError("server down") if request.stage == "summarize" else rule_responder(request)

    forest.scheduler.model.responder = broken
    forest.scheduler.backoff_s = 0.0
    with pytest.raises(ModelError):
        forest.ingest_sessions("u", make_sessions(3, 2)[2:])
    assert describe(forest.snapshot("u").state) == before
    forest.config.degraded_ok = True
    forest.ingest_sessions("u", make_sessions(3, 2)[2:])
    desc = describe(forest.snapshot("u").state)
    assert desc["counts"]["degraded_nodes"] > 0
    assert any(r.error and r.stage == "summarize" for r in forest.log.records)


def test_ingest_session_single_form_and_errors_are_memforest_errors(scripted_forest):
    forest = scripted_forest()
    report = forest.ingest_session("u", "one",
                                   [{"role": "user", "content": "I like tea.", "timestamp": "2023-01-01"}])
    assert report.sessions == 1 and report.version == 1
    with pytest.raises(MemForestError):
        forest.ingest_session("u", "two", [])


def test_cli_ingest_show_roundtrip(cli_store, tmp_path, capsys):
    from memforest.cli import main

    common = cli_store
    assert main(["show", *common, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["counts"]["sessions"] == 5 and shown["counts"]["facts"] > 0
    assert main(["ingest", *common, str(tmp_path / "missing.json")]) == 2
    assert "does not exist" in capsys.readouterr().err
