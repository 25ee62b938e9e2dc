"""Find a dataset file: an explicit path, the local cache, or a verified download."""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where a file is downloaded: loading a local file needs no HTTP client
    import httpx

# LongMemEval (cleaned release) at a fixed commit of the Hugging Face dataset repository; the endpoint
# follows HF_ENDPOINT (e.g. a mirror). LoCoMo from GitHub. Checksums and the LongMemEval revision are the
# values that independent users of these files publish (the LoCoMo checksum is also the one in this
# project's reference notes); a download that differs is refused, naming both checksums.
LONGMEMEVAL_REPO = "xiaowu0162/longmemeval-cleaned"
LONGMEMEVAL_REVISION = "98d7416c24c778c2fee6e6f3006e7a073259d48f"


@dataclass(frozen=True)
class RemoteFile:
    filename: str
    url: str
    sha256: str | None


def _longmemeval(filename: str, sha256: str) -> RemoteFile:
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    return RemoteFile(filename,
                      f"{endpoint}/datasets/{LONGMEMEVAL_REPO}/resolve/{LONGMEMEVAL_REVISION}/{filename}",
                      sha256)


def remote_files() -> dict[str, RemoteFile]:
    return {
        "longmemeval_s": _longmemeval("longmemeval_s_cleaned.json",
                                      "d6f21ea9d60a0d56f34a05b609c79c88a451d2ae03597821ea3d5a9678c3a442"),
        "longmemeval_oracle": _longmemeval("longmemeval_oracle.json",
                                           "821a2034d219ab45846873dd14c14f12cfe7776e73527a483f9dac095d38620c"),
        "longmemeval_m": _longmemeval("longmemeval_m_cleaned.json",
                                      "9d79e5524794a2e6900a3aa9cb7d9152c5a3e8319c9a87c25494ba1eacee495f"),
        "locomo": RemoteFile("locomo10.json",
                             "https://raw.githubusercontent.com/snap-research/LoCoMo/main/data/locomo10.json",
                             "79fa87e90f04081343b8c8debecb80a9a6842b76a7aa537dc9fdf651ea698ff4"),
    }


class DatasetUnavailableError(RuntimeError):
    """The dataset file is neither given, nor cached, nor downloadable."""


def default_cache_dir() -> Path:
    return Path.home() / ".cache" / "memforest" / "datasets"


def resolve_file(
    name: str,
    path: str | Path | None = None,
    cache_dir: str | Path | None = None,
    transport: httpx.BaseTransport | None = None,
) -> Path:
    """Return a local file for dataset `name`, downloading it into `cache_dir` if needed. A given path or
    a cached file may be plain JSON or packed as `.json.xz` / `.json.gz` (the loaders read all three).

    `transport` replaces the network (tests pass an `httpx.MockTransport`)."""
    if path is not None:
        local = Path(path).expanduser()
        if not local.is_file():
            raise DatasetUnavailableError(f"dataset file for {name!r} not found: {local}")
        return local
    files = remote_files()
    if name not in files:
        raise DatasetUnavailableError(f"no download known for {name!r}; pass dataset.path=/path/to/file")
    remote = files[name]
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    for suffix in ("", ".xz", ".gz"):
        if (cache / f"{remote.filename}{suffix}").is_file():
            return cache / f"{remote.filename}{suffix}"
    return _download(name, remote, cache / remote.filename, transport)


def _download(name: str, remote: RemoteFile, target: Path, transport: httpx.BaseTransport | None) -> Path:
    import httpx

    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{remote.filename}.", suffix=".part")
    tmp = Path(tmp_name)
    digest = hashlib.sha256()
    try:
        with (
            os.fdopen(fd, "wb") as handle,
            httpx.Client(transport=transport, follow_redirects=True, timeout=60.0) as client,
            client.stream("GET", remote.url) as response,
        ):
            response.raise_for_status()
            for block in response.iter_bytes():
                digest.update(block)
                handle.write(block)
    except (httpx.HTTPError, OSError) as exc:
        tmp.unlink(missing_ok=True)
        raise DatasetUnavailableError(
            f"could not download {name!r} from {remote.url} ({exc}). Download {remote.filename} "
            f"yourself and pass dataset.path=/path/to/{remote.filename}"
        ) from exc
    actual = digest.hexdigest()
    if remote.sha256 is not None and actual != remote.sha256:
        tmp.unlink(missing_ok=True)
        raise DatasetUnavailableError(
            f"checksum mismatch for {remote.filename} from {remote.url}: expected sha256 {remote.sha256}, "
            f"got {actual}. Download a verified copy yourself and pass "
            f"dataset.path=/path/to/{remote.filename}"
        )
    if remote.sha256 is None:
        print(f"downloaded {remote.filename}: sha256 {actual} (not pinned)")
    os.replace(tmp, target)
    return target
