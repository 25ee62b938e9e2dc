import json
import threading
import time

import pytest
from conftest import RESIDENCE, make_sessions

from memforest.errors import InputError, StoreError

QUESTION = "Where did I live before moving to Miami?"


def _davis_facts(forest):
    return {f.id for f in forest.snapshot("bob").state.facts.values() if "live in Davis" in f.text}


@pytest.mark.parametrize("mode", ["embed", "planner"])
def test_before_miami_follows_the_temporal_path(scripted_forest, mode):
    forest = scripted_forest()
    forest.ingest_sessions("bob", RESIDENCE)
    result = forest.query("bob", QUESTION, date="2024-08-01", mode=mode)
    trace = result.trace
    recalled = [r["tree_id"] for r in trace["recalled"]]
    assert "entity:user" in recalled
    davis = _davis_facts(forest)
    temporal = [e for e in result.evidence if e.via == "temporal:before"]
    assert any(e.id in davis for e in temporal), [(e.via, e.text) for e in result.evidence]
    state = forest.snapshot("bob").state
    hops = [t for t in trace["temporal"] if state.trees[t["tree_id"]].tree.nodes[t["to_leaf"]].item in davis]
    assert hops and hops[0]["direction"] == "before"
    hop = hops[0]
    tree = state.trees[hop["tree_id"]].tree
    source = state.facts[tree.nodes[hop["from_leaf"]].item]
    assert "Miami" in source.text  # the matched transition
    assert tree.nodes[hop["to_leaf"]].key_lo < tree.nodes[hop["from_leaf"]].key_lo
    assert 0 < len(result.evidence) <= 10
    assert result.answer
    assert set(trace["latency"]) >= {"embed", "recall", "browse", "assemble", "answer"}
    if mode == "planner":
        assert trace["plan"]["direction"] == "before"
        assert trace["llm_calls"]["by_stage"]["plan"]["calls"] == 1
        first_depth = trace["browse"][0]
        assert first_depth["calls"] == len(trace["plan"]["queries"])
        assert len({r.wave for r in forest.log.records if r.stage == "browse" and r.level == 1}) >= 1
    else:
        assert "plan" not in trace and trace["llm_calls"]["by_stage"].keys() == {"answer"}
        assert all(step["kept"] for step in trace["browse"])


def test_evidence_budget_and_rendering(scripted_forest):
    forest = scripted_forest()
    forest.ingest_sessions("u", make_sessions(10, 6))
    result = forest.query("u", "What did I mention about Denver?", answer=False)
    assert result.answer is None
    assert len(result.evidence) == 10
    assert [e.time for e in result.evidence] == sorted(e.time for e in result.evidence)
    assert len({(e.kind, e.id) for e in result.evidence}) == 10


@pytest.mark.parametrize("mode", ["embed", "planner"])
def test_complete_expansion_returns_whole_units(scripted_forest, mode):
    forest = scripted_forest(query__complete_expansion=True, query__final_units=3)
    forest.ingest_sessions("u", make_sessions(6, 6))
    result = forest.query("u", "topic about Miami", answer=False, mode=mode)
    state = forest.snapshot("u").state
    assert result.trace["expanded"]
    units = result.trace["units"]
    assert 0 < len(units) <= 3 and any(level == 1 for _, _, level in units)
    got = {e.id for e in result.evidence}
    wanted = set()
    for tid, nid, _ in units:
        wanted |= {leaf.item for leaf in state.trees[tid].tree.leaves_under(nid)}
    assert got == wanted


def test_aggregate_plans_expand_whole_units(scripted_forest):
    forest = scripted_forest()
    forest.ingest_sessions("u", make_sessions(6, 6))
    result = forest.query("u", "How many topics did I mention in total?", mode="planner", answer=False)
    assert result.trace["plan"]["kind"] == "aggregate" and result.trace["expanded"]
    assert len(result.evidence) > forest.config.query.final_units
    lookup = forest.query("u", "What did I say about Denver?", mode="planner", answer=False)
    assert not lookup.trace["expanded"] and len(lookup.evidence) <= 10


def test_query_errors_are_clear(scripted_forest):
    forest = scripted_forest()
    with pytest.raises(StoreError, match="no memory for user"):
        forest.query("nobody", "anything")
    forest.ingest_sessions("u", make_sessions(1, 2))
    with pytest.raises(InputError, match="empty"):
        forest.query("u", "   ")
    with pytest.raises(InputError, match="mode"):
        forest.query("u", "x", mode="magic")


def test_queries_do_not_wait_for_an_ingest(scripted_forest):
    forest = scripted_forest(concurrency=2)
    forest.ingest_sessions("a", make_sessions(2, 2))
    forest.ingest_sessions("b", make_sessions(2, 2))
    version_a = forest.snapshot("a").version
    forest.scheduler.model.latency_s = 0.2
    writers = [threading.Thread(target=forest.ingest_sessions, args=(u, make_sessions(6, 4)[2:]))
               for u in "ab"]
    for w in writers:
        w.start()
    time.sleep(0.1)
    started = time.perf_counter()
    for user in "ab":
        result = forest.query(user, "topic about Boston", answer=False)
        assert result.trace["version"] == 1 or user == "b"
    elapsed = time.perf_counter() - started
    for w in writers:
        w.join()
    assert elapsed < 0.5, elapsed  # an ingest takes > 2 s at this latency
    assert forest.snapshot("a").version == version_a + 1


def test_cli_ask_json(cli_store, capsys):
    from memforest.cli import main

    common = cli_store
    assert main(["ask", *common, "--json", "--mode", "planner", QUESTION]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["answer"] and 0 < len(out["evidence"]) <= 10
    assert {"recalled", "browse", "temporal", "latency", "llm_calls", "plan"} <= set(out["trace"])
    assert main(["ask", *common, "--user", "ghost", "x"]) == 2
    assert "no memory" in capsys.readouterr().err


def test_recall_of_a_fact_said_in_many_sessions_matches_the_untruncated_recall(scripted_forest):
    """Recall reads only the first session trees of a fact said in many sessions; the trees it
    recalls are exactly those of ranking every session tree the fact was said in."""
    from memforest.retrieval.recall import recall_trees
    from memforest.retrieval.results import RecalledTree

    said = "I keep my old bicycle in the hallway near the front door."
    sessions = [{"session_id": f"r{i:02d}", "timestamp": f"2023-03-{i + 1:02d}T10:00",
                 "turns": [{"role": "user",
                            "content": said if i % 3 else f"My cousin {i} visited the lake house."},
                           {"role": "assistant", "content": f"Noted, entry {i}."}]} for i in range(24)]
    forest = scripted_forest(query__top_trees=3)
    forest.ingest_sessions("u", sessions)
    snap = forest.snapshot("u")
    cfg = forest.config.query
    assert max(len(f.occurrences) for f in snap.state.facts.values()) >= 16
    for question in (said, "Where is the bicycle?", "Who visited the lake house?", "entry 7"):
        qvec = forest.embedder.embed([question], "query")[0]
        idx = snap.index
        root_sim = dict(zip((idx.root_tree[u] for u in idx.roots.search(qvec, cfg.top_trees)[0].tolist()),
                            idx.roots.search(qvec, cfg.top_trees)[1].tolist()))
        fact_sim: dict[str, float] = {}
        ids, scores = idx.facts.search(qvec, cfg.fact_recall)
        for fid, s in zip(ids.tolist(), scores.tolist()):
            for tid in snap.fact_trees(fid):  # every tree, no limit
                fact_sim[tid] = max(fact_sim.get(tid, -1.0), s)
        want = sorted((RecalledTree(t, snap.state.trees[t].family,
                                    cfg.root_weight * root_sim.get(t, 0.0)
                                    + cfg.fact_weight * fact_sim.get(t, 0.0), root_sim.get(t),
                                    fact_sim.get(t))
                       for t in set(root_sim) | set(fact_sim) if t in snap.state.trees),
                      key=lambda r: (-r.score, r.tree_id))[: cfg.top_trees]
        assert recall_trees(snap, qvec, cfg) == want
