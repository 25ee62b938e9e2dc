"""Find a dataset file: an explicit path, the local cache, or a verified download."""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import httpx

_LME_BASE = "https://huggingface.co/datasets/xiaowu0162/longmemeval-cleaned/resolve/main"


@dataclass(frozen=True)
class RemoteFile:
    filename: str
    url: str
    sha256: str | None


# Checksums are pinned after the first verified download of each file. Until then they are None:
# the computed sha256 is printed and recorded in every Dataset, so results still name their source.
REMOTE_FILES: dict[str, RemoteFile] = {
    "longmemeval_s": RemoteFile(
        "longmemeval_s_cleaned.json", f"{_LME_BASE}/longmemeval_s_cleaned.json", None
    ),
    "longmemeval_oracle": RemoteFile("longmemeval_oracle.json", f"{_LME_BASE}/longmemeval_oracle.json", None),
    "longmemeval_m": RemoteFile(
        "longmemeval_m_cleaned.json", f"{_LME_BASE}/longmemeval_m_cleaned.json", None
    ),
    "locomo": RemoteFile(
        "locomo10.json",
        "https://raw.githubusercontent.com/snap-research/LoCoMo/main/data/locomo10.json",
        None,
    ),
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
    """Return a local file for dataset `name`, downloading it into `cache_dir` if needed.

    `transport` replaces the network (tests pass an `httpx.MockTransport`)."""
    if path is not None:
        local = Path(path).expanduser()
        if not local.is_file():
            raise DatasetUnavailableError(f"dataset file for {name!r} not found: {local}")
        return local
    if name not in REMOTE_FILES:
        raise DatasetUnavailableError(f"no download known for {name!r}; pass dataset.path=/path/to/file")
    remote = REMOTE_FILES[name]
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    cached = cache / remote.filename
    if cached.is_file():
        return cached
    return _download(name, remote, cached, transport)


def _download(name: str, remote: RemoteFile, target: Path, transport: httpx.BaseTransport | None) -> Path:
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
            f"checksum mismatch for {remote.filename}: expected {remote.sha256}, got {actual}"
        )
    if remote.sha256 is None:
        print(f"downloaded {remote.filename}: sha256 {actual} (not pinned yet)")
    os.replace(tmp, target)
    return target
