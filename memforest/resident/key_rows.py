"""The key -> row map of a vector table whose keys are small non-negative integers (`int_keys=True`:
the roots table, keyed by tree rowid), kept as an array beside the table's own map so that the rows
of many keys are found in one gather. Versions share the array until one changes it."""

from __future__ import annotations

import numpy as np


class KeyRows:
    def __init__(self, size: int) -> None:
        self._rows = np.full(size, -1, np.int64)  # key -> row, -1 for none
        self._own = True  # whether this version alone holds the array (may change it in place)

    def fork(self) -> KeyRows:
        """The map of the next version; the array is shared until either side changes it."""
        out = KeyRows.__new__(KeyRows)
        out._rows, out._own = self._rows, False
        self._own = False
        return out

    def remade(self, keys: np.ndarray, rows: np.ndarray) -> KeyRows:
        """A map of this one's size holding `keys` -> `rows` only."""
        out = KeyRows(len(self._rows))
        out.set(keys, rows)
        return out

    def set(self, keys: np.ndarray, rows: np.ndarray | int) -> None:
        """Write key -> row entries (-1: remove the keys) into this version's own copy of the array."""
        if len(keys) and (keys.min() < 0):
            raise ValueError("an int_keys table takes non-negative integer keys")
        need = int(keys.max()) + 1 if len(keys) else 0
        if not self._own or need > len(self._rows):
            grown = np.full(max(len(self._rows), 2 * need), -1, np.int64)
            grown[: len(self._rows)] = self._rows
            self._rows, self._own = grown, True
        self._rows[keys] = rows

    def rows_of(self, keys: np.ndarray) -> np.ndarray:
        """The rows of integer `keys` (-1 for a key the map lacks)."""
        table = self._rows
        inside = (keys >= 0) & (keys < len(table))
        return np.where(inside, table[np.where(inside, keys, 0)], -1)
