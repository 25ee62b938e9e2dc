"""Every config composes with every other, every method builds, every experiment smoke-runs; defaults
that must agree across systems do."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from baselines.base import SystemUnavailable
from benchmarks.harness import runner, systems
from benchmarks.harness.app import CONFIG_DIR, compose_config
from benchmarks.harness.results import RunFiles, read_jsonl
from benchmarks.harness.schema import BenchConfig, bench_config
from benchmarks.judging.judges import JUDGE_IDS
from memforest.config import LLMConfig, MemForestConfig
from memforest.llm import testing

FAKE_MODELS = ["llm.backend=scripted", "llm.responder=responders:harness_responder", "embedder.backend=hash",
               "embedder.dim=256"]
GROUPS = ("method", "dataset", "llm", "embedder", "judge", "experiment")


def options(group: str) -> list[str]:
    """The selectable options of a group (files starting with `_` are shared parts, not options)."""
    return sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml") if not p.stem.startswith("_"))


def composed_config(tmp_path: Path, *overrides: str) -> DictConfig:
    return compose_config([*FAKE_MODELS, f"output_root={tmp_path}", "progress=false", *overrides])


def config(tmp_path: Path, *overrides: str) -> BenchConfig:
    return bench_config(composed_config(tmp_path, *overrides))


_REFERENCE = re.compile(r"\$\{([A-Za-z_]\w*)[.}]")


def references(node: Any) -> set[str]:
    """The first keys of every `${key...}` interpolation in a (plain) config node."""
    if isinstance(node, dict):
        return set().union(*(references(v) for v in node.values())) if node else set()
    if isinstance(node, list):
        return set().union(*(references(v) for v in node)) if node else set()
    return set(_REFERENCE.findall(node)) if isinstance(node, str) else set()


def touched_groups(experiment: str) -> set[str]:
    """The groups an experiment's file changes: its top-level keys and the groups its defaults list
    overrides (`override /method: ...`); every other group's nodes compose as without it."""
    data = yaml.safe_load((CONFIG_DIR / "experiment" / f"{experiment}.yaml").read_text()) or {}
    touched = set(data)
    for entry in data.get("defaults") or ():
        for key in entry if isinstance(entry, dict) else ():
            touched.add(str(key).removeprefix("override ").strip("/").split("/")[0])
    if "budget" in touched:  # the budget choice lands in the method node (budget_method@method)
        touched.add("method")
    return touched


_PLAIN_NODES: dict[str, dict[str, Any]] = {}


def plain_node(group: str, option: str) -> Any:
    """A group option's node composed with no experiment (once per process; inside a compose context)."""
    key = f"{group}={option}"
    if key not in _PLAIN_NODES:
        cfg = OmegaConf.to_container(compose("config", overrides=[key]))
        assert isinstance(cfg, dict)
        _PLAIN_NODES[key] = cfg[group]
    return _PLAIN_NODES[key]


@pytest.mark.parametrize("experiment", options("experiment"))
def test_every_combination_of_every_group_composes_and_resolves(experiment: str) -> None:
    """Hydra composes each option of each group under each experiment (each group owns its package;
    an experiment's overrides are in every node composed under it). A node's resolved value depends
    only on the nodes its interpolations reach, so each node is resolved once per choice of the groups
    it reaches; every combination is then the union of its resolved nodes, and a broken interpolation
    or a bad value anywhere fails here. One experiment a case, so that the cases run side by side; the
    nodes of groups an experiment leaves alone are composed once (`touched_groups`, `plain_node`)."""
    groups = GROUPS[:-1]
    choices = list(itertools.product(*(options(g) for g in groups)))
    combos = 0
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3", job_name="compose-all"):
        def composed(*overrides: str) -> dict[str, Any]:
            asked = [f"experiment={experiment}", *overrides]
            cfg = OmegaConf.to_container(compose("config", overrides=asked))
            assert isinstance(cfg, dict)
            return {str(k): v for k, v in cfg.items()}

        top = {k: v for k, v in composed().items() if k not in groups}
        touched = touched_groups(experiment)
        nodes = {g: {o: composed(f"{g}={o}")[g] if g in touched else plain_node(g, o) for o in options(g)}
                 for g in groups}
        reach = {g: {o: _reached(g, nodes[g][o], top, nodes) for o in options(g)} for g in groups}
        resolved: dict[tuple[str, tuple[tuple[str, str], ...]], dict[str, Any]] = {}
        top_reach = references(top) & set(groups)  # resolution is lazy: direct references suffice
        for choice in choices:
            picked = dict(zip(groups, choice))
            cfg: dict[str, Any] = {}
            for g in (*groups, ""):
                deps = reach[g][picked[g]] | {g} if g else top_reach
                key = (g, tuple(sorted((d, picked[d]) for d in deps)))
                if key not in resolved:
                    scope = OmegaConf.create({**top, **{d: nodes[d][o] for d, o in key[1]}})
                    resolved[key] = _resolve(scope, [g] if g else list(top))
                cfg.update(resolved[key])
            assert cfg["judge"]["judge_id"] in JUDGE_IDS, (experiment, choice)
            method, llm = cfg["method"]["name"], cfg["llm"]["name"]
            # an experiment may name its variant (mode, k, chunk size...) between backbone and seed
            assert re.search(rf"/{method}/{llm}(/[^/]+)*/seed{cfg['seed']}$",
                             cfg["run_dir"]), (experiment, choice)
            combos += 1
    assert combos == len(choices) > 0


def _resolve(scope: Any, keys: list[str]) -> dict[str, Any]:
    out = {}
    for key in keys:
        value = scope[key]
        out[key] = OmegaConf.to_container(value, resolve=True, throw_on_missing=True) \
            if OmegaConf.is_config(value) else value
    return out


def _reached(group: str, node: dict[str, Any], top: dict[str, Any],
             nodes: dict[str, dict[str, Any]]) -> set[str]:
    """The groups a node's interpolations reach, directly or through other groups' nodes."""
    found: set[str] = set()
    frontier = references(node)
    while frontier - found:
        name = (frontier - found).pop()
        found.add(name)
        if name in nodes:
            frontier |= set().union(*(references(n) for n in nodes[name].values()))
    return {g for g in found if g in nodes and g != group}


@pytest.mark.parametrize("method", options("method"))
def test_every_method_builds_or_says_why_not(method: str, tmp_path: Path) -> None:
    cfg = config(tmp_path, f"method={method}")
    llm = testing.ScriptedChatModel() if cfg.method.needs_chat_model else None
    models = systems.Models(testing.HashEmbedder(256), llm, RunFiles(tmp_path).call_log)
    try:
        system = systems.build_system(cfg.method, cfg.llm, cfg.embedder, models)
    except SystemUnavailable as exc:  # a baseline that cannot run here says why
        assert str(exc).startswith(f"{method}:")
        return
    assert system.name == method
    settings = systems.system_settings(cfg.method)
    assert settings["_target_"] == cfg.method.system["_target_"]
    system.close()


def test_the_backbone_is_served_to_every_baseline_with_memforests_context() -> None:
    node = bench_config(compose_config(["llm=smollm2_cpu"])).method.memforest
    assert node is not None
    memforest = systems.memforest_config(node)
    assert isinstance(memforest, MemForestConfig) and memforest.llm == LLMConfig(seed=0)
    served = [m for m in options("method") if bench_config(compose_config([f"method={m}"])).method.serving]
    assert {"mem0", "mempalace", "memoryos", "zep_local", "lightmem", "evermemos"} <= set(served)
    for method in served:
        serving = bench_config(compose_config([f"method={method}", "llm=smollm2_cpu"])).method.serving
        assert serving is not None
        assert serving.context_tokens == memforest.llm.context_tokens, method  # one length for all
    full = bench_config(compose_config(["method=full_context"])).method.system
    assert full["context_tokens"] == memforest.llm.context_tokens


def test_a_query_mode_set_in_a_method_config_reaches_the_system(tmp_path: Path) -> None:
    for overrides, mode in ((["method=memforest_planner"], "planner"),
                            (["method=memforest_embed", "method.memforest.query.mode=planner"], "planner"),
                            (["method=memforest_embed"], "embed")):
        cfg = config(tmp_path, *overrides)
        models = systems.Models(testing.HashEmbedder(256), testing.ScriptedChatModel(),
                                RunFiles(tmp_path).call_log)
        system = systems.build_system(cfg.method, cfg.llm, cfg.embedder, models)
        assert system.config.query.mode == mode  # type: ignore[attr-defined]
        system.close()


def test_library_overrides_are_type_checked_at_composition() -> None:
    with pytest.raises(Exception, match="max_turns"):
        compose_config(["method.memforest.chunk.max_turns=abc"])
    with pytest.raises(Exception, match="degraded_ok"):
        compose_config(["method.memforest.degraded_ok=maybe"])


def test_run_json_records_every_setting_of_the_system(tmp_path: Path) -> None:
    cfg = config(tmp_path, "method=flat_rag", "dataset.limit=1", "answer.enabled=false")
    runner.run_benchmark(cfg)
    run = RunFiles(cfg.run_dir, create=False).load_run()
    assert run["system"] == {"_target_": "baselines.flat_rag.FlatRAGSystem", "top_k": 10, "name": "flat_rag"}


@pytest.mark.parametrize("experiment", options("experiment"))
def test_every_experiment_smoke_runs_on_the_sample(experiment: str, tmp_path: Path) -> None:
    """... with the configuration Hydra composed: run.json records exactly what `--cfg job` prints,
    resolved (nothing rewrites the configuration after composition)."""
    overrides = [f"experiment={experiment}", "dataset.limit=1"]
    if config(tmp_path, *overrides).dataset.subset:  # a LongMemEval-S subset: its ids are not in the sample
        overrides.append("dataset.subset=null")
    composed = composed_config(tmp_path, *overrides)
    cfg = bench_config(composed)
    summary = runner.run_benchmark(cfg)
    assert "skipped" not in summary
    run = RunFiles(cfg.run_dir, create=False).load_run()
    assert run["config"] == OmegaConf.to_container(composed, resolve=True)
    task = cfg.task
    assert read_jsonl(Path(cfg.run_dir) / ("records.jsonl" if task == "qa" else f"{task}.jsonl"))
