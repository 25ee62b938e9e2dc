"""The token evidence budget and the answer prompt's window: the cut on hand-made retrievals, the
configuration that asks for it, and runs on the sample with the scripted model and hash embedder."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from baselines.base import EvidenceItem, Retrieval, render_evidence
from benchmarks.harness import runner
from benchmarks.harness.app import compose_config, main
from benchmarks.harness.context_budget import cut_to_budget, drop_order, fit_window
from benchmarks.harness.results import RunFiles, read_jsonl
from benchmarks.harness.schema import BenchConfig, bench_config
from benchmarks.harness.tokens import estimate_tokens, token_counter
from memforest.config import LLMConfig

FAKE_MODELS = ["llm.backend=scripted", "llm.responder=responders:harness_responder", "embedder.backend=hash",
               "embedder.dim=256"]


def words(text: str) -> int:
    """One token per word: easy to count by hand."""
    return len(text.split())


def items() -> list[EvidenceItem]:
    return [EvidenceItem("alpha beta gamma", "2023-03-01", ["s3"], score=0.9),  # 4 tokens with its tag
            EvidenceItem("delta epsilon", "2023-01-01", ["s1"], score=0.5),  # 3
            EvidenceItem("zeta eta theta iota", "2023-02-01", ["s2"], score=0.2)]  # 5


# ---------------------------------------------------------------- the budget cut


def sectioned(items: Sequence[EvidenceItem]) -> str:
    """A system's own layout: one header per section, in the order sections first appear."""
    out: list[str] = []
    for section in dict.fromkeys(e.section for e in items):
        out += [f"== {section} ==", *(e.text for e in items if e.section == section)]
    return "\n".join(out)


def test_the_cut_follows_the_systems_rank_and_keeps_its_layout() -> None:
    """Laid out by section, ranked across them: the cut keeps the best-ranked items whole, then part of
    the next, and the system renders what is kept with its headers, in its own order."""
    laid_out = [EvidenceItem("a1 a1", section="Alice", rank=0),
                EvidenceItem("a2 a2", section="Alice", rank=3),
                EvidenceItem("b1 b1", section="Bob", rank=1),
                EvidenceItem("b2 b2 b2", section="Bob", rank=2)]
    retrieval = Retrieval(sectioned(laid_out), laid_out)
    cut, fields = cut_to_budget(retrieval, 12, words, sectioned)  # a header counts 3
    assert [e.rank for e in cut.evidence] == [0, 1, 2]  # a2 (rank 3) dropped though it comes second
    assert cut.context == "== Alice ==\na1 a1\n== Bob ==\nb1 b1\nb2 b2"
    assert cut.evidence[2].text == "b2 b2" and fields["evidence_budget"]["truncated"] == 1
    assert words(cut.context) == 12
    whole, _ = cut_to_budget(retrieval, 100, words, sectioned)
    assert whole.context == retrieval.context and whole.evidence == laid_out


def test_the_window_drops_the_oldest_items_and_the_system_renders_the_rest() -> None:
    timed = [EvidenceItem("old old", "2023-01-01", section="Alice"),
             EvidenceItem("new new", "2023-03-01", section="Bob")]
    context, details = fit_window(sectioned(timed), timed, 5, words, sectioned)
    assert context == "== Bob ==\nnew new" and details is not None and details["dropped"] == 1


def test_the_cut_keeps_the_systems_order_and_the_budget() -> None:
    retrieval = Retrieval("the system's own layout", items())
    cut, fields = cut_to_budget(retrieval, 9, words)
    assert [e.session_ids for e in cut.evidence] == [["s3"], ["s1"], ["s2"]]  # the first two whole, then part
    assert cut.evidence[2].text == "zeta"
    assert cut.context == "[2023-03-01] alpha beta gamma\n[2023-01-01] delta epsilon\n[2023-02-01] zeta"
    assert words(cut.context) == 9
    assert fields == {"evidence_cut": True, "evidence_budget": {
        "tokens": 9, "tokens_before": 12, "tokens_after": 9, "items": 3, "kept": 2, "truncated": 1,
        "dropped": 0}}


def test_within_the_budget_the_evidence_is_rendered_whole_and_not_cut() -> None:
    cut, fields = cut_to_budget(Retrieval("layout", items()), 100, words)
    assert cut.context == render_evidence(items()) and cut.evidence == items()
    assert fields["evidence_cut"] is False and fields["evidence_budget"]["tokens_after"] == 12


def test_a_tag_alone_is_no_evidence_and_a_history_keeps_its_newest_items() -> None:
    cut, fields = cut_to_budget(Retrieval("", items()), 5, words)
    assert [e.text for e in cut.evidence] == ["alpha beta gamma"]  # the next item's tag would not help
    assert fields["evidence_budget"]["dropped"] == 2
    history = Retrieval("", items(), ranked=False)
    cut, fields = cut_to_budget(history, 8, words)
    assert [e.session_ids for e in cut.evidence] == [["s1"], ["s2"]]
    assert fields["evidence_budget"] == {"tokens": 8, "tokens_before": 12, "tokens_after": 8, "items": 3,
                                         "kept": 2, "truncated": 0, "dropped": 1}


def test_a_context_without_evidence_items_keeps_its_start() -> None:
    cut, fields = cut_to_budget(Retrieval("one two three four five", []), 3, words)
    assert cut.context == "one two three" and fields["evidence_cut"] is True


@pytest.mark.parametrize("budget", [1, 7, 30, 60, 1000])
def test_the_estimate_never_exceeds_the_budget(budget: int) -> None:
    evidence = [EvidenceItem(f"item {i} " + "word " * (i * 7 % 23), f"2023-01-{i + 1:02d}")
                for i in range(20)]
    cut, fields = cut_to_budget(Retrieval("", evidence), budget, estimate_tokens)
    assert estimate_tokens(cut.context) == fields["evidence_budget"]["tokens_after"] <= budget
    assert [e.time for e in cut.evidence] == [e.time for e in evidence[:len(cut.evidence)]]


# ---------------------------------------------------------------- the prompt's window


def test_the_window_drops_the_oldest_evidence_first() -> None:
    evidence = items()
    context = "a layout of its own " + render_evidence(evidence)
    assert fit_window(context, evidence, 100, words) == (context, None)
    fitted, details = fit_window(context, evidence, 9, words)
    assert fitted == "[2023-03-01] alpha beta gamma\n[2023-02-01] zeta eta theta iota"  # 2023-01-01 went
    assert details == {"window_tokens": 9, "tokens_before": 17, "tokens_after": 9, "items": 3, "dropped": 1}


def test_items_without_a_time_go_from_the_end_after_the_timed_ones() -> None:
    evidence = [EvidenceItem("a"), EvidenceItem("b", "1:56 pm on 8 May, 2023"), EvidenceItem("c"),
                EvidenceItem("d", "2023/05/20 (Sat) 02:21"), EvidenceItem("e", "not a date")]
    assert drop_order(evidence) == [1, 3, 4, 2, 0]
    fitted, details = fit_window("", [], 0, words)
    assert (fitted, details) == ("", None)


# ---------------------------------------------------------------- the counter


def test_the_counter_says_what_counted() -> None:
    scripted = token_counter(LLMConfig(backend="scripted"))
    assert scripted.describe()["exact"] is False and scripted.count("abcdefgh") == 2

    class Tokenizing:
        def count_tokens(self, text: str) -> int:
            return len(text)

    own = token_counter(LLMConfig(backend="scripted", model="m"), Tokenizing())
    assert own.describe() == {"name": "scripted model m", "exact": True} and own.count("abc") == 3


# ---------------------------------------------------------------- configuration and runs


def config(tmp_path: Path, *overrides: str) -> BenchConfig:
    return bench_config(compose_config([*FAKE_MODELS, f"output_root={tmp_path}", "progress=false",
                                        *overrides]))


def test_budget_tokens_composes_without_budget_method_files() -> None:
    tokens = compose_config(["method=flat_rag", "experiment=shared_budget", "budget=tokens",
                             "budget.evidence_tokens=500"])
    assert tokens.budget.mode == "tokens" and tokens.budget.evidence_tokens == 500
    assert tokens.method == compose_config(["method=flat_rag"]).method  # retrieval at the native budget
    assert "/shared_budget-tokens500/" in bench_config(tokens).run_dir
    assert "mode: tokens" in OmegaConf.to_yaml(tokens)  # what `--cfg job` prints
    assert compose_config(["method=flat_rag", "budget=tokens"]).budget.evidence_tokens == 2000


def test_cfg_job_prints_the_token_budget(monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["memforest-bench", "budget=tokens", "budget.evidence_tokens=700",
                                      "--cfg", "job"])
    main()
    out = capsys.readouterr().out
    assert "mode: tokens" in out and "evidence_tokens: 700" in out


def test_a_token_budget_run_records_the_cut(tmp_path: Path) -> None:
    cfg = config(tmp_path, "method=flat_sessions", "budget=tokens", "budget.evidence_tokens=150",
                 "dataset.limit=1")
    runner.run_benchmark(cfg)
    rows = read_jsonl(Path(cfg.run_dir) / "records.jsonl")
    assert rows and all(r["evidence_cut"] and r["evidence_tokens"] <= 150 for r in rows)
    assert all(estimate_tokens(r["context"]) == r["evidence_tokens"] for r in rows)
    assert all(r["evidence_budget"]["tokens_before"] > 150 and r["prompt_cut"] is False for r in rows)
    run = RunFiles(cfg.run_dir, create=False).load_run()
    assert run["token_counter"]["exact"] is False  # the scripted model has no tokenizer: the estimate
    summary = (Path(cfg.run_dir) / "summary.md").read_text()
    assert "evidence tokens / question" in summary and "at budget tokens 150" in summary
    assert "| evidence tokens counted by | estimate: 4 characters per token (not the answer" in summary


def test_a_prompt_over_the_window_is_cut_and_still_answered(tmp_path: Path) -> None:
    cfg = config(tmp_path, "method=flat_sessions", "llm.context_tokens=700", "answer.max_tokens=64",
                 "dataset.limit=1")
    runner.run_benchmark(cfg)
    rows = read_jsonl(Path(cfg.run_dir) / "records.jsonl")
    assert rows and all(r["prompt_cut"] and not r.get("error") and "response" in r for r in rows)
    for row in rows:
        window = row["prompt_window"]
        assert row["evidence_tokens"] == window["tokens_after"] <= window["window_tokens"] < 700 - 64
        assert window["dropped"] >= 1 and window["tokens_before"] > window["window_tokens"]


def test_a_token_budget_sweep_compares_evidence_tokens_within_the_budget(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["memforest-bench", "-m", "method=flat_rag,flat_sessions",
                                      "experiment=shared_budget", "budget=tokens",
                                      "budget.evidence_tokens=120,400", *FAKE_MODELS, "progress=false",
                                      "dataset.limit=1"])
    main()
    sweeps = list((tmp_path / "results/hydra/multirun").glob("*/*/comparison.md"))
    assert len(sweeps) == 1
    table = sweeps[0].read_text()
    head = next(line for line in table.splitlines() if line.startswith("| method"))
    columns = [c.strip() for c in head.strip("|").split("|")]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()
            if line.startswith("| flat_")]
    assert len(rows) == 4
    for row in rows:
        budget = int(row[columns.index("budget")].removeprefix("tokens "))
        assert 0 < float(row[columns.index("evidence tokens / q")].replace(",", "")) <= budget
    assert (tmp_path / "results/shared_budget-tokens120/sample/flat_rag").is_dir()
