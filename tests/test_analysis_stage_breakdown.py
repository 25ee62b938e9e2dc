"""The stage breakdown's calls and tokens per stage, for simulated runs too: the logging proxy records every
call of a simulated run under stage `chat`, and the analysis splits each build's proxied calls by the
prompt kind the latency-model server recorded (served_calls.jsonl `kind`). Checked on a replay of the
real recorded served calls in tests/fixtures/replay/, on the paper results fixture, against the stage
the library itself records for each of its prompts, and on small cases of each rule."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pandas")
pytest.importorskip("matplotlib")

from analysis.artifacts import stage_breakdown  # noqa: E402
from analysis.load import Results, stage_rows  # noqa: E402
from analysis.rows import PROMPT_STAGES, build_spans, read_jsonl, served_by_build, split_proxied  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PAPER_FIXTURE = ROOT / "tests" / "fixtures" / "paper_results"
REPLAY = ROOT / "tests" / "fixtures" / "replay"
TOKEN_KEYS = ("prompt_tokens", "cached_prompt_tokens", "completion_tokens")


def shares(results: Results) -> tuple[Any, Any]:
    """The time and token shares of every build in `results` (frames)."""
    return stage_breakdown.time_shares(results.builds), stage_breakdown.token_shares(results.build_stages)


# ------------------------------------------------------------------ the prompt ids name the library's stages


def test_every_prompt_id_maps_to_the_stage_its_caller_records(scripted_forest: Any) -> None:
    from memforest.prompts import answer, browse, equivalence, extraction, planner, summary

    modules = (answer, browse, equivalence, extraction, planner, summary)
    assert set(PROMPT_STAGES) == {m.SPEC.id for m in modules}
    forest = scripted_forest(canon__min_cosine=0.5)  # near duplicates go through the equivalence prompt
    forest.ingest_sessions("u", [{"session_id": "a", "timestamp": "2023-01-01", "turns": [
        {"role": "user", "content": "I adopted a cat named Miso."},
        {"role": "user", "content": "I adopted a cat named Miso!"},
        {"role": "user", "content": "I adopted a cat named Tofu."}]}])
    forest.query("u", "What is my cat called?", date="2023-02-01", mode="planner")
    recorded = {(r.prompt_id, r.stage) for r in forest.log.records}
    assert {stage for _, stage in recorded} >= {"extract", "dedup", "summarize", "plan", "answer"}
    assert all(PROMPT_STAGES[prompt_id] == stage for prompt_id, stage in recorded), recorded


def test_the_recorded_client_log_agrees_with_the_prompt_stages() -> None:
    """The in-process scheduler's own records of a real simulated run (kept in the paper fixture)."""
    logs = list(PAPER_FIXTURE.rglob("llm_calls_client.jsonl"))
    records = [r for log in logs for r in read_jsonl(log)]
    assert records and all(PROMPT_STAGES[r["prompt_id"]] == r["stage"] for r in records)


# ------------------------------------------------------------------ a replayed simulated run, end to end


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """A simulated write-path run replaying the recorded served calls of MemForest with every tree family
    (real SmolLM2 answers, played back through the latency-model server and the logging proxy)."""
    from make_replay_fixture import overrides

    from benchmarks.harness import runner
    from benchmarks.harness.app import compose_config
    from benchmarks.harness.schema import bench_config

    log = REPLAY / "all_families.served_calls.jsonl"
    root = tmp_path_factory.mktemp("replayed")
    cfg = bench_config(compose_config([
        *overrides(root, "all_families"), "llm.latency_model.source=replay",
        "llm.latency_model.fallback=false", f"llm.latency_model.replay_path={log}"]))
    runner.run_benchmark(cfg)
    return root, read_jsonl(log)


@pytest.mark.slow
def test_a_replayed_simulated_build_is_split_by_served_kind(
        replayed: tuple[Path, list[dict[str, Any]]]) -> None:
    root, recorded = replayed
    results = Results.scan(root)
    proxied = results.calls
    assert set(proxied["stage"]) == {"chat"}  # the proxy names no stage: the split is the analysis's
    stages = results.build_stages.set_index("stage")
    assert set(stages["stages_from"]) == {"served kinds"}
    kinds = Counter(PROMPT_STAGES[r["kind"]] for r in recorded)
    assert kinds == {"extract": 4, "summarize": 8}
    assert stages["calls"].to_dict() == dict(kinds)
    for stage in kinds:
        mine = [r for r in recorded if PROMPT_STAGES[r["kind"]] == stage]
        assert stages.loc[stage, "completion_tokens"] == sum(r["completion_tokens"] for r in mine)
        assert stages.loc[stage, "prompt_tokens"] == sum(r["prompt_tokens"] for r in mine)
    build = results.builds.iloc[0]
    assert stages["calls"].sum() == build["llm_calls"]  # every proxied call is in exactly one stage
    for key in TOKEN_KEYS:
        assert stages[key].sum() == build[key]


@pytest.mark.slow
def test_the_stage_table_shows_token_shares_of_the_replayed_run(
        replayed: tuple[Path, list[dict[str, Any]]]) -> None:
    root, recorded = replayed
    times, tokens = shares(Results.scan(root))
    rows = stage_breakdown.table(times, tokens).frame
    assert list(rows["run"].unique()) == ["simulated"]
    assert "missing" not in set(rows["token share %"]) | set(rows["LLM calls / instance"])
    tokens_of = [(r["kind"], r["prompt_tokens"] + r["completion_tokens"]) for r in recorded]
    total, extract = sum(n for _, n in tokens_of), sum(n for kind, n in tokens_of if kind == "extract_facts")
    share = rows.set_index("stage")["token share %"]
    assert float(share["extract"]) == pytest.approx(100 * extract / total, abs=0.05)
    assert sum(float(v) for v in share) == pytest.approx(100, abs=0.2)  # nothing left unattributed


# ------------------------------------------------------------------ what the paper fixture holds


def test_the_fixture_run_without_served_calls_stays_missing_and_real_runs_keep_their_stages() -> None:
    """The paper fixture's simulated run was minimised (no served_calls.jsonl, no llm_calls.jsonl): its
    calls stay unattributed, never guessed; real runs keep the stages their call log recorded."""
    results = Results.scan(PAPER_FIXTURE)
    stages = results.build_stages
    simulated = stages[stages["simulated"].astype(bool)]
    assert len(simulated) and set(simulated["stage"]) == {"chat"}
    assert set(stages["stages_from"]) == {"call log"}
    mine = results.builds[results.builds["experiment"].isin(stage_breakdown.EXPERIMENTS)
                          & results.builds["method"].str.startswith("memforest")]
    runs = set(mine["run_id"])
    rows = stage_breakdown.table(stage_breakdown.time_shares(mine),
                                 stage_breakdown.token_shares(stages[stages["run_id"].isin(runs)])).frame
    assert set(rows.loc[rows["run"] == "simulated", "token share %"]) == {"missing"}
    assert "missing" not in set(rows.loc[rows["run"] == "real", "token share %"])


# ------------------------------------------------------------------ the rules, case by case


def served(kind: str, arrival: float, prompt: int = 10, completion: int = 5,
           error: str | None = None) -> dict[str, Any]:
    return {"kind": kind, "arrival": arrival, "prompt_tokens": prompt, "cached_tokens": 0,
            "completion_tokens": completion, "error": error}


def proxied(instance: str, start: float, end: float, phase: str = "build",
            stage: str = "chat") -> dict[str, Any]:
    return {"stage": stage, "start": start, "end": end, "tags": {"instance": instance, "phase": phase}}


def chat(calls: int, prompt: int, completion: int, failed: int = 0) -> dict[str, dict[str, Any]]:
    return {"chat": {"calls": calls, "failed": failed, "retries": 0, "prompt_tokens": prompt,
                     "cached_prompt_tokens": 0, "completion_tokens": completion, "call_seconds": 9.0,
                     "waves": 0}}


def arrivals(owned: Mapping[str, list[Mapping[str, Any]]]) -> dict[str, list[float]]:
    return {instance: [c["arrival"] for c in calls] for instance, calls in owned.items()}


def at(*times: float) -> list[dict[str, Any]]:
    return [served("extract_facts", t) for t in times]


def test_served_calls_belong_to_the_one_build_whose_span_they_arrived_in() -> None:
    spans = build_spans([proxied("a", 10, 20), proxied("a", 12, 25), proxied("b", 30, 40),
                         proxied("b", 24, 31, phase="answer"), proxied("c", 0, 99, stage="embed")])
    assert spans == {"a": (10, 25), "b": (30, 40)}
    assert arrivals(served_by_build(at(5, 11, 26, 35, 41), spans)) == {"a": [11], "b": [35]}
    overlapping = {"a": (10.0, 20.0), "b": (14.0, 30.0)}
    assert arrivals(served_by_build(at(5, 15, 25), overlapping)) == {"b": [25]}  # 15 lies in both
    nested = {"a": (10.0, 50.0), "b": (20.0, 30.0)}
    assert arrivals(served_by_build(at(25, 40, 60), nested)) == {"a": [40]}


def test_a_split_keeps_the_totals_and_leaves_the_unaccounted_calls_under_chat() -> None:
    calls = [served("extract_facts", 1, 100, 50), served("interval_summary", 2, 30, 20, error="HTTP 500"),
             served("json", 3, 7, 3)]
    split = split_proxied(chat(4, 140, 80, failed=1), calls)
    assert split is not None
    got = {s: (n["calls"], n["failed"], n["prompt_tokens"], n["completion_tokens"]) for s, n in split.items()}
    assert got == {"extract": (1, 0, 100, 50), "summarize": (1, 1, 30, 20), "chat": (2, 0, 10, 10)}
    assert "call_seconds" not in split["extract"]  # the served log ties no wall time to a proxied call


def test_no_split_when_the_served_calls_cannot_all_be_the_builds() -> None:
    assert split_proxied(chat(1, 100, 50), [served("extract_facts", 1), served("extract_facts", 2)]) is None
    assert split_proxied(chat(2, 5, 50), [served("extract_facts", 1, prompt=10)]) is None
    assert split_proxied(chat(1, 10, 5), [served("text", 1)]) is None  # no MemForest prompt: nothing named
    assert split_proxied({"extract": chat(1, 10, 5)["chat"]}, [served("extract_facts", 1)]) is None
    build = {"instance_id": "a", "llm": {"by_stage": chat(1, 100, 50)}}
    assert [(r["stage"], r["stages_from"]) for r in stage_rows(build)] == [("chat", "call log")]
    split_rows = stage_rows(build, [served("extract_facts", 1, 100, 50)])
    assert [(r["stage"], r["stages_from"]) for r in split_rows] == [("extract", "served kinds")]


def test_the_note_names_each_prompt_kind_and_its_paper_stage() -> None:
    note = stage_breakdown.prompt_stage_note()
    assert "extract_facts -> extract" in note and "interval_summary -> refresh + index" in note
    assert "fact_equivalence -> canonicalise + route" in note and "answer_from_memory" in note
