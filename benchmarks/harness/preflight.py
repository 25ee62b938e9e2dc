"""The GPU preflight as a command: checks this node before anything heavy starts (benchmarks.harness.
gpu_node: the NVIDIA driver against the CUDA the installed torch was built for, a GPU visible, free memory
for the configured shares, writable caches), one line per problem that says what to do.

    python -m benchmarks.harness.preflight [--share F ...] [--engines N] [--config] [OVERRIDES ...]

With `--config` or Hydra overrides (`llm=qwen3_30b_a3b embedder=qwen3_embedding_0p6b`) the memory shares
are those of the composed configuration's GPU backends (none: nothing to check, exit 0); `--share` adds
one share by hand (no Hydra needed). Exit 0 when every check passes, 1 with one line per problem, 2 on
bad arguments."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from benchmarks.harness.gpu_node import OVERHEAD_GIB, gather, gpu_shares, problems
from memforest.errors import error_line


def _configured_shares(overrides: Sequence[str]) -> tuple[list[float], int]:
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
    return gpu_shares(cfg.llm, cfg.embedder)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.harness.preflight", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--share", type=float, action="append", default=[],
                        help="one engine's vLLM memory share (gpu_memory_utilization), repeatable")
    parser.add_argument("--engines", type=int, default=None,
                        help="engine processes (default: one per share, at least one)")
    parser.add_argument("--overhead-gib", type=float, default=OVERHEAD_GIB)
    parser.add_argument("--config", action="store_true",
                        help="add the shares of the composed configuration (implied by overrides)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides naming the llm and embedder")
    args = parser.parse_args(argv)
    shares, engines = list(args.share), args.engines
    if args.config or args.overrides:
        try:
            configured, configured_engines = _configured_shares(args.overrides)
        except ValueError as exc:
            print(f"preflight: {exc}", file=sys.stderr)
            return 2
        if not configured_engines and not shares and engines is None:
            print("preflight: the configuration runs nothing on a GPU; nothing to check")
            return 0
        shares += configured
        engines = engines if engines is not None else len(args.share) + configured_engines
    node = gather()
    found = problems(node, shares, engines, args.overhead_gib)
    for line in found:
        print(f"preflight: {line}", file=sys.stderr)
    if found:
        return 1
    gpu = node.gpus[0] if node.gpus else None
    print("preflight: ok" + (f" ({gpu.name}, driver {gpu.driver}, {gpu.free_mib / 1024:.1f} GiB free)"
                             if gpu else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
