"""The GPU preflight as a command: checks this node before anything heavy starts (benchmarks.harness.
gpu_node: the NVIDIA driver against the CUDA the installed torch was built for, the GPUs
CUDA_VISIBLE_DEVICES leaves visible against those the run spreads over, free memory for the configured
shares on each, a C compiler and Python.h for vLLM's Triton kernels, writable caches), one line per
problem that says what to do, and a warning line for what may fail later (a proxy that node-local or
cross-node HTTP would go through).

    python -m benchmarks.harness.preflight [--share F ...] [--engines N] [--tensor-parallel N] [--config]
                                           [OVERRIDES ...]

With `--config` or Hydra overrides (`llm=qwen3_30b_a3b embedder=qwen3_embedding_0p6b`) what each GPU
holds (the shares and processes; the llm's tensor parallelism, an embedder on `cuda:1`) and whether the
hub cache must be there come from the composed configuration's GPU backends (none: nothing to check,
exit 0); `--share` adds one share on the first GPU by hand (no Hydra needed; without a configuration the
hub cache is checked). torch is asked in a child interpreter, never imported here. Exit 0 when every
check passes (warnings printed or not), 1 with one line per problem, 2 on bad arguments."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from benchmarks.harness.gpu_demand import Demand, demand
from benchmarks.harness.gpu_node import OVERHEAD_GIB, Node, check, gather, warnings
from memforest.errors import error_line


def _configured(overrides: Sequence[str]) -> Demand:
    try:
        from benchmarks.harness.app import compose_config
        from benchmarks.harness.schema import bench_config
    except ImportError as exc:
        raise ValueError(f"overrides need the harness's Hydra ({exc.name} is missing): pass --share "
                         f"instead") from exc
    try:
        cfg = bench_config(compose_config(overrides))
    except Exception as exc:  # Hydra's composition errors have no common base class
        raise ValueError(error_line(exc)) from exc
    return demand(cfg.llm, cfg.embedder)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.harness.preflight", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--share", type=float, action="append", default=[],
                        help="one engine's vLLM memory share (gpu_memory_utilization), repeatable")
    parser.add_argument("--engines", type=int, default=None,
                        help="engine processes of the --share shares (default: one per share; with no "
                        "share and no configuration, one)")
    parser.add_argument("--tensor-parallel", type=int, default=1,
                        help="GPUs the llm of the first --share spans (a configuration brings its own)")
    parser.add_argument("--overhead-gib", type=float, default=OVERHEAD_GIB)
    parser.add_argument("--config", action="store_true",
                        help="add the shares of the composed configuration (implied by overrides)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides naming the llm and embedder")
    return parser


def _asked(args: argparse.Namespace) -> Demand | None:
    """What the arguments ask of the node; None when the configuration runs nothing on a GPU."""
    if not (args.config or args.overrides):
        return Demand.by_hand(args.share, args.engines, args.tensor_parallel)
    configured = _configured(args.overrides)
    if not configured.gpus and not args.share and args.engines is None:
        return None
    return configured.plus(args.share, len(args.share) if args.engines is None else args.engines)


def _ok_line(node: Node) -> str:
    gpu = next(iter(node.visible() or []), None)
    shown = [gpu.name] if gpu else []
    shown += [f"driver {gpu.driver}"] if gpu and gpu.driver else []
    shown += [f"{gpu.free_mib / 1024:.1f} GiB free"] if gpu and gpu.free_mib is not None else []
    return "preflight: ok" + (f" ({', '.join(shown)})" if shown else "")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        asked = _asked(args)
    except ValueError as exc:
        print(f"preflight: {exc}", file=sys.stderr)
        return 2
    if asked is None:
        print("preflight: the configuration runs nothing on a GPU; nothing to check")
        return 0
    node = gather()
    found = check(node, asked, args.overhead_gib)
    for line in warnings(node, len(asked.gpus)):
        print(f"preflight warning: {line}", file=sys.stderr)
    for line in found:
        print(f"preflight: {line}", file=sys.stderr)
    if found:
        return 1
    print(_ok_line(node))
    return 0


if __name__ == "__main__":
    sys.exit(main())
