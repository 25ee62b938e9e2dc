"""Tree-family ablation (the paper's Table 6): which of the session, entity and scene tree families
are built (`method.memforest.tree.families`), scored on the 60-question LongMemEval-S subset."""

from __future__ import annotations

from pathlib import Path

from analysis.artifacts import ablation
from analysis.load import Results
from analysis.names import families_label, published

EXPERIMENTS = ("ablation_families", "ablation_tree_families")


def spec() -> ablation.Ablation:
    pub = published("ablation_tree_families").rename(columns={"families": "setting"})
    return ablation.Ablation(
        name="ablation_tree_families", title="Tree-family ablation", experiments=EXPERIMENTS,
        key="method.memforest.tree.families", published=pub, label=families_label, display={},
        note="Settings name the tree families built; facts are extracted and indexed in every setting.")


def make(results: Results, out: Path) -> list[Path]:
    return ablation.make(spec(), results, out)
