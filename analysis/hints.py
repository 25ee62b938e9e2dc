"""What fills a missing artifact: for each artifact with no run of its experiments in the results, the
command that would produce one (a CPU command from `make paper-runs` where a CPU can honestly run it, else
a GPU job under `slurm/`). `python -m analysis` prints them after writing the artifacts."""

from __future__ import annotations

from collections.abc import Iterable

from analysis.load import Results

GPU_RUN = ("sbatch slurm/memforest_bench.sbatch {args} dataset.path=/data/longmemeval_s_cleaned.json "
           "llm=qwen3_30b_a3b embedder=qwen3_embedding_0p6b")
GPU_SWEEP = (".venv-gpu/bin/memforest-bench -m hydra/launcher=slurm {args} "
             "dataset.path=/data/longmemeval_s_cleaned.json llm=qwen3_30b_a3b embedder=qwen3_embedding_0p6b")

# artifact -> (experiments whose runs fill it, the command that runs one)
FILLED_BY: dict[str, tuple[tuple[str, ...], str]] = {
    "write_path": (("write_path",), "make paper-runs (simulated, CPU); on GPUs: "
                   + GPU_SWEEP.format(args="experiment=write_path dataset=longmemeval_s dataset.limit=1")),
    "stage_breakdown": (("stage_breakdown", "write_path"), "make paper-runs (simulated, CPU); on GPUs: "
                        + GPU_RUN.format(args="experiment=stage_breakdown dataset=longmemeval_s")),
    "query_latency": (("query_latency",),
                      GPU_SWEEP.format(args="experiment=query_latency dataset=longmemeval_s")),
    "accuracy": (("accuracy", "main"), GPU_SWEEP.format(args="experiment=accuracy dataset=longmemeval_s")
                 + " (Tables 6/7: again with llm=qwen3_4b and llm=gemma4_12b)"),
    "passk": (("passk",), GPU_SWEEP.format(args="experiment=passk dataset=longmemeval_s "
                                               "method=memforest_embed,mem0")),
    "migration": (("migration",), GPU_SWEEP.format(args="experiment=migration dataset=longmemeval_s")
                  + " (on the CPU: llm=qwen3_30b_a3b_simulated)"),
    "mechanism_scaling": (("scaling",), GPU_SWEEP.format(args="experiment=scaling dataset=longmemeval_s")
                          + " (on the CPU: python -m benchmarks.micro)"),
    "evidence_budget": (("evidence_budget", "evidence_budget_recall"), "make paper-runs (recall, CPU); "
                        "accuracy on GPUs: " + GPU_SWEEP.format(args="experiment=evidence_budget "
                                                                   "dataset=longmemeval_s")),
    "chunk_size": (("chunk_size", "chunk_size_recall"), "make paper-runs (recall, CPU); extraction on GPUs: "
                   + GPU_SWEEP.format(args="experiment=chunk_size dataset=longmemeval_s")),
    "ablation_tree_families": (("ablation_families", "ablation_tree_families"),
                               GPU_SWEEP.format(args="experiment=ablation_families dataset=longmemeval_s")),
    "ablation_retrieval": (("ablation_retrieval", "retrieval_ablation", "ablation_retrieval_recall"),
                           "make paper-runs (generator-free modes, recall, CPU); all six modes on GPUs: "
                           + GPU_SWEEP.format(args="experiment=ablation_retrieval dataset=longmemeval_s")),
}
# microbenchmark suites that fill an artifact too
FILLED_BY_BENCH = {"migration": ("merge_speed",), "mechanism_scaling": ("refresh_calls", "level_parallel")}


def missing(results: Results, artifacts: Iterable[str]) -> dict[str, str]:
    """Artifact -> the command that would fill it, for the artifacts with no run of their experiments."""
    runs = results.runs
    present = set(runs["experiment"]) if len(runs) else set()
    out = {}
    for name in artifacts:
        experiments, command = FILLED_BY.get(name, ((), ""))
        benched = any(len(results.bench(suite)) for suite in FILLED_BY_BENCH.get(name, ()))
        if experiments and not present & set(experiments) and not benched:
            out[name] = command
    return out
