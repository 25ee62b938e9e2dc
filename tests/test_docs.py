"""The user guide stays true: README.md is short and links every page of docs/; every relative link of
README.md and docs/*.md points to a file that exists; the commands they show name subcommands, make
targets and config options that exist; and every method whose adapter lives in `baselines/` is wired
into each place docs/adding-a-system.md lists."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from benchmarks.harness.app import CONFIG_DIR, compose_config
from memforest.cli import build_parser

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
GUIDE = REPO / "docs" / "adding-a-system.md"
PAGES = ["docs/performance.md", "docs/paper.md", "docs/cluster.md", "docs/adding-a-system.md",
         "docs/configuration.md", "CHANGELOG.md"]
MAX_README_LINES = 500
INDEPENDENCE = "each baseline adapter stands alone"
BENCH_SUBCOMMANDS = {"judge", "compare", "report", "data", "write-path"}
GROUPS = ("method", "dataset", "llm", "embedder", "judge", "budget", "experiment", "hydra/launcher")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)


def documents() -> list[Path]:
    return [README, *sorted((REPO / "docs").glob("*.md"))]


def relative_links(text: str) -> list[str]:
    """The link targets of `text` outside fenced code that name a file of this repository (no scheme, not
    an anchor alone), without their anchors."""
    out = []
    for target in LINK.findall(FENCE.sub("", text)):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        out.append(target.split("#", 1)[0])
    return out


def code_lines(text: str) -> list[str]:
    """The lines of the fenced code blocks of `text`."""
    return [line for block in FENCE.findall(text) for line in block.splitlines()[1:-1]]


def test_link_and_code_helpers() -> None:
    text = ("See [a](docs/a.md#x), [b](https://x.org), [c](#local) and [d](../e.md).\n"
            "```\nmemforest-bench data dataset=sample [f](ignored.md)\n```\n")
    assert relative_links(text) == ["docs/a.md", "../e.md"]
    assert code_lines(text) == ["memforest-bench data dataset=sample [f](ignored.md)"]


def test_readme_is_a_guide_of_at_most_500_lines() -> None:
    lines = len(README.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines; move detail into docs/"


def test_readme_links_every_page_of_the_guide() -> None:
    links = set(relative_links(README.read_text(encoding="utf-8")))
    for page in PAGES:
        assert (REPO / page).is_file(), f"{page} is missing"
        assert page in links, f"README.md does not link {page}"


@pytest.mark.parametrize("doc", documents(), ids=lambda p: p.name)
def test_every_relative_link_points_to_a_file(doc: Path) -> None:
    broken = [t for t in relative_links(doc.read_text(encoding="utf-8")) if not (doc.parent / t).exists()]
    assert not broken, f"{doc.relative_to(REPO)} links to missing files: {broken}"


def make_targets() -> set[str]:
    text = (REPO / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([a-z][a-z-]*):", text, re.MULTILINE))


def cli_commands() -> set[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return set(sub.choices)  # type: ignore[arg-type]


@pytest.mark.parametrize("doc", documents(), ids=lambda p: p.name)
def test_commands_name_what_exists(doc: Path) -> None:
    """In the code blocks: `make X` targets, `memforest X` and `memforest-bench X` subcommands, and each
    `group=option` of a config group (every option of a comma list) exist."""
    wrong = []
    targets, commands = make_targets(), cli_commands()
    for line in code_lines(doc.read_text(encoding="utf-8")):
        line = line.split(" #", 1)[0]  # a comment names no command
        for target in re.findall(r"^\s*make ([a-z][a-z-]*)", line):
            wrong += [] if target in targets else [f"make {target}"]
        for command in re.findall(r"^\s*memforest ([a-z][a-z-]*)", line):
            wrong += [] if command in commands else [f"memforest {command}"]
        for command in re.findall(r"^\s*(?:\S*/)?memforest-bench ([a-z][a-z-]*)(?=\s|$)", line):
            wrong += [] if command in BENCH_SUBCOMMANDS else [f"memforest-bench {command}"]
        for group, values in re.findall(r"(?:^|\s)\+?(" + "|".join(GROUPS) + r")=(\S+)", line):
            for value in values.split(","):
                if "..." in value or "<" in value or "$" in value:
                    continue
                if not (CONFIG_DIR / group / f"{value}.yaml").is_file():
                    wrong.append(f"{group}={value}")
    assert not wrong, f"{doc.relative_to(REPO)} shows what does not exist: {sorted(set(wrong))}"


# ---------------------------------------------------------------- adding a system: every place wired


def method_targets() -> dict[str, str]:
    """Method option -> its adapter's `_target_`, for the options whose adapter lives in `baselines/`."""
    out = {}
    for path in sorted((CONFIG_DIR / "method").glob("*.yaml")):
        if path.stem.startswith("_"):
            continue
        target = str(compose_config([f"method={path.stem}"]).method.system["_target_"])
        if target.startswith("baselines."):
            out[path.stem] = target
    return out


METHODS = method_targets()


def independent_modules() -> list[str]:
    """The modules of pyproject.toml's independence contract (read as text: tomllib needs Python 3.11)."""
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    contract = text[text.index(f'name = "{INDEPENDENCE}'):]
    contract = contract[:contract.find("[[", 1)] if "[[" in contract else contract
    return re.findall(r'"(baselines\.[a-z0-9_.]+)"', contract)


def documented_methods() -> set[str]:
    """Method names in backticks in the first cell of a table row of the guide or of the README."""
    names: set[str] = set()
    for doc in (GUIDE, README):
        for line in doc.read_text(encoding="utf-8").splitlines():
            if line.startswith("|"):
                names |= set(re.findall(r"`([a-z0-9_]+)`", line.strip("|").split("|")[0]))
    return names


def test_every_adapter_method_is_checked() -> None:
    assert {"mem0", "mempalace", "flat_sessions", "memforest_embed"} <= set(METHODS)


@pytest.mark.parametrize("method", sorted(METHODS))
def test_a_methods_adapter_is_wired_into_every_place_the_guide_lists(method: str) -> None:
    target = METHODS[method]
    package = ".".join(target.split(".")[:2])  # baselines.<name>
    assert (REPO / Path(*package.split("."))).is_dir(), f"{method}: {package} is not a package of baselines/"
    module = importlib.import_module(package)
    assert hasattr(module, target.rsplit(".", 1)[1]), f"{method}: {package} does not export {target}"
    assert (CONFIG_DIR / "budget_method" / f"shared_{method}.yaml").is_file(), \
        f"{method}: no configs/budget_method/shared_{method}.yaml"
    assert package in independent_modules(), \
        f"{method}: pyproject.toml's independence contract does not list {package}"
    assert method in documented_methods(), \
        f"{method}: not in the table of systems of docs/adding-a-system.md or README.md"
