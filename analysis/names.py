"""Display names of systems, backbones, categories and settings, and the published data files."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

PUBLISHED_DIR = Path(__file__).parent / "published"

SYSTEMS = {
    "memforest": "MemForest",
    "memforest_embed": "MemForest (Embed)",
    "memforest_planner": "MemForest (Planner)",
    "memforest_sessions": "MemForest (no generator)",
    "mem0": "Mem0",
    "mem0_additive": "Mem0 2.x",
    "mem0_additive_mb": "Mem0 2.x (memory-benchmarks)",
    "memoryos": "MemoryOS",
    "mempalace": "MemPalace",
    "zep_local": "Zep Local",
    "lightmem": "LightMem",
    "evermemos": "EverMemOS",
    "flat_rag": "Flat RAG",
    "flat_sessions": "Flat sessions",
    "full_context": "Full context",
}
BACKBONES = {
    "qwen3_30b_a3b": "Qwen3-30B-A3B",
    "qwen3_4b": "Qwen3-4B",
    "gemma4_12b": "Gemma-4-12B-IT",
    "smollm2_cpu": "SmolLM2-135M (CPU)",
    "scripted": "scripted test model",
}
PAPER_BACKBONE = "Qwen3-30B-A3B"  # the published column shown when a run's backbone has no published value
LME_CATEGORIES = ["single-session-user", "single-session-preference", "single-session-assistant",
                  "knowledge-update", "multi-session", "temporal-reasoning"]
LOCOMO_CATEGORIES = ["multi-hop", "temporal", "open-domain", "single-hop"]  # official categories 1-4
LOCOMO_CATEGORY_IDS = {"multi-hop": 1, "temporal": 2, "open-domain": 3, "single-hop": 4, "adversarial": 5}
QUERY_MODES = {
    "flat": "flat top-k facts (no trees)",
    "root": "root summaries only",
    "embed": "embedding browse",
    "embed_planner": "embedding browse + planner",
    "llm": "LLM browse",
    "planner": "LLM browse + planner",
}
# our judge id -> the published judge its criteria are closest to
PUBLISHED_JUDGE = {"strict": "strict", "locomo-generous": "public", "longmemeval": "public"}


def system_name(method: str) -> str:
    return SYSTEMS.get(method, method)


def family(method: str) -> str:
    """The system a method belongs to: every MemForest mode shares one write path."""
    return "memforest" if method.startswith("memforest") else method


def backbone_name(backbone: str | None) -> str:
    if not backbone:
        return "?"
    base = backbone.removesuffix("_server").removesuffix("_simulated")
    name = BACKBONES.get(base, backbone)
    return f"{name}, latency model" if backbone.endswith("_simulated") and base in BACKBONES else name


def published_backbone(backbone: str | None) -> str:
    """The published backbone matching a run's backbone, else the paper's main one."""
    name = backbone_name(backbone).removesuffix(", latency model")
    return name if name in ("Qwen3-30B-A3B", "Qwen3-4B", "Gemma-4-12B-IT") else PAPER_BACKBONE


def paper_dataset(kind: object, dataset: object) -> str:
    """The published dataset a run's results sit beside: LongMemEval-S for any LongMemEval-shaped data."""
    text = f"{kind or ''} {dataset or ''}".lower()
    return "locomo" if "locomo" in text else "longmemeval_s"


def published(name: str) -> pd.DataFrame:
    """A published-values file (analysis/published/<name>.csv), every row with its `source`."""
    return pd.read_csv(PUBLISHED_DIR / f"{name}.csv", dtype={"chunk_turns": str})


def families_label(families: object) -> str:
    """Tree families as the published tables name them: sorted, joined with '+'."""
    if isinstance(families, str):
        parts = [p for p in families.replace(",", "+").split("+") if p]
    elif isinstance(families, (list, tuple)):
        parts = [str(p) for p in families]
    else:
        return "entity+scene+session"  # the default: every family
    return "+".join(sorted(parts))
