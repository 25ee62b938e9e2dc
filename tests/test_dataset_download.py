"""Dataset downloads: LongMemEval through huggingface_hub at the pinned revision, LoCoMo from GitHub at a
pinned commit, offline mode, checksums and the fetch command. A fake hub on 127.0.0.1 stands in for the
network; nothing here reaches another address."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from benchmarks.datasets import DatasetUnavailableError, download, resolve_file

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"
BODY = (FIXTURES / "longmemeval_tiny.json").read_bytes()
LME_PREFIX = f"/datasets/{download.LONGMEMEVAL_REPO}/resolve/{download.LONGMEMEVAL_REVISION}/"
FETCH = "python -m benchmarks.datasets.download"


@dataclass
class FakeHub:
    """Serves `files` (URL path -> bytes) the way the hub answers a file request; records each request."""

    endpoint: str
    files: dict[str, bytes] = field(default_factory=dict)
    seen: list[str] = field(default_factory=list)


@pytest.fixture(autouse=True)
def caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every cache under tmp_path, offline as the suite runs (conftest), no proxy for 127.0.0.1."""
    hf_home = tmp_path / "hf"
    monkeypatch.setenv("HF_HOME", str(hf_home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    monkeypatch.setattr(download, "default_cache_dir", lambda: tmp_path / "legacy")
    return hf_home


@pytest.fixture
def hub(caches: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """huggingface_hub with its cache under tmp_path (the library reads HF_HUB_CACHE at import)."""
    huggingface_hub = pytest.importorskip("huggingface_hub")
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(caches / "hub"))
    return huggingface_hub


def go_online(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    if "huggingface_hub.constants" in sys.modules:
        monkeypatch.setattr(sys.modules["huggingface_hub.constants"], "HF_HUB_OFFLINE", False)


@pytest.fixture
def fake_hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    state = FakeHub("")

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, with_body: bool) -> None:
            state.seen.append(f"{self.command} {self.path}")
            body = state.files.get(self.path)
            if body is None:
                self.send_response(404)
                self.send_header("X-Error-Code", "EntryNotFound")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("ETag", f'"{hashlib.sha256(body).hexdigest()}"')
            self.send_header("X-Repo-Commit", download.LONGMEMEVAL_REVISION)
            self.end_headers()
            if with_body:
                self.wfile.write(body)

        def do_HEAD(self) -> None:  # noqa: N802 (the name http.server calls)
            self._answer(with_body=False)

        def do_GET(self) -> None:  # noqa: N802
            self._answer(with_body=True)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.endpoint = f"http://127.0.0.1:{server.server_port}"
    monkeypatch.setenv("HF_ENDPOINT", state.endpoint)
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def pin_checksum(monkeypatch: pytest.MonkeyPatch, name: str, body: bytes) -> None:
    """The shipped coordinates of `name` with the checksum of a test body."""
    files = download.remote_files()
    monkeypatch.setattr(download, "remote_files", lambda: {
        **files, name: dataclasses.replace(files[name], sha256=hashlib.sha256(body).hexdigest())})


def one_line(exc: pytest.ExceptionInfo[DatasetUnavailableError]) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


# ---------------------------------------------------------------- LongMemEval through huggingface_hub


def test_hub_download_asks_for_the_pinned_revision_of_the_dataset_repo(
        hub: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    go_online(monkeypatch)
    calls: list[dict[str, Any]] = []
    fetched = tmp_path / "fetched.json"
    fetched.write_bytes(BODY)

    def record(**kwargs: Any) -> str:
        calls.append(kwargs)
        return str(fetched)

    monkeypatch.setattr(hub, "hf_hub_download", record)
    with pytest.raises(DatasetUnavailableError) as failure:  # the real file's checksum is pinned
        resolve_file("longmemeval_s")
    assert calls == [{"repo_id": "xiaowu0162/longmemeval-cleaned", "repo_type": "dataset",
                      "filename": "longmemeval_s_cleaned.json",
                      "revision": "98d7416c24c778c2fee6e6f3006e7a073259d48f",
                      "local_files_only": False, "endpoint": None}]
    assert "d6f21ea9d60a0d56f34a05b609c79c88a451d2ae03597821ea3d5a9678c3a442" in one_line(failure)
    pin_checksum(monkeypatch, "longmemeval_s", BODY)
    assert resolve_file("longmemeval_s") == fetched
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert resolve_file("longmemeval_s") == fetched
    assert calls[-1]["local_files_only"] is True  # offline: the hub cache only


def test_hub_download_fills_the_hub_cache_and_serves_offline_from_it(
        hub: ModuleType, fake_hub: FakeHub, caches: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    go_online(monkeypatch)
    fake_hub.files[LME_PREFIX + "longmemeval_oracle.json"] = BODY
    pin_checksum(monkeypatch, "longmemeval_oracle", BODY)
    path = resolve_file("longmemeval_oracle")
    assert path.read_bytes() == BODY
    snapshot = caches / "hub" / "datasets--xiaowu0162--longmemeval-cleaned" / "snapshots"
    assert path == snapshot / download.LONGMEMEVAL_REVISION / "longmemeval_oracle.json"
    assert f"GET {LME_PREFIX}longmemeval_oracle.json" in fake_hub.seen
    requests = len(fake_hub.seen)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(sys.modules["huggingface_hub.constants"], "HF_HUB_OFFLINE", True)
    assert resolve_file("longmemeval_oracle") == path
    assert len(fake_hub.seen) == requests  # served from the cache, no request


def test_offline_with_nothing_cached_is_one_line_naming_the_fetch(
        hub: ModuleType, fake_hub: FakeHub) -> None:
    with pytest.raises(DatasetUnavailableError) as failure:
        resolve_file("longmemeval_s")
    message = one_line(failure)
    assert "HF_HUB_OFFLINE" in message and f"{FETCH} longmemeval_s" in message
    assert "dataset.path=/path/to/longmemeval_s_cleaned.json" in message
    assert fake_hub.seen == []


def test_a_hub_file_with_another_checksum_is_refused_naming_both(
        hub: ModuleType, fake_hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    go_online(monkeypatch)
    fake_hub.files[LME_PREFIX + "longmemeval_oracle.json"] = b"[]"
    with pytest.raises(DatasetUnavailableError) as failure:
        resolve_file("longmemeval_oracle")
    message = one_line(failure)
    assert "821a2034d219ab45846873dd14c14f12cfe7776e73527a483f9dac095d38620c" in message
    assert hashlib.sha256(b"[]").hexdigest() in message and "dataset.path=" in message


def test_a_file_missing_on_the_hub_names_the_override(
        hub: ModuleType, fake_hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    go_online(monkeypatch)
    with pytest.raises(DatasetUnavailableError) as failure:
        resolve_file("longmemeval_m")
    assert "dataset.path=/path/to/longmemeval_m_cleaned.json" in one_line(failure)


def test_the_former_cache_folder_is_still_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    (legacy / "longmemeval_s_cleaned.json").write_bytes(BODY)
    (legacy / "locomo10.json.xz").write_bytes(b"packed")
    go_online(monkeypatch)
    monkeypatch.setattr(download, "_from_hub", lambda *args: pytest.fail("downloaded again"))
    monkeypatch.setattr(download, "_from_github", lambda *args: pytest.fail("downloaded again"))
    assert resolve_file("longmemeval_s") == legacy / "longmemeval_s_cleaned.json"
    assert resolve_file("locomo") == legacy / "locomo10.json.xz"


# ---------------------------------------------------------------- LoCoMo from GitHub at a pinned commit


def test_locomo_url_names_the_pinned_commit() -> None:
    remote = download.remote_files()["locomo"]
    assert isinstance(remote, download.GitHubFile)
    assert re.fullmatch(r"[0-9a-f]{40}", download.LOCOMO_COMMIT)
    assert remote.url == ("https://raw.githubusercontent.com/snap-research/LoCoMo/"
                          f"{download.LOCOMO_COMMIT}/data/locomo10.json")
    assert "/main/" not in remote.url
    assert remote.sha256 == "79fa87e90f04081343b8c8debecb80a9a6842b76a7aa537dc9fdf651ea698ff4"


def test_locomo_lands_in_the_shared_cache_and_serves_offline(
        caches: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    go_online(monkeypatch)
    body = (FIXTURES / "locomo_tiny.json").read_bytes()
    pin_checksum(monkeypatch, "locomo", body)
    seen: list[str] = []

    def serve(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, content=body)

    path = resolve_file("locomo", transport=httpx.MockTransport(serve))
    folder = caches / "memforest" / "datasets" / "snap-research--LoCoMo" / download.LOCOMO_COMMIT
    assert path == folder / "locomo10.json" and path.read_bytes() == body
    remote = download.remote_files()["locomo"]
    assert isinstance(remote, download.GitHubFile)
    assert seen == [remote.url] and os.listdir(folder) == ["locomo10.json"]
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert resolve_file("locomo", transport=httpx.MockTransport(serve)) == path and len(seen) == 1


def test_locomo_offline_with_nothing_cached_makes_no_request() -> None:
    transport = httpx.MockTransport(lambda request: pytest.fail("a request while offline"))
    with pytest.raises(DatasetUnavailableError) as failure:
        resolve_file("locomo", transport=transport)
    message = one_line(failure)
    assert "HF_HUB_OFFLINE" in message and f"{FETCH} locomo" in message and "dataset.path=" in message


def test_locomo_checksum_mismatch_names_both_and_keeps_nothing(
        caches: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    go_online(monkeypatch)
    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=b"[]"))
    with pytest.raises(DatasetUnavailableError) as failure:
        resolve_file("locomo", transport=transport)
    message = one_line(failure)
    assert "79fa87e90f04081343b8c8debecb80a9a6842b76a7aa537dc9fdf651ea698ff4" in message
    assert hashlib.sha256(b"[]").hexdigest() in message and "dataset.path=" in message
    assert [p for p in caches.rglob("*") if p.is_file()] == []


def test_locomo_unreachable_names_the_override(caches: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    go_online(monkeypatch)

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("no network", request=request)

    with pytest.raises(DatasetUnavailableError) as failure:
        resolve_file("locomo", transport=httpx.MockTransport(refuse))
    assert "dataset.path=/path/to/locomo10.json" in one_line(failure)
    assert [p for p in caches.rglob("*") if p.is_file()] == []


# ---------------------------------------------------------------- the fetch command


def test_fetch_command_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as unknown:
        download.main(["longmemeval_s", "squad"])
    assert unknown.value.code == 2
    err = capsys.readouterr().err
    assert all(n in err for n in ("squad", "longmemeval_s", "longmemeval_oracle", "longmemeval_m", "locomo"))

    assert download.main(["locomo", "longmemeval_s"]) == 1  # offline, nothing cached
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert out == "" and len(lines) == 2
    assert lines[0].startswith("locomo: ") and lines[1].startswith("longmemeval_s: ")

    legacy = tmp_path / "legacy"
    legacy.mkdir()
    for filename in ("locomo10.json", "longmemeval_s_cleaned.json"):
        (legacy / filename).write_bytes(BODY)
    assert download.main(["locomo", "longmemeval_s", "locomo"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == [f"locomo: {legacy / 'locomo10.json'}",
                                f"longmemeval_s: {legacy / 'longmemeval_s_cleaned.json'}"] and err == ""


@pytest.mark.integration
def test_fetch_command_runs_against_the_endpoint_and_cache_of_its_environment(
        hub: ModuleType, fake_hub: FakeHub, tmp_path: Path) -> None:
    fake_hub.files[LME_PREFIX + "longmemeval_oracle.json"] = b"[]"  # not the pinned checksum
    env = {k: v for k, v in os.environ.items()
           if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_CACHE", "XDG_CACHE_HOME")}
    env.update(HOME=str(tmp_path / "home"), HF_HUB_DISABLE_PROGRESS_BARS="1", HF_HUB_DISABLE_TELEMETRY="1")

    def fetch(*names: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "benchmarks.datasets.download", *names], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=120)

    done = fetch("longmemeval_oracle")
    assert done.returncode == 1 and f"GET {LME_PREFIX}longmemeval_oracle.json" in fake_hub.seen
    assert done.stderr.count("\n") == 1 and "checksum mismatch" in done.stderr
    assert str(Path(env["HF_HOME"]) / "hub") in done.stderr  # the download went to $HF_HOME's hub cache
    unknown = fetch("squad")
    assert unknown.returncode == 2 and "locomo" in unknown.stderr and "Warning" not in unknown.stderr
