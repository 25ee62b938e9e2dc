"""Files of arrays kept beside a user's database: caches of what is derived from it, in the form a
query reads, so a process that opens the memory reads or maps them instead of rebuilding them.

SQLite stays the source of truth. A cache file says what it holds (`kind`, format version) and which
committed version of the store it reflects; its header carries a CRC-32, its arrays a checksum
(`memforest.resident.checksum`). A file that is missing, not a regular file (a FIFO, a device, a link:
never opened for reading), truncated, zeroed, of another format version, of another store version or
whose checksums do not match is reported as unusable (`CacheMiss`, with the reason) and rebuilt by its
reader, never trusted.

Files are written beside their final name (`.NAME.*.tmp`, locked by its writer while it writes),
fsynced, renamed over the old one and the folder fsynced, so a reader sees a whole old file or a
whole new one, and a file a process has mapped is never changed by a later write of ours: the
rename leaves the mapped file's contents as they were. Temporary files whose writer died
(`remove_stale_temporary`) are removed when a memory opens its caches and by `memforest check`.

A larger file's checksum is computed from the file once, not at every open: when a writer of ours has
written it, or a reader has read it whole, a stamp beside it (`NAME.verified`) records the file's
identity (device, inode, size, modification and change times) and its checksum. A reader that finds
the file as the stamp recorded it, and the stamp made after the file's last change (its change time
later than the file's, both set by the kernel's clock), takes the file as checked; otherwise it reads
the file whole again. This is what keeps the open of a large memory from reading gigabytes of caches
it then touches a few pages of. What the stamp cannot see is damage below the file system (a change
that keeps the file's identity); `memforest check` reads every file whole (`verify`).

Layout: 8 bytes of magic, the header's length and CRC-32 (two little-endian uint32), the header
(JSON: kind, format, store version, checksum of the payload, each array's dtype, shape and offset),
then the arrays, each aligned to 64 bytes. A file under `READ_BELOW` bytes is read into private
memory. A larger one is mapped, so its pages are read on demand and shared by every process that
maps it; its checksum is computed by reading the file, not the map, so no page stays resident.

What a map does not protect against, and what `MappedFiles` adds: a mapped file truncated in place
(by another program: ours never write in place) would kill the process with SIGBUS on the next
touch of a page past the new end, and one overwritten in place would change the arrays under their
readers. `MappedFiles.changed` compares each mapped file's identity (device, inode, size,
modification and change times, through its own open descriptor: one `fstat`, no read) with the one
it had when mapped; the caller checks it before each operation and reads the store again instead
of touching a changed map. Not protected: a file changed during an operation (between the check
and the touch), and a change that keeps the size and both times (possible only by resetting the
clock), which only a checksum of the whole file, too costly per query, would find."""

from __future__ import annotations

import fcntl
import json
import mmap
import os
import stat
import struct
import tempfile
import threading
import time
import weakref
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from memforest.resident.checksum import NAME as CHECKSUM
from memforest.resident.checksum import PayloadSum, payload_sum

MAGIC = b"MFCACHE\x01"
_PREFIX = struct.Struct("<8sII")  # magic, header bytes, header CRC-32
_ALIGN = 64
_CHUNK = 1 << 20  # bytes read at a time for a checksum
READ_BELOW = 16 << 20  # files smaller than this are read into private memory instead of mapped
VERIFIED = ".verified"  # the suffix of a mapped file's stamp: its identity when its checksum held
_STAMP_TRIES = 50  # re-stamps (1 ms apart) until the stamp's change time is later than the file's
TEMPORARY = ".*.tmp"  # the names of files being written (`write_arrays`)


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
    specs, offset, summed = [], 0, PayloadSum()
    blobs = []
    for name, arr in arrays.items():
        data = np.ascontiguousarray(arr)
        raw = data.reshape(-1).view(np.uint8).data if data.size else memoryview(b"")
        specs.append({"name": name, "dtype": data.dtype.str, "shape": list(data.shape), "offset": offset,
                      "bytes": len(raw)})
        pad = _aligned(offset + len(raw)) - (offset + len(raw))
        blobs.append((raw, pad))
        summed.update(raw)
        summed.update(b"\0" * pad)
        offset += len(raw) + pad
    header = json.dumps({"kind": kind, "format": fmt, "store_version": store_version, "payload_bytes": offset,
                         "checksum": CHECKSUM, "payload_sum": summed.value, "arrays": specs},
                        separators=(",", ":")).encode()
    start = _aligned(_PREFIX.size + len(header))
    header += b" " * (start - _PREFIX.size - len(header))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            fcntl.flock(out.fileno(), fcntl.LOCK_EX)  # held until renamed: it is not stale meanwhile
            out.write(_PREFIX.pack(MAGIC, len(header), zlib.crc32(header)))
            out.write(header)
            for raw, pad in blobs:
                out.write(raw)
                out.write(b"\0" * pad)
            out.flush()
            os.fsync(out.fileno())
            os.fchmod(out.fileno(), 0o644)  # readable as the database beside it is (mkstemp's is private)
            os.replace(tmp, path)
            written = os.fstat(out.fileno())
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)
    if written.st_size >= READ_BELOW:  # (mapped when read: its reader takes the stamp for a checksum)
        _stamp(path, written, summed.value)
    return start + offset


def _identity(st: os.stat_result) -> list[int]:
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _stamp(path: Path, st: os.stat_result, summed: str) -> None:
    """Record that the file at `path`, of status `st`, holds a payload of checksum `summed` (see the
    module's notes), in a stamp written after the file's last change: a stamp made in the same tick of
    the kernel's clock as that change is made again a little later. Best effort: a stamp that cannot be
    written (a read-only folder) only means the next reader checks the file whole."""
    record = json.dumps({"file": _identity(st), "payload_sum": summed}).encode()
    target = path.with_name(path.name + VERIFIED)
    try:
        for _ in range(_STAMP_TRIES):
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=path.parent)
            try:
                with os.fdopen(fd, "wb") as out:
                    fcntl.flock(out.fileno(), fcntl.LOCK_EX)  # (not stale while written: `TEMPORARY`)
                    out.write(record)
                    out.flush()
                    os.fchmod(out.fileno(), 0o644)
                    os.replace(tmp, target)
                    made = os.fstat(out.fileno()).st_ctime_ns
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
            if made > st.st_ctime_ns:
                return
            time.sleep(0.001)
    except OSError:
        pass


def stamp_if_whole(path: Path) -> bool:
    """Read the mapped-size cache file at `path` whole and stamp it when its checksum holds, as the
    first reader that maps it would (a copied memory's files are new files: a stamp names the file it
    was made for). Whether it was stamped."""
    opened = _open_regular(path)
    if isinstance(opened, CacheMiss):
        return False
    fd, st = opened
    try:
        found = _read_header(fd, st.st_size, path.name)
        if st.st_size < READ_BELOW or isinstance(found, CacheMiss):
            return False
        start, header = found
        summed = _file_sum(fd, start, st.st_size)
        if summed is None or summed != header.get("payload_sum"):
            return False
        if changed_since(st, os.fstat(fd)) is not None:
            return False
        _stamp(path, st, summed)
        return True
    except (OSError, AttributeError):
        return False
    finally:
        os.close(fd)


def _stamped(path: Path, st: os.stat_result, summed: str) -> bool:
    """Whether the stamp beside `path` says the file of status `st` was whole with checksum `summed`
    when last written or read whole, and nothing has changed it since (see the module's notes)."""
    opened = _open_regular(path.with_name(path.name + VERIFIED))
    if isinstance(opened, CacheMiss):
        return False
    fd, made = opened
    try:
        record = json.loads(os.pread(fd, 4096, 0))
    except (OSError, ValueError):
        return False
    finally:
        os.close(fd)
    return (isinstance(record, dict) and record.get("file") == _identity(st)
            and record.get("payload_sum") == summed and st.st_ctime_ns < made.st_ctime_ns)


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


def remove_stale_temporary(folder: Path) -> list[tuple[str, int]]:
    """Remove the temporary files in `folder` whose writer is gone (a process killed while writing a
    cache): those no live writer holds locked. Returns (name, bytes) of each removed; one that cannot
    be removed (a read-only store) is left and not listed."""
    removed = []
    try:
        names = sorted(p.name for p in folder.glob(TEMPORARY))
    except OSError:
        return []
    for name in names:
        size = _remove_if_unlocked(folder / name)
        if size is not None:
            removed.append((name, size))
    return removed


def _remove_if_unlocked(path: Path) -> int | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # fails while its writer lives
        if os.lstat(path).st_ino != st.st_ino:  # (renamed into place meanwhile, the name reused)
            return None
        path.unlink()
        return st.st_size
    except OSError:
        return None
    finally:
        os.close(fd)


def changed_since(then: os.stat_result, now: os.stat_result) -> str | None:
    """How a file whose status was `then` has changed in place (None: it has not). A file only
    renamed over or removed (its link count dropped) keeps its contents: its change time is then
    not compared."""
    if (now.st_dev, now.st_ino) != (then.st_dev, then.st_ino):
        return "replaced"
    if now.st_size != then.st_size:
        return f"truncated to {now.st_size} bytes" if now.st_size < then.st_size else "grown in place"
    if now.st_mtime_ns != then.st_mtime_ns:
        return "rewritten in place"
    if now.st_nlink == then.st_nlink and now.st_ctime_ns != then.st_ctime_ns:
        return "changed in place"
    return None


class MappedFiles:
    """The cache files whose maps arrays still use, each with the status it had when mapped and an
    open descriptor of its own (closed when the map is freed): `changed` tells, for one `fstat`
    each, which have since been changed in place."""

    def __init__(self) -> None:
        self._held: list[tuple[str, weakref.ref[mmap.mmap], int, os.stat_result]] = []
        self._lock = threading.Lock()

    def add(self, name: str, buf: mmap.mmap, fd: int, st: os.stat_result) -> None:
        weakref.finalize(buf, os.close, fd)
        with self._lock:
            self._held.append((name, weakref.ref(buf), fd, st))

    def __len__(self) -> int:
        with self._lock:
            return sum(ref() is not None for _, ref, _, _ in self._held)

    def changed(self) -> list[str]:
        """What changed in place among the files still mapped (as 'NAME: how'); those are forgotten,
        so each change is reported once."""
        with self._lock:
            held, self._held = self._held, []
        kept, found = [], []
        for entry in held:
            name, ref, fd, st = entry
            buf = ref()  # (held while its descriptor is used: the map's finaliser closes it)
            if buf is None:
                continue
            try:
                how = changed_since(st, os.fstat(fd))
            except OSError as e:
                how = f"unreadable ({type(e).__name__})"
            if how is None:
                kept.append(entry)
            else:
                found.append(f"{name}: {how}")
            del buf
        with self._lock:
            self._held = kept + self._held
        return found


def read_arrays(path: Path, kind: str, fmt: int, store_version: str, writable: bool = False,
                watch: MappedFiles | None = None, random_access: bool = False, verify: bool = False
                ) -> dict[str, np.ndarray] | CacheMiss:
    """The arrays of the cache file at `path` when it is a whole, unchanged regular file of `kind`,
    format `fmt` and committed `store_version`; else why not. A file under `READ_BELOW` bytes is read
    into private memory; a larger one is mapped, its arrays read-only views of the map (`writable`:
    of a private, copy-on-write map: a write copies its page, the file never changes), and the map
    is added to `watch`, which tells when the file is later changed in place (`random_access`: the map
    is advised so, and a fault reads its page alone, not the read-ahead window around it). A mapped
    file's checksum is taken from its stamp when that holds (the module's notes), unless `verify`."""
    opened = _open_regular(path)
    if isinstance(opened, CacheMiss):
        return opened
    fd, st = opened
    try:
        found = _header_of(fd, st.st_size, path.name, kind, fmt, store_version)
        if isinstance(found, CacheMiss):
            return found
        start, header = found
        if st.st_size < READ_BELOW:
            return _read_in(fd, st.st_size, start, header, path.name, writable)
        checked = not verify and _stamped(path, st, header["payload_sum"])
        return _mapped(fd, st, start, header, path, writable, watch, random_access, checked)
    except (OSError, ValueError) as e:
        return CacheMiss(f"{path.name}: unreadable ({type(e).__name__})")
    finally:
        os.close(fd)


def _open_regular(path: Path) -> tuple[int, os.stat_result] | CacheMiss:
    """An open descriptor of the regular file at `path` (never a FIFO, device or link, whose open or
    read could block or reach outside the cache folder), and its status."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return CacheMiss(f"{path.name}: not a regular file")
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return CacheMiss(f"{path.name}: missing")
    except OSError as e:
        return CacheMiss(f"{path.name}: unreadable ({type(e).__name__})")
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):  # (replaced between the two looks)
        os.close(fd)
        return CacheMiss(f"{path.name}: not a regular file")
    return fd, st


def _header_of(fd: int, size: int, name: str, kind: str, fmt: int,
               store_version: str) -> tuple[int, dict[str, Any]] | CacheMiss:
    """(where the payload starts, the header) of a whole file of `kind`, `fmt` and `store_version`."""
    found = _read_header(fd, size, name)
    if isinstance(found, CacheMiss):
        return found
    start, header = found
    payload = int(header["payload_bytes"])
    if header.get("kind") != kind or header.get("format") != fmt:
        return CacheMiss(f"{name}: {header.get('kind')} format {header.get('format')}, "
                         f"this version reads {kind} format {fmt}")
    if header.get("store_version") != store_version:
        return CacheMiss(f"{name}: reflects store version {header.get('store_version')}, "
                         f"the store is at {store_version}")
    if start + payload != size:
        return CacheMiss(f"{name}: {size} bytes, its header says {start + payload}")
    if header.get("checksum") != CHECKSUM or not isinstance(header.get("payload_sum"), str):
        return CacheMiss(f"{name}: payload checksum {header.get('checksum', 'crc32')}, this version "
                         f"reads {CHECKSUM}")
    return start, header


def _read_header(fd: int, size: int, name: str) -> tuple[int, dict[str, Any]] | CacheMiss:
    """(where the payload starts, the header) of a file whose prefix and header are whole (its magic,
    its header's CRC-32 and a payload size read), whatever its kind."""
    if size < _PREFIX.size:
        return CacheMiss(f"{name}: truncated ({size} bytes)")
    magic, header_bytes, header_crc = _PREFIX.unpack(os.pread(fd, _PREFIX.size, 0))
    if magic != MAGIC:
        return CacheMiss(f"{name}: not a cache file (bad magic)")
    start = _PREFIX.size + header_bytes
    if start > size:
        return CacheMiss(f"{name}: truncated inside its header")
    header_raw = os.pread(fd, header_bytes, _PREFIX.size)
    if len(header_raw) != header_bytes or zlib.crc32(header_raw) != header_crc:
        return CacheMiss(f"{name}: header checksum mismatch")
    try:
        header = json.loads(header_raw)
        int(header["payload_bytes"])
    except (ValueError, KeyError, TypeError):
        return CacheMiss(f"{name}: unreadable header")
    return start, header


def _file_sum(fd: int, start: int, size: int) -> str | None:
    """The checksum of bytes [start, size) read through the descriptor (None: the file ended sooner)."""
    summed, at, chunk = PayloadSum(), start, bytearray(_CHUNK)
    view = memoryview(chunk)
    while at < size:
        n = os.preadv(fd, [view[: min(_CHUNK, size - at)]], at)
        if n <= 0:
            return None
        summed.update(view[:n])
        at += n
    return summed.value


def _read_in(fd: int, size: int, start: int, header: dict[str, Any], name: str,
             writable: bool) -> dict[str, np.ndarray] | CacheMiss:
    """The arrays of a small file, read into private memory: nothing of it stays mapped."""
    data = bytearray(size - start)
    view, at = memoryview(data), 0
    while at < len(data):
        n = os.preadv(fd, [view[at:]], start + at)
        if n <= 0:
            return CacheMiss(f"{name}: truncated while it was read")
        at += n
    if payload_sum(data) != header["payload_sum"]:
        return CacheMiss(f"{name}: content checksum mismatch")
    out = _arrays(header, data, 0)
    if not writable:
        for arr in out.values():
            arr.flags.writeable = False
    return out


def _mapped(fd: int, st: os.stat_result, start: int, header: dict[str, Any], path: Path, writable: bool,
            watch: MappedFiles | None, random_access: bool = False,
            checked: bool = False) -> dict[str, np.ndarray] | CacheMiss:
    """The arrays of a large file as views of its map, after a checksum of the file read through the
    descriptor (no page of the map is touched before it is known whole), unless it is `checked` (its
    stamp holds); a file read whole and found whole is stamped."""
    name = path.name
    buf = mmap.mmap(fd, 0, access=mmap.ACCESS_COPY if writable else mmap.ACCESS_READ)
    if random_access and hasattr(mmap, "MADV_RANDOM"):
        buf.madvise(mmap.MADV_RANDOM)
    if not checked:
        summed = _file_sum(fd, start, st.st_size)
        if summed is None or changed_since(st, os.fstat(fd)) is not None:
            return CacheMiss(f"{name}: changed while it was read")
        if summed != header["payload_sum"]:
            return CacheMiss(f"{name}: content checksum mismatch")
        _stamp(path, st, summed)
    if watch is not None:
        watch.add(name, buf, os.dup(fd), st)
    return _arrays(header, buf, start)


def _arrays(header: dict[str, Any], buffer: Any, start: int) -> dict[str, np.ndarray]:
    out = {}
    for spec in header["arrays"]:
        dtype = np.dtype(spec["dtype"])
        out[spec["name"]] = np.ndarray(tuple(spec["shape"]), dtype, buffer=buffer,
                                       offset=start + int(spec["offset"]))
    return out


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
