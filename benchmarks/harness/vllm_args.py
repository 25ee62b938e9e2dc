"""`vllm serve` arguments for a model option of the harness's configs, one per line, the model id
first, so that a served model runs with the model id, context length, memory share and engine arguments
of its in-process config:

    python -m benchmarks.harness.vllm_args llm=qwen3_30b_a3b
    python -m benchmarks.harness.vllm_args --out FILE embedder=qwen3_embedding_0p6b

With `--out FILE` the arguments go to FILE, written whole or not at all (slurm/vllm_server.sbatch reads
them from there); otherwise to stdout. Either way nothing else reaches them: the embedder's arguments
import vLLM, which may log to stdout as it loads (0.11 does), and what the imports print goes to stderr
instead; native code writing to the stdout descriptor itself would still reach stdout, not the file.

The backbone gets prefix caching as configured and `--enable-prompt-tokens-details`, without which
vLLM's server reports no cached prompt tokens.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.harness.app import compose_config
from benchmarks.harness.models import library_config
from benchmarks.harness.schema import bench_config
from memforest.config import EmbedderConfig, LLMConfig
from memforest.errors import ConfigError

USAGE = ("usage: python -m benchmarks.harness.vllm_args [--out FILE] llm=<option> | embedder=<option> "
         "[overrides...]")


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


def write_lines(path: Path, lines: Sequence[str]) -> None:
    """`lines` into `path`, one a line, replacing it at once: a reader finds the old file or the new one,
    never a part."""
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=path.parent, prefix=f".{path.name}.",
                                     delete=False) as tmp:
        try:
            tmp.write("".join(f"{line}\n" for line in lines))
        except BaseException:
            os.unlink(tmp.name)
            raise
    os.replace(tmp.name, path)


def split_out(argv: Sequence[str]) -> tuple[Path | None, list[str]]:
    """(`--out` FILE or None, the overrides)."""
    args = list(argv)
    if "--out" not in args:
        return None, args
    at = args.index("--out")
    if at + 1 == len(args):
        raise ValueError(USAGE)
    return Path(args[at + 1]), args[:at] + args[at + 2:]


def main(argv: Sequence[str] | None = None) -> int:
    try:
        out, overrides = split_out(sys.argv[1:] if argv is None else argv)
        with contextlib.redirect_stdout(sys.stderr):  # vLLM's log lines at import are not arguments
            args = serve_args(overrides)
    except (ValueError, ConfigError) as exc:
        print(exc, file=sys.stderr)
        return 2
    if out is None:
        print("\n".join(args))
    else:
        write_lines(out, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
