"""Find a dataset file: an explicit path, a cached copy, or a verified download into the shared cache.

LongMemEval comes from its Hugging Face dataset repository through `huggingface_hub.hf_hub_download`, at a
pinned commit, into the hub cache (`$HF_HUB_CACHE`, by default `$HF_HOME/hub`); `HF_ENDPOINT`, read at
each download, picks a mirror. LoCoMo is not on the hub: it comes from GitHub at a pinned commit, into
`$HF_HOME/memforest/datasets/<owner>--<repo>/<commit>/`. With `HF_HOME` on a filesystem that every node
sees, one fetch on a node with internet access serves every offline compute node:

    python -m benchmarks.datasets.download longmemeval_s locomo

With `HF_HUB_OFFLINE=1` nothing is downloaded: a cached file is used, a missing one is an error naming
that command. Every file is checked against its sha256; a mismatch is refused, naming both checksums.
Files in the former cache folder (`~/.cache/memforest/datasets`) are still read, as they are.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where a file is downloaded: loading a local file needs no HTTP client
    import httpx

# Checksums and the LongMemEval revision are the values that independent users of these files publish;
# the LoCoMo checksum is also the one in this project's reference notes.
LONGMEMEVAL_REPO = "xiaowu0162/longmemeval-cleaned"
LONGMEMEVAL_REVISION = "98d7416c24c778c2fee6e6f3006e7a073259d48f"
LOCOMO_REPO = "snap-research/LoCoMo"
# The tip of snap-research/LoCoMo's main branch (12 Aug 2024). Its data/locomo10.json, unchanged since
# commit cbfbc1dba6bc53d00625212a0f22d55ffee7c1fc, has sha256
# 79fa87e90f04081343b8c8debecb80a9a6842b76a7aa537dc9fdf651ea698ff4 (read from a clone of the repository).
LOCOMO_COMMIT = "3eb6f2c585f5e1699204e3c3bdf7adc5c28cb376"

_TRUE = {"1", "ON", "YES", "TRUE"}  # the values huggingface_hub reads as true


@dataclass(frozen=True)
class HubFile:
    """A file of a Hugging Face dataset repository at a fixed commit."""

    repo_id: str
    revision: str
    filename: str
    sha256: str | None

    @property
    def source(self) -> str:
        return f"{self.filename} of hub dataset {self.repo_id} at {self.revision}"


@dataclass(frozen=True)
class GitHubFile:
    """A file of a GitHub repository at a fixed commit, fetched from its raw URL."""

    repo: str
    commit: str
    path: str
    sha256: str | None

    @property
    def filename(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    @property
    def url(self) -> str:
        return f"https://raw.githubusercontent.com/{self.repo}/{self.commit}/{self.path}"

    @property
    def source(self) -> str:
        return self.url


RemoteFile = HubFile | GitHubFile


def remote_files() -> dict[str, RemoteFile]:
    return {
        "longmemeval_s": HubFile(LONGMEMEVAL_REPO, LONGMEMEVAL_REVISION, "longmemeval_s_cleaned.json",
                                 "d6f21ea9d60a0d56f34a05b609c79c88a451d2ae03597821ea3d5a9678c3a442"),
        "longmemeval_oracle": HubFile(LONGMEMEVAL_REPO, LONGMEMEVAL_REVISION, "longmemeval_oracle.json",
                                      "821a2034d219ab45846873dd14c14f12cfe7776e73527a483f9dac095d38620c"),
        "longmemeval_m": HubFile(LONGMEMEVAL_REPO, LONGMEMEVAL_REVISION, "longmemeval_m_cleaned.json",
                                 "9d79e5524794a2e6900a3aa9cb7d9152c5a3e8319c9a87c25494ba1eacee495f"),
        "locomo": GitHubFile(LOCOMO_REPO, LOCOMO_COMMIT, "data/locomo10.json",
                             "79fa87e90f04081343b8c8debecb80a9a6842b76a7aa537dc9fdf651ea698ff4"),
    }


class DatasetUnavailableError(RuntimeError):
    """The dataset file is neither given, nor cached, nor downloadable."""


def default_cache_dir() -> Path:
    """The former download folder: files found there are read; nothing new is written there."""
    return Path.home() / ".cache" / "memforest" / "datasets"


def hf_home() -> Path:
    """`$HF_HOME`, else `$XDG_CACHE_HOME/huggingface`, else `~/.cache/huggingface`, as huggingface_hub
    chooses it."""
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface")
    return Path(os.path.expandvars(home)).expanduser()


def github_cache_path(remote: GitHubFile) -> Path:
    owner_repo = remote.repo.replace("/", "--")
    return hf_home() / "memforest" / "datasets" / owner_repo / remote.commit / remote.filename


def offline() -> bool:
    """`HF_HUB_OFFLINE` (or `TRANSFORMERS_OFFLINE`) as set now: no download is attempted."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.upper() in _TRUE


def resolve_file(
    name: str,
    path: str | Path | None = None,
    cache_dir: str | Path | None = None,
    transport: httpx.BaseTransport | None = None,
) -> Path:
    """Return a local file for dataset `name`: `path` if given; else a copy in `cache_dir` (by default the
    former cache folder), plain or packed as `.json.xz` / `.json.gz` (the loaders read all three); else the
    file in the shared cache, downloaded there first unless offline.

    `transport` replaces the network of the GitHub download (tests pass an `httpx.MockTransport`)."""
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
    if isinstance(remote, HubFile):
        return _from_hub(name, remote)
    return _from_github(name, remote, transport)


def _fetch_hint(name: str, filename: str) -> str:
    return (f"run `python -m benchmarks.datasets.download {name}` on a node with internet access (e.g. a "
            f"login node) with the same HF_HOME, or pass dataset.path=/path/to/{filename}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0].rstrip(".") if text else type(exc).__name__


def _from_hub(name: str, remote: HubFile) -> Path:
    try:
        from huggingface_hub import constants, hf_hub_download
        from huggingface_hub.utils import LocalEntryNotFoundError
    except ImportError as exc:
        raise DatasetUnavailableError(
            f"downloading {name!r} needs huggingface_hub: pip install huggingface_hub "
            f"(or pass dataset.path=/path/to/{remote.filename})") from exc
    try:
        local = hf_hub_download(repo_id=remote.repo_id, repo_type="dataset", filename=remote.filename,
                                revision=remote.revision, local_files_only=offline(),
                                endpoint=os.environ.get("HF_ENDPOINT") or None)
    except LocalEntryNotFoundError as exc:  # offline, or the hub unreachable, and not in the hub cache
        hub_offline = offline() or bool(getattr(constants, "HF_HUB_OFFLINE", False))
        reason = "HF_HUB_OFFLINE is set" if hub_offline else f"the hub is unreachable: {_first_line(exc)}"
        raise DatasetUnavailableError(
            f"{remote.source} is not in the hub cache and {reason}; {_fetch_hint(name, remote.filename)}"
        ) from exc
    except (OSError, ValueError) as exc:
        raise DatasetUnavailableError(
            f"could not download {remote.source} ({_first_line(exc)}); download it yourself and pass "
            f"dataset.path=/path/to/{remote.filename}") from exc
    blob = os.path.realpath(local)  # the cache's copy behind the snapshot's link: deleting it refetches
    _check_sha256(remote, Path(local), _sha256_of(Path(local)),
                  f"delete {blob} and fetch it again, or pass dataset.path=/path/to/{remote.filename}")
    return Path(local)


def _from_github(name: str, remote: GitHubFile, transport: httpx.BaseTransport | None) -> Path:
    target = github_cache_path(remote)
    if target.is_file():  # written only after its checksum matched
        return target
    if offline():
        raise DatasetUnavailableError(
            f"{remote.source} is not in {target.parent} and HF_HUB_OFFLINE is set; "
            f"{_fetch_hint(name, remote.filename)}")
    return _download(remote, target, transport)


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _check_sha256(remote: RemoteFile, where: Path, actual: str, remedy: str) -> None:
    if remote.sha256 is not None and actual != remote.sha256:
        raise DatasetUnavailableError(
            f"checksum mismatch for {remote.source} ({where}): expected sha256 {remote.sha256}, "
            f"got {actual}; {remedy}")


def _download(remote: GitHubFile, target: Path, transport: httpx.BaseTransport | None) -> Path:
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
            f"could not download {remote.url} ({_first_line(exc)}); download {remote.filename} "
            f"yourself and pass dataset.path=/path/to/{remote.filename}") from exc
    try:
        _check_sha256(remote, target, digest.hexdigest(),
                      f"download a verified copy yourself and pass dataset.path=/path/to/{remote.filename}")
    except DatasetUnavailableError:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, target)
    return target


def main(argv: Sequence[str] | None = None) -> int:
    """Fetch each named dataset into the shared cache and print where it is: 0 when all are there,
    1 when any failed (one line each on stderr), 2 on an unknown name (argparse lists the known ones)."""
    names = list(remote_files())
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.datasets.download",
        description="Download benchmark datasets into the shared cache (HF_HOME), checked by sha256.")
    parser.add_argument("names", nargs="+", metavar="NAME", choices=names,
                        help=f"one of: {', '.join(names)}")
    args = parser.parse_args(argv)
    failed = 0
    for name in dict.fromkeys(args.names):
        try:
            print(f"{name}: {resolve_file(name)}", flush=True)
        except DatasetUnavailableError as exc:
            print(f"{name}: not fetched: {exc}", file=sys.stderr, flush=True)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
