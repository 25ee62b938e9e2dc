"""Recall@k scored LongMemEval's way: a system's ranking read as its first k distinct sessions, going on
past the served evidence where the system can rank further; the served evidence keeps its own recall."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from analysis.records import pick
from baselines.base import RANKING_SESSIONS, EvidenceItem, Retrieval, Session, Turn, ranked_past
from baselines.flat_rag import FlatRAGSystem
from baselines.flat_sessions import FlatSessionsSystem
from baselines.memforest_method import MemForestSystem
from benchmarks.datasets.records import Instance
from benchmarks.harness.evidence import retrieval_fields
from benchmarks.harness.summary import Retrieval as RecallBlock
from benchmarks.harness.summary_markdown import _served_recall_rows
from memforest.config import MemForestConfig, TreeConfig
from memforest.llm.calllog import CallLog
from memforest.llm.testing import HashEmbedder


def sessions(n: int = 14) -> list[Session]:
    out = []
    for i in range(n):
        when = datetime(2024, 5, 1 + i, 10)
        turns = tuple(Turn(role, f"{role} note {j} about the tomato harvest of plot {i}", when, f"p{i}:{j}")
                      for j, role in enumerate(["user", "assistant"] * 3))
        out.append(Session(f"p{i}", when, turns))
    return out


def test_ranked_past_goes_on_until_the_sessions_are_named() -> None:
    session_of = ["a", "a", "b", "a", "c", "c", "d"]
    assert ranked_past([0, 1, 2, 3, 4, 5, 6], session_of, served=2, sessions=3) == [2, 3, 4]
    assert ranked_past([0, 1, 2, 3, 4, 5, 6], session_of, served=3, sessions=2) == []
    assert ranked_past([0, 1, 2, 3, 4, 5, 6], session_of, served=1, sessions=9) == [1, 2, 3, 4, 5, 6]


def _named(retrieval: Retrieval) -> set[str]:
    return {s for e in [*retrieval.evidence, *retrieval.beyond] for s in e.session_ids}


def test_flat_anchors_rank_past_their_budget(tmp_path: Path) -> None:
    for system in (FlatRAGSystem(HashEmbedder(), top_k=4), FlatSessionsSystem(HashEmbedder(), top_k=4)):
        system.reset("i", tmp_path / system.name)
        system.ingest(sessions())
        retrieval = system.retrieve("the tomato harvest of plot 3?", None)
        assert len(retrieval.evidence) == 4 and retrieval.beyond
        assert len(_named(retrieval)) == RANKING_SESSIONS
        scores = [e.score or 0.0 for e in [*retrieval.evidence, *retrieval.beyond]]
        assert scores == sorted(scores, reverse=True)
        system.close()


def test_memforest_ranks_past_its_evidence_budget(tmp_path: Path) -> None:
    config = MemForestConfig(tree=TreeConfig(summary_mode="extractive"))
    system = MemForestSystem(config, None, HashEmbedder(), CallLog(), generate=False)
    system.reset("i", tmp_path)
    system.ingest(sessions())
    retrieval = system.retrieve("the tomato harvest of plot 3?", None)
    assert len(retrieval.evidence) == config.query.final_units
    served_sessions = {s for e in retrieval.evidence for s in e.session_ids}
    assert len(_named(retrieval)) == RANKING_SESSIONS > len(served_sessions)
    assert all(e.turn_ids and e.session_ids for e in retrieval.beyond)
    system.close()


def test_record_fields_keep_the_served_ids_and_the_ranking_apart() -> None:
    served = [EvidenceItem("a", session_ids=["s1#2"], turn_ids=["s1#2:0"], score=0.9),
              EvidenceItem("b", session_ids=["s2"], turn_ids=["s2:1"], score=0.8)]
    beyond = [EvidenceItem("c", session_ids=["s2"], turn_ids=["s2:3"], score=0.5),
              EvidenceItem("d", session_ids=["s3"], turn_ids=["s3:0"], score=0.4)]
    instance = Instance("i", "u", (), (), session_aliases={"s1#2": "s1"})
    fields = retrieval_fields(Retrieval("ctx", served, beyond=beyond), instance)
    assert fields["retrieved_session_ids"] == ["s1", "s2"]
    assert fields["ranking_session_ids"] == ["s1", "s2", "s3"]
    assert fields["ranking_session_ids_raw"] == ["s1#2", "s2", "s3"]
    assert fields["ranking_turn_ids"] == ["s1:0", "s2:1", "s2:3", "s3:0"]
    assert [r["session_ids"] for r in fields["retrieved"]] == [["s1#2"], ["s2"]]  # what was served
    plain = retrieval_fields(Retrieval("ctx", served), instance)
    assert "ranking_session_ids" not in plain and "ranking_turn_ids" not in plain


def test_the_summary_shows_the_served_recall_where_the_ranking_went_past_it() -> None:
    ranking = {"session": {"recall_any@1": 0.5, "recall_any@5": 1.0, "recall_any@10": 1.0},
               "turn": {"recall_any@10": 1.0, "recall_all@10": 0.5}}
    served = {"session": {"recall_any@1": 0.5, "recall_any@5": 0.5, "recall_any@10": 0.5},
              "turn": {"recall_any@10": 1.0, "recall_all@10": 0.5}}
    rows = _served_recall_rows(pick(RecallBlock, ranking), pick(RecallBlock, served))
    assert rows[0][0].startswith("session recall_any@1 / @5 / @10, served") and "50.0%" in rows[0][1]
    assert _served_recall_rows(pick(RecallBlock, ranking), pick(RecallBlock, ranking)) == []
    assert _served_recall_rows(pick(RecallBlock, ranking), RecallBlock()) == []
