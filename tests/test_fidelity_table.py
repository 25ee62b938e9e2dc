"""baselines/README.md's fidelity table has a row for every method option (configs/method, bases `_*`
left out): a row names its methods in backticks in its first cell, or is titled by the method's name."""

from __future__ import annotations

import re
from pathlib import Path

from benchmarks.harness.app import CONFIG_DIR

README = Path(__file__).resolve().parents[1] / "baselines" / "README.md"
HEADING = "## Fidelity"


def method_options() -> list[str]:
    return sorted(p.stem for p in (CONFIG_DIR / "method").glob("*.yaml") if not p.stem.startswith("_"))


def fidelity_rows(text: str) -> list[list[str]]:
    """The cells of each body row of the first table under the fidelity heading."""
    section = text[text.index(HEADING):]
    section = section[: section.find("\n## ", len(HEADING))] if "\n## " in section[len(HEADING):] else section
    lines = [line for line in section.splitlines() if line.startswith("|")]
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines[2:]]


def methods_of(first_cell: str) -> set[str]:
    return set(re.findall(r"`([a-z0-9_]+)`", first_cell)) | {first_cell.lower()}


def test_fidelity_rows_are_parsed() -> None:
    rows = fidelity_rows("# x\n## Fidelity: t\n\n| System | a |\n|---|---|\n| Mem0 (`mem0`) | x |\n"
                         "| flat_rag | y |\n\n## Next\n| other | z |\n")
    assert [r[0] for r in rows] == ["Mem0 (`mem0`)", "flat_rag"]
    assert methods_of("MemForest (`memforest_embed`, `memforest_planner`)") >= {"memforest_embed",
                                                                               "memforest_planner"}
    assert "memoryos" in methods_of("MemoryOS")


def test_every_method_option_has_a_fidelity_row() -> None:
    rows = fidelity_rows(README.read_text())
    assert rows and all(len(r) == len(rows[0]) for r in rows), "a fidelity row has a wrong number of cells"
    named = set().union(*(methods_of(r[0]) for r in rows))
    missing = [m for m in method_options() if m not in named]
    assert not missing, f"baselines/README.md's fidelity table has no row for {missing}"


def test_every_fidelity_row_names_its_upstream_and_deviations() -> None:
    for cells in fidelity_rows(README.read_text()):
        assert all(cells[:4]), f"an empty cell in the fidelity row {cells[0]!r}"
