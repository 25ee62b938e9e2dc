"""Judges pinned (a descriptor and its hash on every verdict), never mixed unless told to, and repeated."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.harness import runner
from benchmarks.harness.app import compose_config, main
from benchmarks.harness.results import read_jsonl
from benchmarks.harness.schema import BenchConfig, bench_config
from benchmarks.judging.grading import OFFICIAL_GOLD_SUFFIX, judge_rows
from benchmarks.judging.judges import Judge, JudgeItem
from benchmarks.judging.pinning import describe_judge, differences, judge_descriptor, judge_hash
from benchmarks.judging.repeats import repeat_summary
from memforest.config import LLMConfig
from memforest.llm.base import ChatRequest, ChatResponse

FAKE_MODELS = ["llm.backend=scripted", "llm.responder=responders:harness_responder", "embedder.backend=hash",
               "embedder.dim=256"]
OFFICIAL = '''def get_anscheck_prompt(task, question, answer, response, abstention=False):
    return "{}: is {} right for {}? {}".format(task, response, question, answer)
'''


def config(tmp_path: Path, *overrides: str) -> BenchConfig:
    return bench_config(compose_config([*FAKE_MODELS, f"output_root={tmp_path}", "progress=false",
                                        *overrides]))


def checkout(tmp_path: Path, name: str, extra: str = "") -> Path:
    evaluation = tmp_path / name / "src" / "evaluation"
    evaluation.mkdir(parents=True)
    (evaluation / "evaluate_qa.py").write_text(OFFICIAL + extra, encoding="utf-8")
    return tmp_path / name


class SeededModel:
    """A judge model whose verdict depends on the request's seed: `yes` when `says_yes(seed)`."""

    batched = True
    name = "seeded"

    def __init__(self, says_yes: Any) -> None:
        self.says_yes = says_yes
        self.requests: list[ChatRequest] = []

    def generate(self, requests: Any) -> list[ChatResponse]:
        self.requests += list(requests)
        return [ChatResponse("yes" if self.says_yes(r.seed) else "no") for r in requests]

    def close(self) -> None:
        pass


def item(qid: str, attempt: int = 0) -> JudgeItem:
    return JudgeItem(qid, "Where?", "Miami", "Miami.", "multi-session", attempt=attempt, method="m",
                     dataset="d")


# ---------------------------------------------------------------- the descriptor


def test_descriptor_names_model_endpoint_sampling_and_prompts(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    descriptor = judge_descriptor(cfg)
    assert descriptor["judge_id"] == "longmemeval" and descriptor["endpoint"] == "in-process"
    assert descriptor["model"] == {"backend": "scripted", "id": cfg.llm.model,
                                   "revision": "responders:harness_responder"}
    assert descriptor["sampling"] == {"temperature": 0.0, "top_p": 1.0, "max_tokens": 192, "seed": 0}
    ids = [p["prompt_id"] for p in descriptor["prompts"]]
    assert "judge.abstention" in ids and "judge.longmemeval.temporal" in ids
    assert all(len(p["sha256"]) == 64 for p in descriptor["prompts"])
    assert descriptor["judge_hash"] == judge_hash(descriptor) and len(descriptor["judge_hash"]) == 64
    assert judge_descriptor(config(tmp_path))["judge_hash"] == descriptor["judge_hash"]  # deterministic
    seeded = judge_descriptor(config(tmp_path, "judge.seed=7"))
    assert seeded["judge_hash"] != descriptor["judge_hash"]
    assert differences(descriptor, seeded) == ["sampling.seed"]
    strict = judge_descriptor(config(tmp_path, "judge=strict"))
    assert "prompt sha256" in differences(descriptor, strict)
    assert differences(descriptor, None) == ["no recorded descriptor"]


def test_descriptor_of_served_and_official_judges(tmp_path: Path) -> None:
    served = LLMConfig(backend="openai", model="Qwen/Qwen3-30B-A3B-Instruct-2507", base_url="http://h:8000/v1")
    settings = {"judge_id": "longmemeval-official", "official_dir": str(checkout(tmp_path, "a")),
                "max_tokens": 192}
    descriptor = describe_judge(settings, served)
    assert descriptor["endpoint"] == "http://h:8000/v1"
    assert descriptor["model"]["revision"] == "Qwen/Qwen3-30B-A3B-Instruct-2507"
    assert descriptor["sampling"]["max_tokens"] == 10  # the official script's
    other = describe_judge({**settings, "official_dir": str(checkout(tmp_path, "b", "# edited\n"))}, served)
    assert differences(descriptor, other) == ["prompt sha256"]
    pinned = LLMConfig(backend="vllm", model="org/model", engine_args={"revision": "abc123"})
    assert describe_judge({"judge_id": "strict", "max_tokens": 64}, pinned)["model"]["revision"] == "abc123"


# ---------------------------------------------------------------- repeats


def test_repeats_are_seeded_and_summarised() -> None:
    model = SeededModel(lambda seed: seed % 2 == 0)  # seeds 5, 6, 7: no, yes, no
    judge = Judge(model, "longmemeval", None, 32, seed=5, repeats=3, judge_hash="h")  # type: ignore[arg-type]
    verdicts = judge.judge([item("q1"), item("q2")])
    assert [(v.question_id, v.repeat) for v in verdicts] == [("q1", 0), ("q1", 1), ("q1", 2),
                                                             ("q2", 0), ("q2", 1), ("q2", 2)]
    assert [r.seed for r in model.requests] == [5, 6, 7, 5, 6, 7]
    assert all(v.judge_hash == "h" and v.to_dict()["repeat"] == v.repeat for v in verdicts)
    summary = repeat_summary(verdicts)
    assert summary["repeats"] == 3 and summary["answers"] == 2
    assert [m["correct"] for m in summary["majority"]] == [False, False]  # 1 vote of 3
    assert summary["agreement"] == 0.0
    assert summary["accuracy_per_repeat"] == {"0": 0.0, "1": 1.0, "2": 0.0}
    assert (summary["accuracy_min"], summary["accuracy_max"]) == (0.0, 1.0)


def test_repeat_summary_ties_agreement_and_attempts() -> None:
    rows = [{"question_id": "q1", "attempt": 0, "repeat": 0, "correct": True},
            {"question_id": "q1", "attempt": 0, "repeat": 1, "correct": False},  # a tie: incorrect
            {"question_id": "q2", "attempt": 0, "repeat": 0, "correct": True},
            {"question_id": "q2", "attempt": 0, "repeat": 1, "correct": True},
            {"question_id": "q2", "attempt": 1, "repeat": 0, "correct": False},
            {"question_id": "q2", "attempt": 1, "repeat": 1, "correct": False},
            {"question_id": "q2", "attempt": 1, "repeat": 1, "correct": False}]  # re-judged: counted once
    summary = repeat_summary(rows)
    majority = {(m["question_id"], m["attempt"]): m for m in summary["majority"]}
    assert not majority[("q1", 0)]["correct"] and majority[("q1", 0)]["votes"] == 1
    assert majority[("q2", 0)]["correct"] and not majority[("q2", 1)]["correct"]
    assert summary["agreement"] == pytest.approx(2 / 3)
    assert summary["accuracy_per_repeat"] == {"0": 0.75, "1": 0.25}  # per question, attempts averaged
    assert summary["majority_accuracy"] == 0.25
    empty = repeat_summary([])
    assert empty["agreement"] is None and empty["accuracy_min"] is None


def test_a_deterministic_judge_agrees_with_itself() -> None:
    judge = Judge(SeededModel(lambda seed: True), "longmemeval", None, 32, repeats=4)  # type: ignore[arg-type]
    summary = repeat_summary(judge.judge([item("q1"), item("q2")]))
    assert summary["agreement"] == 1.0 and summary["accuracy_min"] == summary["accuracy_max"] == 1.0


def test_records_an_erratum_changed_are_also_judged_against_the_official_gold() -> None:
    judge = Judge(SeededModel(lambda seed: True), "longmemeval", None, 32, repeats=2)  # type: ignore[arg-type]
    row = {"question_id": "q1", "question": "Q?", "answer": "new", "answer_official": "old", "response": "r",
           "category": "multi-session", "attempt": 0, "method": "m", "dataset": "d"}
    verdicts = judge_rows(judge, [row, {**row, "question_id": "q2", "answer_official": None}])
    labels = [(v.question_id, v.judge_id, v.gold, v.repeat) for v in verdicts]
    assert labels == [("q1", "longmemeval", "answer", 0), ("q1", "longmemeval", "answer", 1),
                      ("q1", "longmemeval" + OFFICIAL_GOLD_SUFFIX, "answer_official", 0),
                      ("q1", "longmemeval" + OFFICIAL_GOLD_SUFFIX, "answer_official", 1),
                      ("q2", "longmemeval", "answer", 0), ("q2", "longmemeval", "answer", 1)]


# ---------------------------------------------------------------- never mixed unless told to


def rejudge(run_dir: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    monkeypatch.setattr(sys, "argv", ["memforest-bench", "judge", str(run_dir), *args])
    with pytest.raises(SystemExit) as stop:
        main()
    return int(stop.value.code or 0)


def test_rejudging_refuses_to_mix_judges_unless_told(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    cfg = config(tmp_path, "dataset.limit=2")
    runner.run_benchmark(cfg)
    out = Path(cfg.run_dir)
    first, second = checkout(tmp_path, "first"), checkout(tmp_path, "second", "# another revision\n")
    official = ["judge.judge_id=longmemeval-official"]
    assert rejudge(out, monkeypatch, *official, f"judge.official_dir={first}") == 0
    path = out / "judgments.longmemeval-official.scripted.jsonl"
    verdicts = read_jsonl(path)
    assert len(verdicts) == 2 and len({v["judge_hash"] for v in verdicts}) == 1
    sidecar = out / "judgments.longmemeval-official.scripted.judge.json"
    assert verdicts[0]["judge_hash"] in json.loads(sidecar.read_text())
    capsys.readouterr()
    assert rejudge(out, monkeypatch, *official, f"judge.official_dir={second}") == 1
    refusal = capsys.readouterr().err.strip()
    assert len(refusal.splitlines()) == 1
    assert "prompt sha256" in refusal and "--mix-judges" in refusal
    assert verdicts[0]["judge_hash"][:12] in refusal
    assert len(read_jsonl(path)) == 2  # nothing judged
    assert rejudge(out, monkeypatch, "--mix-judges", *official, f"judge.official_dir={second}") == 0
    mixed = read_jsonl(path)
    assert len(mixed) == 2 and len({v["judge_hash"] for v in mixed}) == 1  # finished pairs are kept
    assert rejudge(out, monkeypatch, *official, f"judge.official_dir={second}") == 1


def test_verdicts_without_a_hash_count_as_unknown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    cfg = config(tmp_path, "dataset.limit=1")
    runner.run_benchmark(cfg)
    out = Path(cfg.run_dir)
    assert rejudge(out, monkeypatch, "judge=strict", "judge.repeats=2") == 0
    path = out / "judgments.strict.scripted.jsonl"
    rows = read_jsonl(path)
    assert sorted(v["repeat"] for v in rows) == [0, 1]
    old = [{k: v for k, v in row.items() if k != "judge_hash"} for row in rows]  # an older harness's rows
    path.write_text("".join(json.dumps(row) + "\n" for row in old), encoding="utf-8")
    (out / "judgments.strict.scripted.judge.json").unlink()
    capsys.readouterr()
    assert rejudge(out, monkeypatch, "judge=strict", "judge.repeats=3") == 1
    refusal = capsys.readouterr().err
    assert "unknown" in refusal and "no recorded descriptor" in refusal
    assert rejudge(out, monkeypatch, "judge=strict", "judge.repeats=3", "judge.allow_mixed=true") == 0
    assert sorted(v["repeat"] for v in read_jsonl(path)) == [0, 0, 1, 1, 2]


def test_compare_refuses_runs_of_different_judges(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    runs = []
    for seed in (0, 1):
        cfg = config(tmp_path, "dataset.limit=1", f"seed={seed}")
        runner.run_benchmark(cfg)
        runs.append(Path(cfg.run_dir))
    assert rejudge(runs[0], monkeypatch, "judge=strict") == 0
    assert rejudge(runs[1], monkeypatch, "judge=strict", "judge.temperature=0.5") == 0

    def compare(*args: str) -> int:
        monkeypatch.setattr(sys, "argv", ["memforest-bench", "compare", *args])
        with pytest.raises(SystemExit) as stop:
            main()
        return int(stop.value.code or 0)

    capsys.readouterr()
    assert compare(*map(str, runs)) == 1
    refusal = capsys.readouterr().err.strip()
    assert len(refusal.splitlines()) == 1 and "judge strict across runs" in refusal
    assert "sampling.temperature" in refusal
    assert compare("--mix-judges", *map(str, runs)) == 0
    assert "runs side by side" in capsys.readouterr().out
