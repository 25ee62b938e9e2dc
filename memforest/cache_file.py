"""Files of arrays kept beside a user's database: caches of what is derived from it, in the form a
query reads, so a process that opens the memory maps them instead of rebuilding them.

SQLite stays the source of truth. A cache file says what it holds (`kind`, format version) and which
committed version of the store it reflects; its header and its arrays carry CRC-32 checksums. A file
that is missing, truncated, zeroed, of another format version, of another store version or whose
checksums do not match is reported as unusable (`CacheMiss`, with the reason) and rebuilt by its
reader, never trusted. Files are written atomically (a temporary file, fsynced, renamed over the old
one, the folder fsynced), so a reader sees a whole old file or a whole new one.

Layout: 8 bytes of magic, the header's length and CRC-32 (two little-endian uint32), the header
(JSON: kind, format, store version, checksum of the payload, each array's dtype, shape and offset),
then the arrays, each aligned to 64 bytes. Arrays are returned as read-only (or copy-on-write) views
of a memory map, so their pages are read on demand and shared by every process that maps the same
file; the pages the checksum read leave the process's resident set once it matches."""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import struct
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MAGIC = b"MFCACHE\x01"
_PREFIX = struct.Struct("<8sII")  # magic, header bytes, header CRC-32
_ALIGN = 64


@dataclass(frozen=True)
class CacheMiss:
    """Why a cache file cannot be used (it is then rebuilt from the store)."""

    reason: str


def cache_dir(db_path: Path) -> Path:
    """The folder of the caches of the database at `db_path`."""
    return Path(db_path).parent / "cache"


def _aligned(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


def write_arrays(path: Path, kind: str, fmt: int, store_version: str, arrays: dict[str, np.ndarray]) -> int:
    """Write `arrays` as a cache file of `kind` (format `fmt`) reflecting committed `store_version`,
    atomically; returns the bytes written."""
    specs, offset, crc = [], 0, 0
    blobs = []
    for name, arr in arrays.items():
        data = np.ascontiguousarray(arr)
        raw = data.reshape(-1).view(np.uint8).data if data.size else memoryview(b"")
        specs.append({"name": name, "dtype": data.dtype.str, "shape": list(data.shape), "offset": offset,
                      "bytes": len(raw)})
        pad = _aligned(offset + len(raw)) - (offset + len(raw))
        blobs.append((raw, pad))
        crc = zlib.crc32(raw, crc)
        crc = zlib.crc32(b"\0" * pad, crc)
        offset += len(raw) + pad
    header = json.dumps({"kind": kind, "format": fmt, "store_version": store_version, "payload_bytes": offset,
                         "payload_crc32": crc, "arrays": specs}, separators=(",", ":")).encode()
    start = _aligned(_PREFIX.size + len(header))
    header += b" " * (start - _PREFIX.size - len(header))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(_PREFIX.pack(MAGIC, len(header), zlib.crc32(header)))
            out.write(header)
            for raw, pad in blobs:
                out.write(raw)
                out.write(b"\0" * pad)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o644)  # readable as the database beside it is (a temporary file is private)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)
    return start + offset


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def read_arrays(path: Path, kind: str, fmt: int, store_version: str,
                writable: bool = False) -> dict[str, np.ndarray] | CacheMiss:
    """The arrays of the cache file at `path`, as read-only views of a memory map, when it is a whole,
    unchanged file of `kind`, format `fmt` and committed `store_version`; else why not. `writable`:
    views of a private, copy-on-write map instead (a write copies its page, the file never changes)."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < _PREFIX.size:
                return CacheMiss(f"{path.name}: truncated ({size} bytes)")
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY if writable else mmap.ACCESS_READ)
    except FileNotFoundError:
        return CacheMiss(f"{path.name}: missing")
    except (OSError, ValueError) as e:
        return CacheMiss(f"{path.name}: unreadable ({type(e).__name__})")
    magic, header_bytes, header_crc = _PREFIX.unpack_from(buf, 0)
    if magic != MAGIC:
        return CacheMiss(f"{path.name}: not a cache file (bad magic)")
    start = _PREFIX.size + header_bytes
    if start > size:
        return CacheMiss(f"{path.name}: truncated inside its header")
    header_raw = buf[_PREFIX.size:start]
    if zlib.crc32(header_raw) != header_crc:
        return CacheMiss(f"{path.name}: header checksum mismatch")
    try:
        header = json.loads(header_raw)
    except ValueError:
        return CacheMiss(f"{path.name}: unreadable header")
    if header.get("kind") != kind or header.get("format") != fmt:
        return CacheMiss(f"{path.name}: {header.get('kind')} format {header.get('format')}, "
                         f"this version reads {kind} format {fmt}")
    if header.get("store_version") != store_version:
        return CacheMiss(f"{path.name}: reflects store version {header.get('store_version')}, "
                         f"the store is at {store_version}")
    payload = int(header["payload_bytes"])
    if start + payload != size:
        return CacheMiss(f"{path.name}: {size} bytes, its header says {start + payload}")
    view = memoryview(buf)[start:]
    if zlib.crc32(view) != header["payload_crc32"]:
        return CacheMiss(f"{path.name}: content checksum mismatch")
    view.release()
    _unmap_pages(buf)
    out = {}
    for spec in header["arrays"]:
        dtype = np.dtype(spec["dtype"])
        out[spec["name"]] = np.ndarray(tuple(spec["shape"]), dtype, buffer=buf,
                                       offset=start + int(spec["offset"]))
    return out


def _unmap_pages(buf: mmap.mmap) -> None:
    """Drop the pages the checksum read from this process's resident set: they stay in the page
    cache, and a later read maps only the pages it reaches (where the platform allows it)."""
    advice = getattr(mmap, "MADV_DONTNEED", None)
    if advice is not None:
        with contextlib.suppress(OSError, ValueError):
            buf.madvise(advice)


def pack_strings(values: list[str]) -> dict[str, np.ndarray]:
    """Strings as one UTF-8 blob and the character offsets of each (for `unpack_strings`)."""
    text = "".join(values)
    ends = np.cumsum(np.fromiter(map(len, values), np.int64, len(values)))
    return {"blob": np.frombuffer(text.encode(), np.uint8), "ends": ends}


def unpack_strings(blob: np.ndarray, ends: np.ndarray) -> list[str]:
    text = blob.tobytes().decode()
    if len(ends) and int(ends[-1]) != len(text):
        raise ValueError("string offsets do not match their text")
    bounds = [0, *ends.tolist()]
    return [text[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
