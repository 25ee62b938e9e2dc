"""The budget axis is applied while Hydra composes: `budget=shared` merges the method's
`budget_method/shared_<method>` settings into the method node, so the composed configuration (what
`--cfg job` prints) holds the shared evidence budget."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from benchmarks.harness import runner
from benchmarks.harness.app import CONFIG_DIR, compose_config
from benchmarks.harness.results import RunFiles
from benchmarks.harness.schema import bench_config

FAKE_MODELS = ["llm.backend=scripted", "llm.responder=responders:harness_responder", "embedder.backend=hash",
               "embedder.dim=256"]


def method_options() -> list[str]:
    return sorted(p.stem for p in (CONFIG_DIR / "method").glob("*.yaml") if not p.stem.startswith("_"))


def test_every_method_has_its_shared_budget_settings() -> None:
    """budget=shared with a method that has no `shared_<method>` file would silently run at the
    method's own budget (the defaults entry is optional, for budget=native)."""
    shared = {p.stem for p in (CONFIG_DIR / "budget_method").glob("shared_*.yaml")}
    assert shared == {f"shared_{m}" for m in method_options()}


def test_flat_rag_budget_shared_composes_to_the_shared_evidence_budget() -> None:
    cfg = compose_config(["method=flat_rag", "budget=shared", "budget.evidence=7"])
    assert cfg.budget.mode == "shared" and cfg.method.system.top_k == 7
    native = compose_config(["method=flat_rag", "budget.evidence=7"])
    assert "top_k" not in native.method.system  # the adapter's own default


@pytest.mark.parametrize(("name", "path"), [
    ("flat_rag", "system.top_k"), ("flat_sessions", "system.top_k"), ("mempalace", "system.top_k"),
    ("mem0", "system.evidence_limit"), ("mem0_additive", "system.evidence_limit"),
    ("mem0_additive_mb", "system.evidence_limit"),
    ("zep_local", "system.evidence_limit"), ("memoryos", "system.retrieval_queue_capacity"),
    ("evermemos", "system.response_top_k"), ("lightmem", "system.limit"),
    ("memforest_embed", "memforest.query.final_units"), ("memforest_planner", "memforest.query.final_units"),
    ("memforest_sessions", "memforest.query.final_units"),
])
def test_shared_budget_experiment_sets_each_methods_budget(name: str, path: str) -> None:
    shared = compose_config([f"method={name}", "experiment=shared_budget", "budget.evidence=7"])
    assert shared.budget.mode == "shared" and shared.experiment_name == "shared_budget"
    assert OmegaConf.select(shared.method, path) == 7
    native = compose_config([f"method={name}", "budget.evidence=7"])
    assert native.budget.mode == "native" and OmegaConf.select(native.method, path) != 7


def test_full_context_has_no_budget_to_share() -> None:
    native, shared = (compose_config(["method=full_context", *o]) for o in ([], ["budget=shared"]))
    assert native.method == shared.method


@pytest.mark.parametrize(("name", "setting"), [
    ("flat_rag", "top_k"), ("flat_sessions", "top_k"), ("memforest_sessions", "query.final_units"),
])
def test_a_shared_budget_run_records_and_builds_what_composition_printed(name: str, setting: str,
                                                                         tmp_path: Path) -> None:
    """What `--cfg job` prints is what runs: run.json's config is the composed configuration, resolved,
    and the system is built with the shared budget."""
    composed = compose_config([*FAKE_MODELS, f"output_root={tmp_path}", "progress=false", f"method={name}",
                               "budget=shared", "budget.evidence=3", "dataset.limit=1",
                               "answer.enabled=false", "judge.enabled=false"])
    cfg = bench_config(composed)
    summary = runner.run_benchmark(cfg)
    assert "skipped" not in summary
    run = RunFiles(cfg.run_dir, create=False).load_run()
    assert run["config"] == OmegaConf.to_container(composed, resolve=True)
    if setting == "top_k":
        assert run["system"][setting] == 3
    else:
        assert run["config"]["method"]["memforest"]["query"]["final_units"] == 3
