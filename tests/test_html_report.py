"""`memforest-bench report`: one self-contained HTML page of a sweep, rendered by a real headless
browser (Chromium from Debian's packages; `make test` installs it where it can). The page is checked as a
person sees it: the text of the rendered page (after its script ran) and a screenshot."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.harness.app import main
from benchmarks.harness.html_report import PER_PAGE, SystemRun, render

FAKE_MODELS = ["llm.backend=scripted", "llm.responder=responders:harness_responder", "embedder.backend=hash",
               "embedder.dim=256"]
BROWSER = next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
needs_browser = pytest.mark.skipif(BROWSER is None, reason="no headless browser: `make test` installs "
                                   "Debian's chromium (apt-get install chromium) where it can")


def browse(page: Path, tmp_path: Path, fragment: str = "") -> tuple[str, Path]:
    """The page's DOM after its script ran, and a screenshot of it, from headless Chromium."""
    assert BROWSER is not None
    flags = [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1400,1800"]
    url = page.resolve().as_uri() + fragment
    dom = subprocess.run([*flags, "--dump-dom", url], capture_output=True, text=True, timeout=120, check=True)
    shot = tmp_path / "page.png"
    subprocess.run([*flags, f"--screenshot={shot}", url], capture_output=True, timeout=120, check=True)
    return dom.stdout, shot


def table_of(dom: str) -> str:
    """The per-question table's body as the script built it."""
    found = re.search(r"<table id=\"questions\">.*?<tbody>(.*?)</tbody>", dom, flags=re.S)
    assert found is not None, "the page has no per-question table"
    return found.group(1)


def text_of(dom: str) -> str:
    """The visible text of a DOM dump, roughly: tags and the data block removed."""
    dom = re.sub(r"<script.*?</script>", " ", dom, flags=re.S)
    return " ".join(re.sub(r"<[^>]+>", " ", dom).split())


def sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["memforest-bench", "-m", "method=memforest_embed,flat_rag",
                                      *FAKE_MODELS, "progress=false"])
    main()
    found = list((tmp_path / "results/hydra/multirun").glob("*/*/comparison.md"))
    assert len(found) == 1
    return found[0].parent


def report(sweep_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Path:
    monkeypatch.setattr(sys, "argv", ["memforest-bench", "report", str(sweep_dir)])
    with pytest.raises(SystemExit) as done:
        main()
    assert done.value.code == 0
    page = sweep_dir / "report.html"
    assert f"report: {page}" in capsys.readouterr().out
    return page


def test_a_sweep_report_is_one_self_contained_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    page = report(sweep(tmp_path, monkeypatch), monkeypatch, capsys)
    html = page.read_text(encoding="utf-8")
    # nothing fetched from anywhere: no external script, style, image or font
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)
    assert "@import" not in html and "url(" not in html
    for system in ("memforest_embed", "flat_rag"):
        assert system in html
    assert html.count("<svg") >= 3  # recall@k, accuracy by category, build cost


@needs_browser
def test_a_browser_shows_the_summary_plots_and_every_question(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    page = report(sweep(tmp_path, monkeypatch), monkeypatch, capsys)
    dom, shot = browse(page, tmp_path)
    text = text_of(dom)
    assert "6 of 6 questions" in text
    for qid in ("sample_ku_001", "sample_tr_001"):
        assert qid in text
    assert "Which city do I live in now?" in text and "gold: Miami" in text
    assert "session recall_any@k" in text and "accuracy by category" in text
    table = table_of(dom)
    assert len(re.findall(r"<tr><td class=\"q\">", table)) == 6
    # every question has a cell per system with its verdict, and gold evidence is marked
    assert len(re.findall(r"class=\"(ok|bad)\">(correct|wrong)<", table)) == 12
    assert "class=\"ids gold\"" in table
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    # a filter in the address: one category (two temporal questions), as a person would pick it
    dom, _ = browse(page, tmp_path, "#category=temporal-reasoning")
    assert "2 of 6 questions" in text_of(dom)
    assert len(re.findall(r"<tr><td class=\"q\">", table_of(dom))) == 2


def _system(label: str, n: int) -> SystemRun:
    questions: dict[str, dict[str, Any]] = {}
    for i in range(n):
        gold = [f"conv-{i % 10}:D1:{i}"]
        questions[f"q{i}"] = {
            "category": ("single-hop", "multi-hop", "temporal", "open-domain")[i % 4],
            "question": f"What happened at step {i}?", "answer": f"answer {i}", "date": None,
            "abstention": False, "evidence": gold, "response": f"said {i}", "error": None,
            "verdict": i % 3 != 0,
            "retrieved": [{"time": "2023-05-01", "sessions": ["s"], "turns": gold, "gold": True}],
            "context": "line\n" * 20,
        }
    return SystemRun(label, Path("/runs") / label, None, questions)


@needs_browser
def test_the_page_stays_usable_at_locomo_size(tmp_path: Path) -> None:
    """1,540 questions, three systems: one page of the table at a time, the rest a click away."""
    page = tmp_path / "big.html"
    page.write_text(render([_system(s, 1540) for s in ("a", "b", "c")], "LoCoMo size"), encoding="utf-8")
    assert page.stat().st_size < 8_000_000
    dom, _ = browse(page, tmp_path)
    assert "1540 of 1540 questions" in text_of(dom) and "page 1 / 31" in text_of(dom)
    assert len(re.findall(r"<tr><td class=\"q\">", table_of(dom))) == PER_PAGE
    dom, _ = browse(page, tmp_path, "#outcome=all-wrong&category=multi-hop")
    # wrong in every system: i % 3 == 0; multi-hop: i % 4 == 1 -> i % 12 == 9
    assert f"{len(range(9, 1540, 12))} of 1540 questions" in text_of(dom)
