"""The benchmark harness end to end on the sample dataset, with the scripted model and hash embedder."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from baselines.base import SystemUnavailable
from benchmarks.harness import runner, systems
from benchmarks.harness.app import compose_config, main
from benchmarks.harness.results import RunFiles, read_jsonl
from benchmarks.harness.schema import BenchConfig, WandbNode, bench_config, plain_config

FAKE_MODELS = ["llm.backend=scripted", "llm.responder=responders:harness_responder", "embedder.backend=hash",
               "embedder.dim=256"]
FIXTURES = Path(__file__).parent / "fixtures"


def config(tmp_path: Path, *overrides: str) -> BenchConfig:
    return bench_config(compose_config([*FAKE_MODELS, f"output_root={tmp_path}", "progress=false",
                                        *overrides]))


def run_dir_of(cfg: BenchConfig) -> Path:
    return Path(cfg.run_dir)


def answer_calls(path: Path) -> list[dict[str, Any]]:
    return [row for row in read_jsonl(path) if row["stage"] == "answer"]


# ---------------------------------------------------------------- runs


def test_full_run_on_the_sample_writes_every_file(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    summary = runner.run_benchmark(cfg)
    out = run_dir_of(cfg)
    assert out == tmp_path / "default/sample/memforest_embed/smollm2_cpu/seed0"
    run = json.loads((out / "run.json").read_text())
    assert run["schema_version"] == 1 and len(run["dataset"]["sha256"]) == 64
    assert run["config"]["llm"]["backend"] == "scripted" and "numpy" in run["packages"]
    records, verdicts, builds = (read_jsonl(out / f)
                                 for f in ("records.jsonl", "judgments.jsonl", "builds.jsonl"))
    assert len(records) == 6 and len(verdicts) == 6 and len(builds) == 6
    assert all(r["response"] and r["retrieved_session_ids"] for r in records)
    assert all(b["llm"]["calls"] > 0 and b["turns_per_second"] > 0 for b in builds)
    calls = read_jsonl(out / "llm_calls.jsonl")
    assert {c["tags"]["phase"] for c in calls} == {"build", "answer", "judge"}
    assert all(c["tags"]["instance"] for c in calls)
    correct = sum(v["correct"] for v in verdicts)
    judge = summary["judges"]["longmemeval (scripted)"]
    assert judge["accuracy"] == pytest.approx(correct / 6)
    text = (out / "summary.md").read_text()
    assert "session recall_any@5" in text and "build seconds / instance" in text


def test_interrupted_run_resumes_without_redoing_finished_pairs(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = config(tmp_path, "attempts=2")
    original = RunFiles.add_record
    written: list[int] = []

    def add_record(self: RunFiles, row: dict[str, Any]) -> None:
        if len(written) == 5:
            raise KeyboardInterrupt  # the job is killed while writing the sixth record
        written.append(1)
        original(self, row)

    monkeypatch.setattr(RunFiles, "add_record", add_record)
    with pytest.raises(KeyboardInterrupt):
        runner.run_benchmark(cfg)
    out = run_dir_of(cfg)
    before = len(answer_calls(out / "llm_calls.jsonl"))
    assert len(read_jsonl(out / "records.jsonl")) == 5 and len(read_jsonl(out / "builds.jsonl")) == 3
    monkeypatch.setattr(RunFiles, "add_record", original)
    runner.run_benchmark(cfg)
    records = read_jsonl(out / "records.jsonl")
    pairs = [(r["question_id"], r["attempt"]) for r in records]
    assert len(pairs) == len(set(pairs)) == 12
    assert len(answer_calls(out / "llm_calls.jsonl")) - before == 12 - 5
    builds = read_jsonl(out / "builds.jsonl")
    assert len(builds) == 6  # the third instance's completed store was reopened, not rebuilt
    assert {r["build_id"] for r in records} == {b["build_id"] for b in builds}
    by_question: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by_question.setdefault(r["question_id"], []).append(r)
    for first, second in by_question.values():  # the reopened store retrieves exactly what the fresh one did
        assert first["retrieved_turn_ids"] == second["retrieved_turn_ids"]
        assert first["retrieved_session_ids"] == second["retrieved_session_ids"]
    assert len(read_jsonl(out / "judgments.jsonl")) == 12


def test_incomplete_store_is_rebuilt_from_scratch(tmp_path: Path) -> None:
    cfg = config(tmp_path, "dataset.limit=1", "answer.enabled=false")
    runner.run_benchmark(cfg)
    out = run_dir_of(cfg)
    files = RunFiles(out)
    iid = next(iter(files.builds()))
    (files.store_dir(iid) / "COMPLETE").unlink()
    (out / "records.jsonl").unlink()
    runner.run_benchmark(cfg)
    assert len(read_jsonl(out / "builds.jsonl")) == 2
    assert (files.store_dir(iid) / "COMPLETE").read_text() == read_jsonl(out / "builds.jsonl")[-1]["build_id"]


def test_rejudging_writes_new_verdicts_without_touching_memory(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = config(tmp_path)
    runner.run_benchmark(cfg)
    out = run_dir_of(cfg)
    records_before = (out / "records.jsonl").read_bytes()
    stores_before = sorted((p, p.stat().st_mtime_ns) for p in (out / "stores").rglob("*"))

    def no_memory(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("re-judging must not build a memory system")

    monkeypatch.setattr(systems, "build_system", no_memory)
    monkeypatch.setattr(runner, "build_system", no_memory)
    monkeypatch.setattr(sys, "argv", ["memforest-bench", "judge", str(out), "judge=strict"])
    with pytest.raises(SystemExit) as stop:
        main()
    assert stop.value.code == 0
    verdicts = read_jsonl(out / "judgments.strict.scripted.jsonl")
    assert len(verdicts) == 6 and {v["judge_id"] for v in verdicts} == {"strict"}
    assert {v["prompt_id"] for v in verdicts} <= {"judge.strict", "judge.abstention"}
    assert (out / "records.jsonl").read_bytes() == records_before
    assert sorted((p, p.stat().st_mtime_ns) for p in (out / "stores").rglob("*")) == stores_before
    assert "strict (scripted)" in (out / "summary.md").read_text()


def test_generator_free_method_runs_without_a_chat_model(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    def no_chat_model(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("no chat model may be built")

    monkeypatch.setattr("benchmarks.harness.models.build_chat_model", no_chat_model)
    monkeypatch.setattr("memforest.api.build_chat_model", no_chat_model)
    cfg = config(tmp_path, "method=memforest_sessions", "answer.enabled=false", "judge.enabled=false")
    summary = runner.run_benchmark(cfg)
    out = run_dir_of(cfg)
    records = read_jsonl(out / "records.jsonl")
    assert len(records) == 6 and not any("response" in r for r in records)
    assert not (out / "llm_calls.jsonl").read_text().strip()
    assert all(b["llm"]["calls"] == 0 and b["system"]["new_facts"] == 0
               for b in read_jsonl(out / "builds.jsonl"))
    assert summary["retrieval"]["session"]["questions"] == 5  # the abstention question has no gold
    assert summary["judges"] == {}


def test_locomo_runs_report_evidence_recall(tmp_path: Path) -> None:
    cfg = config(tmp_path, "dataset=locomo", f"dataset.path={FIXTURES / 'locomo_tiny.json'}", "attempts=2")
    summary = runner.run_benchmark(cfg)
    assert "evidence recall@5 (dia ids)" in summary["markdown"]
    judge = next(iter(summary["judges"].values()))
    assert set(judge["pass_at_k"]) == {"1", "2"}
    verdicts = read_jsonl(run_dir_of(cfg) / "judgments.jsonl")
    assert {v["judge_id"] for v in verdicts} == {"locomo-generous"}


def test_hydra_app_runs_the_quick_experiment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["memforest-bench", "experiment=quick", *FAKE_MODELS, "progress=false"])
    main()
    out = tmp_path / "results/quick/sample/memforest_embed/smollm2_cpu/seed0"
    assert len(read_jsonl(out / "records.jsonl")) == 2
    assert (tmp_path / "results/hydra").is_dir()


def test_a_sweep_ends_with_one_table_of_its_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["memforest-bench", "-m", "method=memforest_embed,flat_rag,full_context",
                                      *FAKE_MODELS, "progress=false", "dataset.limit=2"])
    main()
    sweeps = list((tmp_path / "results/hydra/multirun").glob("*/*/comparison.md"))
    assert len(sweeps) == 1
    table = sweeps[0].read_text()
    assert table in capsys.readouterr().out
    rows = [line.split(" | ") for line in table.splitlines() if line.startswith("| memforest") or
            line.startswith("| flat_rag") or line.startswith("| full_context")]
    assert [r[0].strip("| ") for r in rows] == ["memforest_embed", "flat_rag", "full_context"]
    assert all(r[3] == "2" for r in rows)  # questions
    assert all(r[4].endswith("(100.0%)") for r in rows)  # input kept: every turn reached each system
    head = next(line for line in table.splitlines() if line.startswith("| method")).split(" | ")
    recall, calls = head.index("recall@5"), head.index("write LLM calls / inst")
    # full_context has no ranked evidence
    assert rows[0][recall] != "–" and rows[1][recall] != "–" and rows[2][recall] == "–"
    # write LLM calls: memforest extracts, flat_rag not
    assert float(rows[0][calls]) > 0 and float(rows[1][calls]) == 0
    assert rows[0][head.index("Δ accuracy")] == "reference"  # memforest_embed is the reference
    from benchmarks.harness.report import comparison_markdown

    run_dirs = [Path(m.read_text().strip()) for m in sorted(sweeps[0].parent.glob("*/run_dir.txt"))]
    assert comparison_markdown(run_dirs) == table  # `memforest-bench compare` recomputes it from the files


def test_an_unavailable_system_is_reported_as_skipped(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    def unavailable(*args: Any, **kwargs: Any) -> None:
        raise SystemUnavailable("memforest_embed: not installed here")

    monkeypatch.setattr(runner, "build_system", unavailable)
    cfg = config(tmp_path, "dataset.limit=1")
    assert runner.run_benchmark(cfg)["skipped"] == "memforest_embed: not installed here"
    assert "skipped" in (run_dir_of(cfg) / "summary.md").read_text()
    from benchmarks.harness.report import comparison_markdown

    assert "skipped: memforest_embed: not installed here" in comparison_markdown([run_dir_of(cfg)])


def test_a_run_directory_refuses_another_configuration(tmp_path: Path) -> None:
    runner.run_benchmark(config(tmp_path, "dataset.limit=1", "answer.enabled=false"))
    with pytest.raises(RuntimeError, match="another configuration"):
        runner.run_benchmark(config(tmp_path, "dataset.limit=1", "answer.enabled=false", "embedder.dim=128"))


def test_wandb_stays_optional(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks.harness.wandb_logger import WandbLogger

    monkeypatch.setitem(sys.modules, "wandb", None)  # as if not installed: `import wandb` fails
    WandbLogger(WandbNode(enabled=False), tmp_path, {}).log_summary({"accuracy": 1.0})  # never imported
    with pytest.raises(RuntimeError, match="memforest\\[wandb\\]"):
        WandbLogger(WandbNode(enabled=True), tmp_path, {})


def test_wandb_mirrors_builds_questions_and_the_summary(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Against a stand-in module with wandb's call shapes: init(...), run.log(dict), run.summary[k] = v,
    run.finish()."""
    from benchmarks.harness.wandb_logger import WandbLogger

    class Run:
        def __init__(self, **kwargs: Any) -> None:
            self.init = kwargs
            self.logged: list[dict[str, Any]] = []
            self.summary: dict[str, Any] = {}
            self.finished = False

        def log(self, data: dict[str, Any]) -> None:
            self.logged.append(data)

        def finish(self) -> None:
            self.finished = True

    runs: list[Run] = []

    def init(**kwargs: Any) -> Run:
        runs.append(Run(**kwargs))
        return runs[-1]

    module = type(sys)("wandb")
    module.init = init  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "wandb", module)
    logger = WandbLogger(WandbNode(enabled=True, project="p", tags=["t"]), tmp_path / "a/b/c/d/e",
                         {"seed": 1})
    logger.log_build({"build_seconds": 2.0, "llm": {"calls": 3}})
    logger.log_records([{"latency": {"retrieve": 0.5}}])
    logger.log_summary({"accuracy": 0.5, "markdown": "ignored"})
    logger.finish()
    [run] = runs
    assert run.init["project"] == "p" and run.init["tags"] == ["t"] and run.init["config"] == {"seed": 1}
    assert run.init["resume"] == "allow" and run.init["name"] == "a/b/c/d/e"
    assert run.logged == [{"build/build_seconds": 2.0, "build/llm/calls": 3.0},
                          {"query/latency/retrieve": 0.5, "query/questions": 1.0}]
    assert run.summary == {"accuracy": 0.5} and run.finished


@pytest.mark.slow
def test_sample_instance_with_the_embedded_cpu_stack(tmp_path: Path) -> None:
    cfg = bench_config(compose_config([f"output_root={tmp_path}", "progress=false", "dataset.limit=1"]))
    summary = runner.run_benchmark(cfg)
    assert summary["build"]["instances"] == 1 and summary["query"]["questions"] == 1


def test_rejudge_config_follows_the_run_unless_told_otherwise(tmp_path: Path) -> None:
    from benchmarks.harness.app import judge_config

    stored = plain_config(config(tmp_path, "dataset=locomo"))  # as run.json stores it
    stored["llm"].update(model="the-run-backbone", retired_knob=1)  # a key of an older harness's config
    judge = judge_config(stored, [])
    assert judge.model is not None
    assert judge.judge_id == "locomo-generous" and judge.model.model == "the-run-backbone"
    other = judge_config(stored, ["judge=strict", "llm=qwen3_30b_a3b_server"])
    assert other.model is not None
    assert other.judge_id == "strict" and other.model.model == "Qwen/Qwen3-30B-A3B-Instruct-2507"
    assert other.model.seed == stored["seed"]


def haystack_with_faults(tmp_path: Path) -> Path:
    """The tiny LongMemEval file with an exact repeat of a session in the first haystack (kept once) and
    a session dated in 1850 in the second (which MemForest refuses: that instance fails)."""
    entries = json.loads((FIXTURES / "longmemeval_tiny.json").read_text())
    first, second = entries[0], entries[1]
    for key in ("haystack_session_ids", "haystack_dates", "haystack_sessions"):
        first[key].append(first[key][0])
    second["haystack_session_ids"].append("old")
    second["haystack_dates"].append("1850/05/20 (Mon) 10:00")
    second["haystack_sessions"].append([{"role": "user", "content": "A letter from long ago."}])
    path = tmp_path / "faulty.json"
    path.write_text(json.dumps(entries))
    return path


def test_a_failing_instance_is_recorded_and_the_run_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    path = haystack_with_faults(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv",
                        ["memforest-bench", *FAKE_MODELS, "progress=false", "dataset=longmemeval_s",
                         f"dataset.path={path}"])
    with pytest.raises(SystemExit) as stop:
        main()
    assert stop.value.code == 1
    assert "1 instance(s) failed" in capsys.readouterr().err
    out = tmp_path / "results/default/longmemeval_s/memforest_embed/smollm2_cpu/seed0"
    run = json.loads((out / "run.json").read_text())
    assert run["dataset"]["duplicate_sessions_dropped"] == 1
    records = {r["question_id"]: r for r in read_jsonl(out / "records.jsonl")}
    assert set(records) == {"tiny_q1", "tiny_q2", "tiny_q3_abs"}  # the run went on after the failure
    assert records["tiny_q2"]["error"].startswith("build: ") and "1900" in records["tiny_q2"]["error"]
    assert not records["tiny_q1"].get("error") and not records["tiny_q3_abs"].get("error")
    verdicts = {v["question_id"]: v for v in read_jsonl(out / "judgments.jsonl")}
    assert not verdicts["tiny_q2"]["correct"]  # failed questions count as wrong, never drop out
    summary = (out / "summary.md").read_text()
    assert "Failed instances: 1" in summary and "- tiny_q2: build:" in summary
    assert "duplicate sessions dropped by the loader | 1" in summary


def test_an_entry_that_cannot_be_loaded_fails_alone_and_the_run_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    entries = json.loads((FIXTURES / "longmemeval_tiny.json").read_text())
    entries[1].pop("haystack_dates")
    entries[0]["haystack_sessions"][0].append({"role": "assistant", "content": "\u200b"})
    path = tmp_path / "malformed.json"
    path.write_text(json.dumps(entries))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["memforest-bench", "experiment=retrieval", *FAKE_MODELS,
                                      "progress=false", "dataset=longmemeval_s", f"dataset.path={path}"])
    with pytest.raises(SystemExit) as stop:
        main()
    assert stop.value.code == 1 and "1 instance(s) failed" in capsys.readouterr().err
    out = tmp_path / "results/retrieval/longmemeval_s/memforest_sessions/smollm2_cpu/seed0"
    dataset = json.loads((out / "run.json").read_text())["dataset"]
    assert dataset["failures"] == [{"instance_id": "tiny_q2", "stage": "load",
                                    "reason": "missing field 'haystack_dates'"}]
    assert dataset["unreadable_turns_dropped"] == 1 and dataset["instances"] == 2
    records = read_jsonl(out / "records.jsonl")
    assert [r["question_id"] for r in records] == ["tiny_q1", "tiny_q3_abs"]
    assert not any(r.get("error") for r in records)
    summary = (out / "summary.md").read_text()
    assert "Failed instances: 1" in summary and "- tiny_q2: load: missing field 'haystack_dates'" in summary
    assert "source entries not loaded | 1" in summary
    assert "unreadable turns dropped by the loader | 1" in summary
