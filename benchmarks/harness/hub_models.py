"""Every hub model id the shipped configs and job scripts name, read from the config files themselves,
so that one download (slurm/setup_env.sh) fetches what any shipped run may load offline.

    python -m benchmarks.harness.hub_models          one id a line
    python -m benchmarks.harness.hub_models --where  each id with the options and scripts naming it

An id is a `model:` of an `llm` or `embedder` option that is neither a packaged model name nor a local
path (it has one `/` and does not start with `/`, `.` or `~`). Needs PyYAML only (no Hydra)."""

from __future__ import annotations

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


def hub_models(config_dir: Path = CONFIG_DIR) -> list[str]:
    """Every hub id the shipped options load, once, sorted."""
    return sorted(set(config_models(config_dir).values()))


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args not in ([], ["--where"]):
        print("usage: python -m benchmarks.harness.hub_models [--where]", file=sys.stderr)
        return 2
    try:
        by_option = config_models()
        scripts = script_options()
    except (ValueError, OSError, yaml.YAMLError) as exc:
        print(f"hub_models: {exc}", file=sys.stderr)
        return 2
    for model in sorted(set(by_option.values())):
        if not args:
            print(model)
            continue
        options = sorted(o for o, m in by_option.items() if m == model)
        named = sorted({s for o in options for s in scripts.get(o, ())})
        print(f"{model}\t{' '.join(options)}" + (f"\t({', '.join(named)})" if named else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
