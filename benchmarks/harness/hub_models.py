"""Every hub model id the shipped configs and job scripts name, read from the config files themselves,
so that one download (slurm/setup_env.sh) fetches what any shipped run may load offline.

    python -m benchmarks.harness.hub_models               one id a line
    python -m benchmarks.harness.hub_models --where       each id with the options and scripts naming it
    python -m benchmarks.harness.hub_models --vllm 0.11   only the ids that vLLM version can run

An id is a `model:` of an `llm` or `embedder` option that is neither a packaged model name nor a local
path (it has one `/` and does not start with `/`, `.` or `~`). Which model needs which vLLM is MIN_VLLM,
below; `--vllm` leaves out the models that need a newer vLLM than the one given, naming them on stderr.
Needs PyYAML only (no Hydra, no vLLM)."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
CONFIG_DIR = REPO / "configs"
SLURM_DIR = REPO / "slurm"
GROUPS = ("llm", "embedder")
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
# `llm=NAME`, `embedder=NAME` and `MEMFOREST_LLM:-NAME`-style defaults in the job scripts
SCRIPT_OPTION = re.compile(r"\b(llm|embedder)=([A-Za-z0-9_]+)|MEMFOREST_(LLM|EMBEDDER):-([A-Za-z0-9_]+)")
# The oldest vLLM (major, minor) that runs a model, by the start of its hub id (case aside); any other
# model runs on every vLLM the wheel sets install (slurm/constraints-gpu*.txt: 0.11 and 0.33). Gemma 4's
# architecture (Gemma4ForConditionalGeneration) is in vLLM 0.33's model registry, not in 0.11's.
MIN_VLLM: dict[str, tuple[int, int]] = {"google/gemma-4-": (0, 33)}
VERSION = re.compile(r"^(\d+)\.(\d+)(?:[.+\w-]*)$")


def _node(group: str, option: str, config_dir: Path) -> dict[str, Any]:
    path = config_dir / group / f"{option}.yaml"
    if not path.is_file():
        raise ValueError(f"no {group} option {option!r} ({path} is missing)")
    loaded = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(loaded, dict):
        raise ValueError(f"{path}: not a mapping")
    return loaded


def option_model(group: str, option: str, config_dir: Path = CONFIG_DIR) -> str | None:
    """The `model` of option `option` of `group`, following its defaults list (the last one that sets
    it wins, the option's own value over all); None when nothing in the chain sets one."""
    node = _node(group, option, config_dir)
    if "model" in node:
        return str(node["model"])
    found = None
    for entry in node.get("defaults") or []:
        if isinstance(entry, str) and entry != "_self_" and (config_dir / group / f"{entry}.yaml").is_file():
            found = option_model(group, entry, config_dir) or found
    return found


def is_hub_id(model: str | None) -> bool:
    return bool(model) and HUB_ID.match(str(model)) is not None


def config_models(config_dir: Path = CONFIG_DIR) -> dict[str, str]:
    """`group/option` -> hub id, for every shipped option that loads a model by hub id."""
    out = {}
    for group in GROUPS:
        for path in sorted((config_dir / group).glob("*.yaml")):
            model = option_model(group, path.stem, config_dir)
            if model is not None and is_hub_id(model):
                out[f"{group}/{path.stem}"] = model
    return out


def script_options(slurm_dir: Path = SLURM_DIR) -> dict[str, set[str]]:
    """`group/option` -> the job scripts that name it (in a command, a default or a suggestion)."""
    out: dict[str, set[str]] = {}
    for path in sorted(slurm_dir.iterdir()):
        if path.suffix not in (".sh", ".sbatch"):
            continue
        for match in SCRIPT_OPTION.finditer(path.read_text(encoding="utf-8")):
            group = (match.group(1) or match.group(3)).lower()
            option = match.group(2) or match.group(4)
            out.setdefault(f"{group}/{option}", set()).add(path.name)
    return out


def vllm_version(text: str) -> tuple[int, int]:
    """(major, minor) of a vLLM version: "0.11", "0.11.0", "0.33.2rc1" and the like."""
    match = VERSION.match(text.strip())
    if match is None:
        raise ValueError(f"not a vLLM version: {text!r} (e.g. 0.11 or 0.33.0)")
    return int(match.group(1)), int(match.group(2))


def min_vllm(model: str) -> tuple[int, int] | None:
    """The oldest vLLM that runs `model`, where MIN_VLLM names one."""
    found = [need for prefix, need in MIN_VLLM.items() if model.lower().startswith(prefix.lower())]
    return max(found) if found else None


def runs_on(model: str, vllm: str) -> bool:
    need = min_vllm(model)
    return need is None or vllm_version(vllm) >= need


def hub_models(config_dir: Path = CONFIG_DIR, vllm: str | None = None) -> list[str]:
    """Every hub id the shipped options load, once, sorted; with `vllm`, only those it runs."""
    models = set(config_models(config_dir).values())
    return sorted(m for m in models if vllm is None or runs_on(m, vllm))


def _arguments(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.harness.hub_models")
    parser.add_argument("--where", action="store_true",
                        help="each id with the options and job scripts naming it")
    parser.add_argument("--vllm", metavar="VERSION", help="only the ids this vLLM version runs, e.g. 0.11")
    return parser.parse_args(argv)


def _shown(model: str, by_option: dict[str, str], scripts: dict[str, set[str]]) -> str:
    options = sorted(o for o, m in by_option.items() if m == model)
    named = sorted({s for o in options for s in scripts.get(o, ())})
    need = min_vllm(model)
    return (f"{model}\t{' '.join(options)}" + (f"\t({', '.join(named)})" if named else "")
            + (f"\t(vLLM >= {need[0]}.{need[1]})" if need else ""))


def main(argv: Sequence[str] | None = None) -> int:
    args = _arguments(sys.argv[1:] if argv is None else argv)  # exits 2 on a bad argument
    try:
        if args.vllm is not None:
            vllm_version(args.vllm)
        by_option = config_models()
        scripts = script_options()
    except (ValueError, OSError, yaml.YAMLError) as exc:
        print(f"hub_models: {exc}", file=sys.stderr)
        return 2
    for model in sorted(set(by_option.values())):
        need = min_vllm(model)
        if args.vllm is not None and need is not None and vllm_version(args.vllm) < need:
            print(f"hub_models: left out {model}: needs vLLM >= {need[0]}.{need[1]}, not {args.vllm}",
                  file=sys.stderr)
            continue
        print(_shown(model, by_option, scripts) if args.where else model)
    return 0


if __name__ == "__main__":
    sys.exit(main())
