"""Regenerate tests/fixtures/paper_results/: tiny runs of every paper experiment with the real harness
(scripted model, hash embedder, the shipped sample and the tiny LoCoMo fixture), real microbenchmark
records, then minimised (stores, vector caches and call logs dropped; record contexts cut).

    PYTHONPATH=.:tests python tests/make_paper_fixture.py [OUT]

Needs the paper experiment configs, the harness's migration and scaling tasks, the library's ablation
switches and the latency-model backbone (`qwen3_30b_a3b_simulated`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
FAKE = ["llm.backend=scripted", "llm.responder=responders:harness_responder", "embedder.backend=hash",
        "embedder.dim=64", "progress=false", "keep_stores=false"]
SIMULATED = ["llm=qwen3_30b_a3b_simulated", "llm.latency_model.ttft_base_s=0.002",
             "llm.latency_model.decode_s_per_token=0.0001"]
LOCOMO = ["dataset=locomo", f"dataset.path={FIXTURES / 'locomo_tiny.json'}"]
CONTEXT_CHARS = 200
HAND_WRITTEN = ("README.md",)  # kept across regenerations


def bench(out: Path, *overrides: str, sweep: bool = False) -> None:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    args = [sys.executable, "-m", "benchmarks.harness.app", *(["-m"] if sweep else []), *FAKE,
            f"output_root={out}", f"hydra.run.dir={out}/hydra/run", f"hydra.sweep.dir={out}/hydra/sweep",
            *overrides]
    subprocess.run(args, check=True, env=env, cwd=ROOT, stdout=subprocess.DEVNULL)


def micro(name: str, rows: Any, seconds: float, **extra: Any) -> None:
    path = OUT / "bench" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"suite": name, "seconds": round(seconds, 1), **extra, "result": rows},
                               indent=1) + "\n")


def refresh_call_counts(fanouts: tuple[int, ...] = (3, 8, 16),
                        sizes: tuple[int, ...] = (100, 1000)) -> list[dict]:
    """Summary refreshes (dirty internal nodes; leaves need none) when every insert refreshes its dirty
    path (eager) versus one refresh of the union of dirty nodes after all inserts (batched); pure
    MemTree, no model."""
    from memforest.trees.memtree import MemTree

    rows = []
    for fanout in fanouts:
        for size in sizes:
            eager_tree, batched_tree = MemTree("eager", fanout), MemTree("batched", fanout)
            eager = 0
            for i in range(size):
                eager_tree.insert(f"f{i}", float(i))
                eager += internal(eager_tree.take_dirty())
                batched_tree.insert(f"f{i}", float(i))
            batched = internal(batched_tree.take_dirty())
            rows.append({"fanout": fanout, "facts": size, "eager_calls": eager, "batched_calls": batched})
    return rows


def internal(dirty: dict[int, list[int]]) -> int:
    return sum(len(ids) for level, ids in dirty.items() if level >= 1)


def microbenchmarks() -> None:
    sys.path[:0] = [str(ROOT)]
    from benchmarks.micro import retrieval_latency

    t = time.perf_counter()
    micro("retrieval_latency", retrieval_latency.main(["--forests", "1,2,4,8", "--queries", "30"]),
          time.perf_counter() - t)
    t = time.perf_counter()
    micro("refresh_calls", refresh_call_counts(), time.perf_counter() - t)


def experiments() -> None:
    """Each paper experiment through its own config (configs/experiment/), shrunk to the sample."""
    small, stores = "dataset.limit=2", "keep_stores=true"  # sweeps that reuse a first run's stores keep them
    bench(OUT, "experiment=write_path", "method=memforest_embed,memforest_planner", small, sweep=True)
    bench(OUT, "experiment=write_path", "method=memforest_embed", small, *SIMULATED)
    bench(OUT, "experiment=stage_breakdown", "method=memforest_embed", small)
    bench(OUT, "experiment=query_latency", "dataset.compose=1,2", small, sweep=True)
    for method in ("memforest_embed", "memforest_planner"):
        bench(OUT, "experiment=accuracy", f"method={method}", "dataset=sample")
    bench(OUT, "experiment=accuracy", "method=memforest_embed", *LOCOMO)
    rejudge(OUT / "accuracy/sample/memforest_embed/smollm2_cpu/seed0")
    bench(OUT, "experiment=passk", "method=memforest_embed", *LOCOMO)
    bench(OUT, "experiment=migration", "method=memforest_embed", "task_options.max_n=4")
    bench(OUT, "experiment=scaling", "method=memforest_embed", "task_options.parallelism=[1,2,4,8,16]")
    bench(OUT, "experiment=evidence_budget", "method.memforest.query.final_units=5,10,20", small, stores,
          sweep=True)
    bench(OUT, "experiment=chunk_size", "method.memforest.chunk.max_turns=1,2,0", small, sweep=True)
    subset = ["dataset.subset=null", "dataset.limit=3", "attempts=2"]  # the sample holds none of the 60 ids
    bench(OUT, "experiment=ablation_families",
          "method.memforest.tree.families=[session],[entity],[session,entity,scene]", *subset, sweep=True)
    bench(OUT, "experiment=ablation_retrieval", *subset, stores, sweep=True)


def rejudge(run_dir: Path) -> None:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"}
    subprocess.run([sys.executable, "-m", "benchmarks.harness.app", "judge", str(run_dir), "judge=strict",
                    "llm.backend=scripted", "llm.responder=responders:harness_responder"],
                   check=True, env=env, cwd=ROOT, stdout=subprocess.DEVNULL)


def minimise(out: Path) -> None:
    """Drop what the analysis never reads; cut each record's context (its evidence list stays whole:
    the evidence count is a measurement)."""
    shutil.rmtree(out / "hydra", ignore_errors=True)
    for run_json in out.rglob("run.json"):
        run = run_json.parent
        for name in ("stores", "embeddings"):
            shutil.rmtree(run / name, ignore_errors=True)
        for name in ("llm_calls.jsonl", "served_calls.jsonl", "summary.md"):
            (run / name).unlink(missing_ok=True)
        records = run / "records.jsonl"
        if records.exists():
            rows = [json.loads(line) for line in records.read_text().splitlines() if line.strip()]
            for row in rows:
                row["context"] = str(row.get("context", ""))[:CONTEXT_CHARS]
            records.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


if __name__ == "__main__":
    OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else FIXTURES / "paper_results"
    kept = {p: p.read_text() for p in (OUT / name for name in HAND_WRITTEN) if p.exists()}
    shutil.rmtree(OUT, ignore_errors=True)
    experiments()
    microbenchmarks()
    for path, text in kept.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    minimise(OUT)
    print(f"fixture written to {OUT}")
