"""Published accuracy beside a run's: the paper's figure for the same system and dataset, read from the
one file that holds the published values with each row's source (`analysis/published/accuracy.csv`,
overall pass@1 in percent per dataset, backbone, system and judge family).

A cell is filled only where the method and the dataset match a published row; it names the published
backbone (the run's own where it was published, else the paper's main one) and the judge family (`public`
for the LongMemEval and generous LoCoMo judges, `strict` for the strict one)."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

PUBLISHED_FILE = "published/accuracy.csv"  # inside the analysis package
MAIN_BACKBONE = "Qwen3-30B-A3B"
BACKBONES = {"qwen3_30b_a3b": "Qwen3-30B-A3B", "qwen3_4b": "Qwen3-4B", "gemma4_12b": "Gemma-4-12B-IT"}
JUDGE_FAMILY = {"longmemeval": "public", "locomo-generous": "public", "strict": "strict"}
DATASETS = {"longmemeval_s": "longmemeval_s", "locomo": "locomo"}  # run dataset -> published dataset


@dataclass(frozen=True)
class Published:
    """One published figure: overall accuracy in percent, its backbone, judge family and source."""

    dataset: str
    backbone: str
    system: str
    judge: str
    accuracy_pct: float
    source: str

    def cell(self) -> str:
        return f"{self.accuracy_pct:.1f}% ({self.backbone}, {self.judge} judge)"


@lru_cache(maxsize=1)
def published_rows() -> tuple[Published, ...]:
    """The overall accuracies of the published file (its per-category rows are left out)."""
    text = resources.files("analysis").joinpath(PUBLISHED_FILE).read_text(encoding="utf-8")
    return tuple(Published(r["dataset"], r["backbone"], r["system"], r["judge"], float(r["accuracy_pct"]),
                           r["source"])
                 for r in csv.DictReader(text.splitlines()) if r["category"] == "overall")


def backbone_of(llm_name: str) -> str | None:
    """The published name of a run's backbone config (`qwen3_4b_server` -> Qwen3-4B), None if unpublished."""
    base = llm_name
    for suffix in ("_server", "_simulated", "_fp8"):
        base = base.removesuffix(suffix)
    return BACKBONES.get(base)


def published_for(method: str, dataset: str, llm_name: str, judge_id: str | None) -> Published | None:
    """The published figure of `method` on `dataset` for the run's backbone (else the paper's main one)
    and judge family (else the public one); None where no published row has that method and dataset."""
    name = DATASETS.get(dataset)
    rows = [r for r in published_rows() if r.dataset == name and r.system == method]
    if not rows:
        return None
    family = JUDGE_FAMILY.get(str(judge_id), "public")
    backbone = backbone_of(llm_name)
    order = ((backbone, family), (backbone, "public"), (MAIN_BACKBONE, family), (MAIN_BACKBONE, "public"))
    for wanted in order:
        for row in rows:
            if (row.backbone, row.judge) == wanted:
                return row
    return None
