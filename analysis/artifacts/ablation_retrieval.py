"""Retrieval ablation (the paper's Table 7): the six retrieval settings (`method.memforest.query.mode`:
flat top-k facts, root summaries only, embedding browse, embedding browse + planner, LLM browse, LLM
browse + planner), scored on the 60-question LongMemEval-S subset."""

from __future__ import annotations

from pathlib import Path

from analysis.artifacts import ablation
from analysis.load import Results
from analysis.names import QUERY_MODES, published

EXPERIMENTS = ("ablation_retrieval", "retrieval_ablation")


def spec() -> ablation.Ablation:
    pub = published("ablation_retrieval").rename(columns={"mode": "setting"})
    return ablation.Ablation(
        name="ablation_retrieval", title="Retrieval ablation", experiments=EXPERIMENTS,
        key="method.memforest.query.mode", published=pub, label=lambda v: str(v or "embed"),
        display=QUERY_MODES, default="embed")


def make(results: Results, out: Path) -> list[Path]:
    return ablation.make(spec(), results, out)
