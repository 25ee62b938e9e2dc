import importlib
import importlib.util
import json
import logging
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _import_with_telemetry_off(*modules: str) -> None:
    """Tests import some libraries' modules directly (Mem0's prompts and parsers); those libraries read
    their telemetry switch once, at first import, so the first import happens here with telemetry off,
    as the adapters' own imports do (baselines.common.quiet_environment)."""
    from baselines.common import quiet_environment

    with quiet_environment():
        for name in modules:
            if importlib.util.find_spec(name) is not None:
                importlib.import_module(name)


_import_with_telemetry_off("mem0")


@pytest.fixture(autouse=True)
def _root_logging_restored():
    """An entry point run in process (`main([...])`) may install root log handlers bound to the stream a
    test captured; later tests would log into that closed stream. Each test leaves the root logger as
    it found it."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def make_sessions(n_sessions: int, turns_per_session: int, start_day: int = 1) -> list[dict]:
    """Synthetic dated sessions; every user turn states one distinct fact."""
    places = ["Boston", "Davis", "Miami", "Austin", "Denver", "Seattle", "Portland", "Chicago"]
    out = []
    for s in range(n_sessions):
        turns = []
        for t in range(turns_per_session):
            if t % 2 == 0:
                content = (f"In session {s} I mention topic {t} about {places[(s + t) % len(places)]} "
                           f"and item{s}x{t}.")
                turns.append({"role": "user", "content": content})
            else:
                turns.append({"role": "assistant", "content": f"Noted the detail number {s}-{t} for you."})
        out.append({"session_id": f"s{s:03d}",
                    "timestamp": f"2023-{1 + s // 28:02d}-{1 + s % 28:02d}T10:00:00", "turns": turns})
    return out


@pytest.fixture
def scripted_forest(tmp_path):
    """A MemForest on the scripted model and the hash embedder (explicitly selected test models)."""
    from memforest.api import MemForest
    from memforest.config import MemForestConfig
    from memforest.llm.testing import HashEmbedder, ScriptedChatModel

    made = []

    def build(concurrency: int = 4, path=None, **cfg_changes):
        cfg = MemForestConfig()
        cfg.llm.concurrency = concurrency
        for dotted, value in cfg_changes.items():
            section, key = dotted.split("__")
            setattr(getattr(cfg, section), key, value)
        model = ScriptedChatModel(max_concurrency=concurrency)
        forest = MemForest(path or tmp_path / "store", cfg, llm=model, embedder=HashEmbedder())
        made.append(forest)
        return forest

    yield build
    for f in made:
        f.close()


RESIDENCE = [
    {"session_id": "boston", "timestamp": "2020-03-01T10:00:00", "turns": [
        {"role": "user", "content": "I live in Boston near the harbor."},
        {"role": "assistant", "content": "Boston is a great city."}]},
    {"session_id": "pizza", "timestamp": "2021-05-01T10:00:00", "turns": [
        {"role": "user", "content": "My favourite pizza topping is basil."},
        {"role": "assistant", "content": "Basil is a classic choice."}]},
    {"session_id": "davis", "timestamp": "2022-06-01T10:00:00", "turns": [
        {"role": "user", "content": "I moved from Boston and now I live in Davis."},
        {"role": "assistant", "content": "Davis is sunny."}]},
    {"session_id": "guitar", "timestamp": "2023-01-10T10:00:00", "turns": [
        {"role": "user", "content": "I started learning guitar with a teacher."},
        {"role": "assistant", "content": "Practice a little every day."}]},
    {"session_id": "miami", "timestamp": "2024-07-01T10:00:00", "turns": [
        {"role": "user", "content": "I moved from Davis and now I live in Miami."},
        {"role": "assistant", "content": "Miami is warm all year."}]},
]


@pytest.fixture
def cli_store(tmp_path, capsys):
    """The `memforest` command line's common arguments for a store holding RESIDENCE (scripted model
    and hash embedder), ingested through the command line itself."""
    from memforest.cli import main

    data = tmp_path / "sessions.json"
    data.write_text(json.dumps(RESIDENCE))
    common = ["--store", str(tmp_path / "st"), "--user", "bob", "-o", "llm.backend=scripted",
              "-o", "embedder.backend=hash", "-o", "embedder.dim=256"]
    assert main(["ingest", *common, str(data)]) == 0
    capsys.readouterr()
    return common


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The fuzz suite's cases and outcomes per class (also written to $MEMFOREST_FUZZ_REPORT)."""
    fuzzkit = __import__("sys").modules.get("fuzzkit")
    if fuzzkit is None or not fuzzkit.COUNTS:
        return
    terminalreporter.write_sep("=", f"fuzz cases per class ({'long' if fuzzkit.LONG else 'fast'} profile)")
    terminalreporter.write_line(fuzzkit.format_report())
    if os.environ.get("MEMFOREST_FUZZ_REPORT"):
        fuzzkit.write_report(os.environ["MEMFOREST_FUZZ_REPORT"])


@pytest.fixture
def memoryos_stub(monkeypatch):
    """memoryos-pro's stand-in (tests/fixtures/upstream) in place of the library."""
    from test_baseline_protocols import stub_packages

    pytest.importorskip("faiss")
    with stub_packages(monkeypatch, "memoryos_pro", ("memoryos",)):
        yield


@pytest.fixture
def mempalace_stub(monkeypatch):
    """MemPalace's and Chroma's stand-ins (tests/fixtures/upstream) in place of the libraries."""
    from test_baseline_protocols import stub_packages

    with stub_packages(monkeypatch, "mempalace_raw", ("chromadb", "mempalace")):
        yield
