"""The checksum of a cache file's payload (`memforest.resident.cache_file`): two 64-bit sums of its
little-endian 64-bit words, one plain and one with each word weighted by its place in its 1 MiB block
and each block's sum by the block's place (odd multipliers, so a changed, zeroed or moved word or
block changes it). numpy computes it at about twice the speed of zlib's CRC-32, which the open of a
large memory spent most of its checksum time in; it finds damage, not tampering."""

from __future__ import annotations

import functools

import numpy as np

NAME = "sum64x2"  # as the file's header names it
BLOCK_WORDS = (1 << 20) // 8
_MASK = (1 << 64) - 1
_BLOCK_FACTOR = 0xC2B2AE3D27D4EB4F


@functools.cache
def _weights() -> np.ndarray:
    """The multiplier of each word's place in its block (made on first use: 1 MiB)."""
    golden = np.uint64(0x9E3779B97F4A7C15)
    return (np.arange(1, BLOCK_WORDS + 1, dtype=np.uint64) * golden) | np.uint64(1)


class PayloadSum:
    """The running checksum of bytes given in order (`update`); `value` of all given so far, the bytes
    padded with zeros to whole words."""

    __slots__ = ("_plain", "_weighted", "_words", "_rest")

    def __init__(self) -> None:
        self._plain = self._weighted = self._words = 0
        self._rest = b""  # bytes short of a whole word, carried to the next update

    def update(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data).cast("B")
        if self._rest:
            need = 8 - len(self._rest)
            self._rest += bytes(view[:need])
            view = view[need:]
            if len(self._rest) < 8:
                return
            self._add(np.frombuffer(self._rest, "<u8"))
            self._rest = b""
        whole = len(view) - len(view) % 8
        if whole:
            self._add(np.frombuffer(view[:whole], "<u8"))
        self._rest = bytes(view[whole:])

    def _add(self, words: np.ndarray) -> None:
        weights, i = _weights(), 0
        while i < len(words):
            at = self._words % BLOCK_WORDS
            part = words[i: i + BLOCK_WORDS - at]
            self._plain = (self._plain + int(part.sum(dtype=np.uint64))) & _MASK
            weighted = int(np.multiply(part, weights[at: at + len(part)]).sum(dtype=np.uint64))
            block = ((self._words // BLOCK_WORDS + 1) * _BLOCK_FACTOR | 1) & _MASK
            self._weighted = (self._weighted + weighted * block) & _MASK
            self._words += len(part)
            i += len(part)

    @property
    def value(self) -> str:
        rest = self._rest
        if rest:
            other = PayloadSum()
            other._plain, other._weighted, other._words = self._plain, self._weighted, self._words
            other._add(np.frombuffer(rest + b"\0" * (8 - len(rest)), "<u8"))
            return other.value
        return f"{self._plain:016x}{self._weighted:016x}"


def payload_sum(data: bytes | bytearray | memoryview) -> str:
    """The checksum of `data` in one call."""
    out = PayloadSum()
    out.update(data)
    return out.value
