"""Records tests/fixtures/replay/: a real short simulated write-path run whose served calls the replay test
plays back (tests/test_replay_write_path.py).

    .venv/bin/python tests/make_replay_fixture.py [WORK_DIR]

Two MemForest write paths (every tree family, and session trees only, the paper's family ablation) on
the first instance of the tiny LongMemEval file (8 turns), under llm=qwen3_30b_a3b_simulated with
SmolLM2 through llama.cpp as the content source, the hash embedder (deterministic, so the replayed
requests are the recorded ones) and one call in flight at a time, issued in the scheduler's order (so
every call's modelled time, prefix-cache hits included, is independent of thread timing). Each run's
served_calls.jsonl is copied in, with the write-path table's rows as `expected.json`. The baselines are
left out: their prompts carry the wall-clock date, so a recording of theirs cannot be replayed on
another day."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from benchmarks.harness import runner, write_path
from benchmarks.harness.app import compose_config
from benchmarks.harness.results import write_json_atomic
from benchmarks.harness.schema import bench_config
from benchmarks.harness.simulation import SERVED_LOG

FIXTURES = Path(__file__).parent / "fixtures"
OUT = FIXTURES / "replay"
VARIANTS = {"all_families": "[session,entity,scene]", "session_only": "[session]"}


def overrides(output_root: Path, variant: str) -> list[str]:
    """The configuration of one recorded (or replayed) run."""
    return ["experiment=write_path", "llm=qwen3_30b_a3b_simulated", "method=memforest_embed",
            "dataset=longmemeval_s", f"dataset.path={FIXTURES / 'longmemeval_tiny.json'}",
            "dataset.limit=1", "embedder.backend=hash", "embedder.dim=64", "llm.concurrency=1",
            "llm.latency_model.client_concurrency=1",
            f"method.memforest.tree.families={VARIANTS[variant]}", f"output_root={output_root}",
            f"experiment_name=replay_{variant}", "progress=false"]


def main(argv: list[str]) -> int:
    work = Path(argv[0]) if argv else Path("results/replay_fixture")
    OUT.mkdir(parents=True, exist_ok=True)
    run_dirs = []
    for variant in VARIANTS:
        cfg = bench_config(compose_config(overrides(work, variant)))
        runner.run_benchmark(cfg)
        run_dirs.append(Path(cfg.run_dir))
        shutil.copyfile(Path(cfg.run_dir) / SERVED_LOG, OUT / f"{variant}.{SERVED_LOG}")
    data = write_path.table(run_dirs)
    keep = ("system", "turns", "llm_calls", "output_tokens", "modelled_critical_path_seconds",
            "llm_path_speedup_vs_slowest", "capped_calls", "served_calls", "output_caps")
    rows = {variant: {k: row[k] for k in keep} for variant, row in zip(VARIANTS, data["rows"])}
    write_json_atomic(OUT / "expected.json", rows)
    print(write_path.markdown(data))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
