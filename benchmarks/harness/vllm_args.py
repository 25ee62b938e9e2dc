"""`vllm serve` arguments for a model option of the harness's configs, one per line, so that a served
model runs with the model id, context length, memory share and engine arguments of its in-process
config (slurm/vllm_server.sbatch reads them):

    python -m benchmarks.harness.vllm_args llm=qwen3_30b_a3b
    python -m benchmarks.harness.vllm_args embedder=qwen3_embedding_0p6b

The backbone gets prefix caching as configured and `--enable-prompt-tokens-details`, without which
vLLM's server reports no cached prompt tokens.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.harness.app import compose_config
from benchmarks.harness.models import library_config
from benchmarks.harness.schema import bench_config
from memforest.config import EmbedderConfig, LLMConfig
from memforest.errors import ConfigError

USAGE = "usage: python -m benchmarks.harness.vllm_args llm=<option> | embedder=<option> [overrides...]"


def flags(engine_args: Mapping[str, Any]) -> list[str]:
    """vLLM command-line flags for engine arguments: `--name value`, mappings and lists as JSON,
    booleans as `--name` / `--no-name`."""
    out: list[str] = []
    for name, value in engine_args.items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            out.append(flag if value else "--no-" + flag[2:])
        elif isinstance(value, (dict, list)):
            out += [flag, json.dumps(value)]
        else:
            out += [flag, str(value)]
    return out


def llm_args(cfg: LLMConfig) -> list[str]:
    return [cfg.model, "--max-model-len", str(cfg.context_tokens),
            "--gpu-memory-utilization", str(cfg.gpu_memory_utilization),
            "--tensor-parallel-size", str(cfg.tensor_parallel_size), "--dtype", cfg.dtype, "--seed",
            str(cfg.seed),
            *flags({"enable_prefix_caching": cfg.enable_prefix_caching,
                    "enable_prompt_tokens_details": True}),
            *flags(cfg.engine_args)]


def embedder_args(cfg: EmbedderConfig) -> list[str]:
    from memforest.llm.embedders import pooling_args  # reads the installed vLLM's engine arguments

    return [cfg.model, *flags(pooling_args()), "--max-model-len", str(cfg.context_tokens),
            "--gpu-memory-utilization", str(cfg.gpu_memory_utilization), *flags(cfg.engine_args)]


def serve_args(overrides: Sequence[str]) -> list[str]:
    """The arguments for the one group (`llm` or `embedder`) chosen first in `overrides`."""
    groups = [o.split("=", 1)[0] for o in overrides if o.split("=", 1)[0] in ("llm", "embedder")]
    if not groups:
        raise ValueError(USAGE)
    cfg = bench_config(compose_config(overrides))
    if groups[0] == "llm":
        return llm_args(library_config(LLMConfig, cfg.llm))
    return embedder_args(library_config(EmbedderConfig, cfg.embedder))


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = serve_args(list(sys.argv[1:] if argv is None else argv))
    except (ValueError, ConfigError) as exc:
        print(exc, file=sys.stderr)
        return 2
    print("\n".join(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
