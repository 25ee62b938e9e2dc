"""`make paper` on the committed results fixture: every table and figure is written, with the rows and
series the fixture's runs hold, the paper's published values beside, and missing runs marked missing."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

pd = pytest.importorskip("pandas")
pytest.importorskip("matplotlib")

from analysis.__main__ import ARTIFACTS  # noqa: E402
from analysis.load import Results, is_simulated, read_jsonl  # noqa: E402
from analysis.names import PUBLISHED_DIR  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "paper_results"
TABLES = {
    "write_path": ["write_path"],
    "stage_breakdown": ["stage_breakdown"],
    "query_latency": ["query_latency", "query_latency_forests"],
    "accuracy": ["accuracy_longmemeval_s_longmemeval_scripted", "accuracy_longmemeval_s_strict_scripted",
                 "accuracy_locomo_locomo_generous_scripted"],
    "passk": ["passk"],
    "migration": ["migration"],
    "mechanism_scaling": ["mechanism_refresh_calls", "mechanism_level_parallel"],
    "evidence_budget": ["evidence_budget"],
    "chunk_size": ["chunk_size"],
    "ablation_tree_families": ["ablation_tree_families"],
    "ablation_retrieval": ["ablation_retrieval"],
}
FIGURES = {"accuracy": ["accuracy_longmemeval_s", "accuracy_locomo"]}


@pytest.fixture(scope="module")
def paper(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The artifacts, written by the entry point `make paper` runs."""
    out = tmp_path_factory.mktemp("paper")
    done = subprocess.run([sys.executable, "-m", "analysis", str(FIXTURE), "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return out


def rows(paper: Path, name: str) -> list[dict[str, str]]:
    """The rows of a Markdown table written by the analysis."""
    lines = [line for line in (paper / f"{name}.md").read_text().splitlines() if line.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    return [dict(zip(head, (c.strip() for c in line.strip("|").split("|")))) for line in lines[2:]]


def series(paper: Path, name: str) -> list[str]:
    info = json.loads((paper / f"{name}.series.json").read_text())
    return [s for ax in info["axes"] for s in ax["series"]] + info["figure_legend"]


def test_every_artifact_is_written(paper: Path) -> None:
    for artifact in ARTIFACTS:
        for table in TABLES[artifact]:
            assert (paper / f"{table}.md").stat().st_size > 0 and (paper / f"{table}.tex").stat().st_size > 0
            assert "\\begin{tabular}" in (paper / f"{table}.tex").read_text()
        for figure in FIGURES.get(artifact, [artifact]):
            for suffix in (".png", ".pdf"):
                assert (paper / f"{figure}{suffix}").stat().st_size > 1000, figure
    index = (paper / "index.md").read_text()
    assert all(f"- {a}:" in index for a in ARTIFACTS)


def test_write_path_rows_real_simulated_and_paper(paper: Path) -> None:
    table = rows(paper, "write_path")
    ours = [r for r in table if r["run"] in ("real", "simulated")]
    assert {(r["system"], r["run"]) for r in ours} == {
        ("MemForest (Embed)", "real"), ("MemForest (Planner)", "real"), ("MemForest (Embed)", "simulated")}
    assert all(r["instances"] == "2" and float(r["turns/s"].replace(",", "")) > 0 for r in ours)
    assert all(r["paper speedup"] == "24.88×" and r["paper turns/s"] == "2.841" for r in ours)
    not_run = {r["system"] for r in table if r["run"] == "not run"}  # the paper's rows without a run here
    assert {"Mem0", "MemoryOS", "Zep Local", "EverMemOS"} <= not_run
    assert "EverMemOS and LightMem run from their own checkouts" in (paper / "write_path.md").read_text()
    info = json.loads((paper / "write_path.series.json").read_text())
    assert info["simulated"] and "ours (simulated)" in series(paper, "write_path")
    assert "simulated" in (paper / "write_path.md").read_text().split("**")[2]
    # each simulated run says what it simulated: latency model, content source, caps, capped answers
    assert ("MemForest (Embed), sample (simulated): latency model qwen3_30b_a3b_h100, content source "
            "SmolLM2-135M-Instruct.Q4_1 (scripted), output caps none; 0 of 0 answers capped."
            in (paper / "write_path.md").read_text())


def test_stage_breakdown_shares_sum_to_one_hundred(paper: Path) -> None:
    table = rows(paper, "stage_breakdown")
    for (system, run), group in pd.DataFrame(table).groupby(["system", "run"]):
        shares = [float(v) for v in group["time share %"]]
        assert list(group["stage"]) == ["extract", "canonicalise + route", "refresh + index", "persistence"]
        assert sum(shares) == pytest.approx(100, abs=0.5), (system, run)
        # the paper has no persistence figure of its own (folded into its stages), not a missing one
        assert list(group["paper time share % (30B)"])[-1] == "n/a (folded)"
        assert "missing" not in list(group["paper time share % (30B)"])
    assert set(series(paper, "stage_breakdown")) >= {"extract", "refresh + index", "persistence"}


def test_query_latency_per_mode_and_over_forests(paper: Path) -> None:
    table = rows(paper, "query_latency")
    ours = {(r["system"], r["forests"]) for r in table if r["run"] == "real"}
    assert (ours
            == {(f"MemForest ({mode})", n) for mode in ("embedding browse", "LLM browse + planner")
                for n in "12"})
    beside = {r["system"]: r["paper total s"] for r in table if r["run"] == "real"}
    assert beside == {"MemForest (embedding browse)": "2.19", "MemForest (LLM browse + planner)": "4.60"}
    assert {r["system"] for r in table if r["run"] == "missing"} >= {"Mem0", "MemoryOS", "EverMemOS"}
    forests = rows(paper, "query_latency_forests")
    assert [r["forests"] for r in forests] == ["1", "2", "4", "8"]
    assert (forests[0]["paper root recall p95_ms"] == "0.114"
            and forests[1]["paper root recall p95_ms"] == "missing")


def test_accuracy_tables_by_type_and_official_locomo_category(paper: Path) -> None:
    lme = rows(paper, "accuracy_longmemeval_s_longmemeval_scripted")
    assert {"overall", "knowledge-update", "temporal-reasoning"} <= set(lme[0])
    ours = [r for r in lme if r["source"] == "ours"]
    assert {r["system"] for r in ours} == {"MemForest (Embed)", "MemForest (Planner)"}
    assert all(r["overall"].endswith("(n=6)") for r in ours)
    locomo = rows(paper, "accuracy_locomo_locomo_generous_scripted")
    assert list(locomo[0])[3:] == ["cat1-4", "c1 multi-hop", "c2 temporal", "c3 open-domain", "c4 single-hop",
                                   "c5 adversarial (apart)"]
    mine = next(r for r in locomo if r["source"] == "ours")
    assert mine["cat1-4"].endswith("(n=4)") and mine["c5 adversarial (apart)"].endswith("(n=1)")
    paper_planner = next(r for r in locomo
                         if r["system"] == "MemForest (Planner)" and r["source"].startswith("paper"))
    assert paper_planner["cat1-4"] == "84.1" and paper_planner["c5 adversarial (apart)"] == "35.9"
    strict = rows(paper, "accuracy_longmemeval_s_strict_scripted")
    assert [r["system"] for r in strict if r["source"] == "ours"] == ["MemForest (Embed)"]


def test_passk_has_eight_points(paper: Path) -> None:
    table = rows(paper, "passk")
    ours = next(r for r in table if r["source"] == "ours")
    assert all(ours[f"pass@{k}"] != "missing" for k in range(1, 9))
    values = [float(ours[f"pass@{k}"]) for k in range(1, 9)]
    assert values == sorted(values)  # pass@k never falls with k
    assert next(r for r in table if r["source"] == "paper")["pass@8"] == "54.4"


def test_migration_ours_beside_paper_and_missing_n(paper: Path) -> None:
    table = {r["N forests"]: r for r in rows(paper, "migration")}
    assert sorted(table, key=int) == [str(n) for n in range(1, 9)]
    assert all(table[n]["source"] == "ours (scripted test model)" for n in ("1", "2", "3", "4"))
    assert all(table[n]["source"] == "missing" for n in ("5", "6", "7", "8"))
    assert all(table[n]["facts seq / merged"] != "missing" for n in ("1", "2", "3", "4"))
    assert table["8"]["paper speedup"] == "2.42×" and table["2"]["paper facts"] == "2,692 / 2,716"


def test_mechanism_scaling_tables(paper: Path) -> None:
    calls = rows(paper, "mechanism_refresh_calls")
    ours = [r for r in calls if r["eager calls"] != "missing"]
    assert [r["fan-out k"] for r in ours] == ["3", "3", "8", "8", "16", "16", "every tree of a built memory"]
    assert all(float(r["eager / batched"].rstrip("×")) >= 1 for r in ours)
    parallel = rows(paper, "mechanism_level_parallel")
    scheduled = [r for r in parallel if r["run"] == "scheduled from recorded calls"]
    assert [r["parallel requests P"] for r in scheduled] == ["1", "2", "4", "8", "16"]
    assert scheduled[0]["speedup vs P=1"] == "1.00×"
    assert any(r["run"] == "missing" and r["paper speedup"] == "14.2×" for r in parallel)


def test_sweeps_one_row_per_setting(paper: Path) -> None:
    budget = rows(paper, "evidence_budget")
    assert [r["k"] for r in budget if r["source"] == "ours"] == ["5", "10", "20"]
    assert [r["evidence items"] for r in budget if r["source"] == "ours"] == ["5.0", "10.0", "20.0"]
    assert any(r["pass@1 %"].startswith("missing") and r["system"] == "MemForest" for r in budget)
    chunks = {r["turns per chunk"]: r for r in rows(paper, "chunk_size")}
    assert [c for c, r in chunks.items() if r["source"] != "missing"] == ["1", "2", "whole"]
    assert chunks["whole"]["paper gold span kept %"] == "55" and chunks["64"]["source"] == "missing"


def test_ablations_cover_the_papers_settings(paper: Path) -> None:
    retrieval = rows(paper, "ablation_retrieval")
    assert len(retrieval) == 6 and all(r["pass@n %"].endswith("(n=2)") for r in retrieval)
    assert retrieval[-1]["setting"] == "LLM browse + planner" and retrieval[-1]["paper pass@8 %"] == "90.0"
    families = {r["setting"]: r for r in rows(paper, "ablation_tree_families")}
    ran = {s for s, r in families.items() if r["source"] != "missing"}
    assert ran == {"entity+scene+session", "session", "entity"}
    assert families["scene"]["source"] == "missing" and families["scene"]["paper pass@8 %"] == "81.7"
    assert ("paper: 60-question LongMemEval-S subset, Qwen3-30B-A3B, pass@8"
            in series(paper, "ablation_retrieval"))


def test_published_values_carry_their_provenance() -> None:
    for path in sorted(PUBLISHED_DIR.glob("*.csv")):
        with path.open() as handle:
            data = list(csv.DictReader(handle))
        assert data and all(row["source"].strip() for row in data), path.name


def test_no_runs_gives_missing_tables_not_invented_numbers(tmp_path: Path) -> None:
    empty = tmp_path / "results"
    empty.mkdir()
    done = subprocess.run([sys.executable, "-m", "analysis", str(empty), "--out", str(tmp_path / "paper"),
                           "--only", "write_path", "migration"], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    table = rows(tmp_path / "paper", "write_path")
    assert table and all(r["run"] == "not run" and r["build s"] == "not run" for r in table)
    assert json.loads((tmp_path / "paper" / "migration.series.json").read_text())["no_runs_of_ours"]


def test_loader_reads_runs_skips_torn_lines_and_marks_simulated(tmp_path: Path) -> None:
    run = tmp_path / "r"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"config": {"experiment_name": "main", "method": {"name": "m"},
                                                         "llm": {"name": "x",
                                                                 "latency_model": {"name": "h100"}}}}))
    (run / "records.jsonl").write_text('{"question_id": "q", "attempt": 0}\n{"question_id": "q2", "att')
    results = Results.scan(tmp_path)
    assert results.runs["simulated"].tolist() == [True] and len(results.records) == 1
    assert len(read_jsonl(run / "records.jsonl")) == 1
    assert not is_simulated({"config": {"llm": {"latency_model": None}}})
    with pytest.raises(FileNotFoundError):
        Results.scan(tmp_path / "absent")


def test_a_failing_artifact_is_reported_and_the_others_written(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from analysis import __main__ as entry
    from analysis.artifacts import passk

    def broken(*args: object) -> list[Path]:
        raise KeyError("a column the artifact needs")

    monkeypatch.setattr(passk, "make", broken)
    code = entry.main([str(FIXTURE), "--out", str(tmp_path), "--only", "passk", "migration"])
    assert code == 1
    index = (tmp_path / "index.md").read_text()
    assert "- passk: FAILED (KeyError" in index and "- migration: migration.md" in index
    assert (tmp_path / "migration.png").exists()
