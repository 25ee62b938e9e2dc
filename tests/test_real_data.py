"""The loaders and a retrieval run on the real LongMemEval files in `../shared/data/` (skipped where the
files are absent). The counts are those of these fixed files; what the files hold is kept or dropped with
a count, never refused."""

from __future__ import annotations

import json
import lzma
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from benchmarks.datasets import Dataset, load_dataset
from benchmarks.harness import runner
from benchmarks.harness.app import compose_config
from benchmarks.harness.results import read_jsonl
from benchmarks.harness.schema import bench_config

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
SLICE = DATA / "longmemeval_s_slice.json.xz"
ORACLE = DATA / "longmemeval_oracle.json.xz"
FAKE_MODELS = ["embedder.backend=hash", "embedder.dim=64"]


def needs(path: Path) -> None:
    if not path.is_file():
        pytest.skip(f"{path} is not here")


@pytest.fixture(scope="module")
def s_slice() -> Dataset:
    needs(SLICE)
    return load_dataset("longmemeval_s", path=SLICE)


@pytest.fixture(scope="module")
def oracle() -> Dataset:
    needs(ORACLE)
    return load_dataset("longmemeval_oracle", path=ORACLE)


def assert_evidence_resolves(dataset: Dataset) -> None:
    """Every gold turn is a turn the systems receive, and every gold session a source session."""
    for instance in dataset.instances:
        turns = {t.turn_id for s in instance.sessions for t in s.turns}
        sources = {instance.source_session(s.session_id) for s in instance.sessions}
        for question in instance.questions:
            assert set(question.evidence_turns) <= turns
            assert set(question.evidence_sessions) <= sources, question.question_id


def test_every_instance_of_the_s_slice_loads(s_slice: Dataset) -> None:
    assert s_slice.failures == ()
    assert len(s_slice.instances) == s_slice.num_questions == 100
    counts = s_slice.counts
    assert counts.sessions_renamed == 1 and counts.duplicate_sessions_dropped == 0
    assert counts.unreadable_turns_dropped == 10 and counts.instances_with_unreadable_turns == 10
    assert counts.empty_sessions_dropped == 0
    sessions = [s for i in s_slice.instances for s in i.sessions]
    assert len(sessions) == 4806 and sum(i.num_turns for i in s_slice.instances) == 49882
    assert max(len(s.turns) for s in sessions) == 132
    assert max(len(t.content) for s in sessions for t in s.turns) == 37208
    assert Counter(q.answer_type for _, q in s_slice.questions()) == {"str": 91, "int": 9}
    assert_evidence_resolves(s_slice)


def test_a_repeated_session_of_the_s_slice_keeps_both_dates(s_slice: Dataset) -> None:
    (instance,) = [i for i in s_slice.instances if i.session_aliases]
    ((derived, source),) = instance.session_aliases.items()
    assert derived == f"{source}#2"
    by_id = {s.session_id: s for s in instance.sessions}
    assert by_id[derived].timestamp != by_id[source].timestamp
    assert [t.content for t in by_id[derived].turns] == [t.content for t in by_id[source].turns]


def test_the_oracle_file_loads_all_500(oracle: Dataset) -> None:
    assert oracle.failures == () and len(oracle.instances) == 500
    assert Counter(q.answer_type for _, q in oracle.questions()) == {"str": 468, "int": 32}
    assert oracle.counts.sessions_renamed == oracle.counts.unreadable_turns_dropped == 0
    assert_evidence_resolves(oracle)


def quirky_entries() -> list[dict[str, Any]]:
    """The slice's first entry with a repeated session and its first with a turn of nothing readable."""
    with lzma.open(SLICE, "rt", encoding="utf-8") as handle:
        entries = json.load(handle)
    ids = [e["haystack_session_ids"] for e in entries]
    repeated = next(e for e, sids in zip(entries, ids, strict=True) if len(set(sids)) < len(sids))
    blank = next(e for e in entries if any(not t["content"].strip("\u200b \n") for s in e["haystack_sessions"]
                                           for t in s))
    return [repeated, blank]


def retrieval_run(tmp_path: Path, *overrides: str) -> tuple[Path, dict[str, Any]]:
    cfg = bench_config(compose_config(["experiment=retrieval", *FAKE_MODELS, f"output_root={tmp_path}",
                                       "progress=false", *overrides]))
    summary = runner.run_benchmark(cfg)
    return Path(cfg.run_dir), summary


def test_a_retrieval_run_builds_oracle_instances(tmp_path: Path) -> None:
    needs(ORACLE)
    out, summary = retrieval_run(tmp_path, "dataset=longmemeval_oracle", f"dataset.path={ORACLE}",
                                 "dataset.limit=3")
    builds = read_jsonl(out / "builds.jsonl")
    assert len(builds) == 3 and not any(b["error"] for b in builds)
    assert summary["failures"] == [] and summary["build"]["failed"] == 0
    assert summary["retrieval"]["session"]["questions"] == 3


def test_a_retrieval_run_builds_the_real_quirks(tmp_path: Path) -> None:
    needs(SLICE)
    path = tmp_path / "quirks.json"
    path.write_text(json.dumps(quirky_entries()))
    out, summary = retrieval_run(tmp_path, "dataset=longmemeval_s", f"dataset.path={path}")
    builds = read_jsonl(out / "builds.jsonl")
    assert len(builds) == 2 and not any(b["error"] for b in builds) and summary["failures"] == []
    dataset = json.loads((out / "run.json").read_text())["dataset"]
    assert dataset["sessions_renamed"] == 1 and dataset["unreadable_turns_dropped"] >= 1
    records = read_jsonl(out / "records.jsonl")
    aliased = [r for r in records if r.get("session_aliases")]
    assert len(aliased) == 1 and not any("#" in s for s in aliased[0]["retrieved_session_ids"])
