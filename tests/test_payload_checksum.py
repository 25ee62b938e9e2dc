"""The checksum of a cache file's payload: the same however the bytes are given, and changed by a
changed, zeroed or moved word."""

from __future__ import annotations

import random

import pytest

from memforest.resident.checksum import BLOCK_WORDS, PayloadSum, payload_sum


def _payload(n: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(n)


@pytest.mark.parametrize("n", [0, 1, 7, 8, 64, 8 * BLOCK_WORDS, 8 * BLOCK_WORDS + 13,
                               3 * 8 * BLOCK_WORDS + 64])
def test_the_sum_does_not_depend_on_how_the_bytes_are_split(n: int) -> None:
    data = _payload(n)
    whole = payload_sum(data)
    rng = random.Random(n)
    for _ in range(3):
        summed, at = PayloadSum(), 0
        while at < n:
            step = rng.choice([1, 3, 8, 13, 4096, 8 * BLOCK_WORDS - 5, 8 * BLOCK_WORDS])
            summed.update(memoryview(data)[at: at + step])
            at += step
        assert summed.value == whole
    assert len(whole) == 32


def test_a_changed_zeroed_or_moved_word_changes_the_sum() -> None:
    data = _payload(2 * 8 * BLOCK_WORDS + 640, seed=1)
    whole = payload_sum(data)
    flipped = bytearray(data)
    flipped[8 * BLOCK_WORDS + 5] ^= 0x10
    zeroed = bytearray(data)
    zeroed[-64:] = bytes(64)
    swapped = bytearray(data)
    swapped[0:8], swapped[8:16] = data[8:16], data[0:8]
    block = 8 * BLOCK_WORDS
    moved = data[block: 2 * block] + data[:block] + data[2 * block:]  # two whole blocks swapped
    shifted = data[64:] + data[:64]
    for other in (flipped, zeroed, swapped, moved, shifted):
        assert payload_sum(other) != whole
