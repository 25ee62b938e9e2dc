import threading

import numpy as np
import pytest
from conftest import RESIDENCE, make_sessions

from memforest.describe import describe
from memforest.errors import InputError, StoreError


def _leaf_sets(state):
    out = {}
    for tid, info in state.trees.items():
        for nid in info.tree.nodes:
            out[(tid, nid)] = frozenset(leaf.item for leaf in info.tree.leaves_under(nid))
    return out


def _data(state):
    return {k: (d.text, d.embedding.copy()) for k, d in state.nodes.items()}


def test_delete_refreshes_exactly_the_invalidated_paths(scripted_forest):
    forest = scripted_forest()
    forest.ingest_sessions("u", make_sessions(14, 6))
    before = forest.snapshot("u").state
    sets_before, data_before = _leaf_sets(before), _data(before)
    removed_leaf_items = {f for f in before.facts
                          if {o.session_id for o in before.facts[f].occurrences} == {"s005"}}
    n = len(forest.log)
    report = forest.delete_session("u", "s005")
    after = forest.snapshot("u").state
    assert report["facts_removed"] == len(removed_leaf_items) > 0
    assert "session:s005" not in after.trees and "s005" not in after.sessions
    assert not any(f in after.facts for f in removed_leaf_items)
    sets_after, data_after = _leaf_sets(after), _data(after)
    invalidated = {k for k, items in sets_after.items() if sets_before.get(k) != items}
    internal = {k for k in invalidated if after.trees[k[0]].tree.nodes[k[1]].level > 0}
    summarize = [r for r in forest.log.records[n:] if r.stage == "summarize"]
    assert len(summarize) == len(internal) == report["refresh"]["summaries"]
    # the invalidated internal nodes are the surviving ancestors of removed leaves (plus any node a
    # rebalance moved leaves into); no other node's summary or embedding changed
    ancestors = set()
    for (tid, nid), items in sets_before.items():
        if (before.trees[tid].tree.nodes[nid].level > 0 and items & removed_leaf_items
                and (tid, nid) in sets_after):
            ancestors.add((tid, nid))
    assert ancestors <= internal
    for key, (text, vec) in data_after.items():
        if key not in invalidated:
            assert (key in data_before and data_before[key][0] == text
                    and np.array_equal(data_before[key][1], vec))
    assert forest.check("u")["ok"]


def _shape(state):
    facts = {f.id: (f.text, sorted((o.session_id, o.cell_id) for o in f.occurrences))
                 for f in state.facts.values()}
    trees = sorted((info.family if info.family == "scene" else tid,
                    tuple(leaf.item for leaf in info.tree.leaves()), info.tree.height)
                   for tid, info in state.trees.items())
    return facts, trees


def test_delete_then_reingest_equals_never_deleting(scripted_forest, tmp_path):
    sessions = make_sessions(8, 4) + RESIDENCE
    never = scripted_forest(path=tmp_path / "a")
    never.ingest_sessions("u", sessions[:6])
    never.ingest_sessions("u", sessions[6:])
    again = scripted_forest(path=tmp_path / "b")
    again.ingest_sessions("u", sessions[:6])
    again.ingest_sessions("u", sessions[6:])
    again.delete_session("u", "davis")
    again.ingest_sessions("u", [s for s in sessions if s["session_id"] == "davis"])
    assert _shape(again.snapshot("u").state) == _shape(never.snapshot("u").state)
    assert again.check("u")["ok"]


def test_correct_session_replaces_turns_atomically(scripted_forest):
    forest = scripted_forest()
    forest.ingest_sessions("bob", RESIDENCE)
    fixed = dict(RESIDENCE[2],
                 turns=[{"role": "user", "content": "I moved from Boston and now I live in Sacramento."}])
    forest.correct_session("bob", fixed)
    state = forest.snapshot("bob").state
    texts = " ".join(f.text for f in state.facts.values())
    assert "Sacramento" in texts and "live in Davis" not in texts
    assert len(state.sessions["davis"].turns) == 1
    assert forest.check("bob")["ok"]
    with pytest.raises(InputError, match="no session"):
        forest.correct_session("bob", dict(fixed, session_id="nope"))
    with pytest.raises(StoreError):
        forest.delete_session("ghost", "davis")


@pytest.mark.parametrize("n", [2, 3, 4])
def test_merge_matches_sequential_write(scripted_forest, tmp_path, n):
    merged = scripted_forest(path=tmp_path / "m")
    sequential = scripted_forest(path=tmp_path / "s")
    for i in range(n):
        sessions = [dict(s, session_id=f"u{i}-{s['session_id']}") for s in make_sessions(6, 4, start_day=i)]
        merged.ingest_sessions(f"user{i}", sessions)
        sequential.ingest_sessions("all", sessions)
    calls = len(merged.log)
    report = merged.merge([f"user{i}" for i in range(n)], "all")
    m, s = merged.snapshot("all").state, sequential.snapshot("all").state
    assert abs(len(m.facts) - len(s.facts)) <= 0.01 * len(s.facts)
    assert abs(len(m.trees) - len(s.trees)) <= 0.10 * len(s.trees)
    assert not [r for r in merged.log.records[calls:] if r.stage == "extract"]  # no re-extraction
    assert report["refresh"]["summaries"] < sum(r.stage == "summarize" for r in sequential.log.records)
    assert merged.check("all")["ok"]
    with pytest.raises(InputError, match="both"):
        merged.merge(["user0"], "all")


def test_degraded_mode_is_recorded_and_refreshable(scripted_forest):
    from memforest.llm.base import TransientModelError
    from memforest.llm.testing import rule_responder

    forest = scripted_forest(concurrency=2)
    forest.config.degraded_ok = True
    forest.scheduler.backoff_s = 0.0
    model = forest.scheduler.model
    model.responder = lambda r: TransientModelError("down") if r.stage in ("extract", "summarize") and \
        "session 1 " in r.messages[-1]["content"] else rule_responder(r)
    report = forest.ingest_sessions("u", make_sessions(3, 4))
    assert report.failed_cells
    state = forest.snapshot("u").state
    assert state.pending_cells == set(report.failed_cells)
    model.responder = rule_responder
    fixed = forest.refresh("u")
    assert fixed.cells == len(report.failed_cells) and fixed.new_facts > 0
    state = forest.snapshot("u").state
    assert not state.pending_cells
    assert describe(state)["counts"]["degraded_nodes"] == 0
    assert forest.check("u")["ok"]


def test_writers_to_one_user_are_serialised(scripted_forest):
    forest = scripted_forest()
    forest.scheduler.model.latency_s = 0.01
    errors = []

    def write(i):
        try:
            forest.ingest_sessions("u",
                                   [dict(s, session_id=f"t{i}-{j}")
                                    for j, s in enumerate(make_sessions(2, 2))])
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    state = forest.snapshot("u").state
    assert state.version == 4 and len(state.sessions) == 8
    assert forest.check("u")["ok"]


def test_index_is_derived_from_the_store(scripted_forest, tmp_path):
    forest = scripted_forest(path=tmp_path / "st")
    forest.ingest_sessions("u", make_sessions(3, 4))
    report = forest.check("u")
    assert report["ok"] and report["index_rebuilt"] is False  # the resident index, row for row
    fresh = scripted_forest(path=tmp_path / "st")
    assert fresh.query("u", "topic about Boston", answer=False).evidence


def test_a_scene_that_loses_members_keeps_their_sum_size_and_a_last_time_at_or_past_theirs(
        scripted_forest):
    forest = scripted_forest()
    forest.ingest_sessions("u", make_sessions(14, 6))
    before = {sid: s.size for sid, s in forest.snapshot("u").state.scenes.items()}
    for sid in ("s005", "s009"):
        forest.delete_session("u", sid)
    state = forest.snapshot("u").state
    assert any(s.size < before.get(sid, 0) for sid, s in state.scenes.items())  # some lost, some stayed
    for scene in state.scenes.values():
        members = [item for item, _ in state.trees[scene.tree_id].tree.items()]
        assert scene.size == len(members) > 0
        assert np.allclose(scene.total, state.fact_vecs.stack(members).sum(axis=0), atol=1e-5)
        assert scene.t_last >= max(state.fact_times(members))
    assert forest.check("u")["ok"]
