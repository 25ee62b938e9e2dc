"""The cells of a version loaded from the store, made when first reached: by id (`LoadedCells`) and
by session, in order (`LoadedSessionCells`), each the base of a `memforest.resident.lazy_map.LazyMap`.

An open of a large memory would otherwise make a record of every cell and a list of every session's
cells. Which cells the loaded version holds is read at the open (their ids alone, from an index);
a cell's row, or a session's list of cells, is read through the version's read snapshot
(`memforest.store.tree_source.StoreTreeSource`) the first time something reaches it. A commit of
this process reads in every cell and cell list of each session it replaces or deletes before it
writes (`memforest.store.commit.read_for_commit`), so what is read later is what no commit changed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from memforest.resident.cow import _MISSING
from memforest.resident.lazy_map import KeyedLoaded
from memforest.types import Cell

if TYPE_CHECKING:  # (the source reads through the store: only named here)
    from memforest.store.tree_source import StoreTreeSource


class LoadedCells(KeyedLoaded):
    """cell id -> `Cell` of the loaded version (its text read when first needed), made when first
    asked for; `ids` is the version's set of cell ids, and their order."""

    def __init__(self, ids: Mapping[str, Any], source: StoreTreeSource) -> None:
        self.made: dict[str, Cell] = {}
        self._keys = ids
        self._source = source

    def make(self, cell_id: Any) -> Any:
        cell = self.made.get(cell_id)
        if cell is not None:
            return cell
        if cell_id not in self._keys:
            return _MISSING
        sid, idx, lo, hi, t = self._source.read("cell_row", cell_id)
        return self.made.setdefault(cell_id, Cell(cell_id, sid, idx, lo, hi, t, None, self._source))

    def make_all(self) -> None:
        """Make every cell not made yet, in one pass over the store's rows (for what reads them all)."""
        if len(self.made) >= len(self._keys):
            return
        made, ids, source = self.made, self._keys, self._source
        for cid, sid, idx, lo, hi, t in source.cell_rows():
            if cid in ids and cid not in made:
                made.setdefault(cid, Cell(cid, sid, idx, lo, hi, t, None, source))


class LoadedSessionCells(KeyedLoaded):
    """session id -> the ids of its cells in order, of the loaded version, read when first asked for;
    `sessions` is the version's set of sessions (a session may have no cell)."""

    def __init__(self, sessions: Mapping[str, Any], source: StoreTreeSource) -> None:
        self.made: dict[str, list[str]] = {}
        self._keys = sessions
        self._source = source

    def make(self, session_id: Any) -> Any:
        cells = self.made.get(session_id)
        if cells is not None:
            return cells
        if session_id not in self._keys:
            return _MISSING
        return self.made.setdefault(session_id, self._source.read("session_cells", session_id))

    def make_all(self) -> None:
        """Read every session's list not read yet, in one pass over the store's rows."""
        if len(self.made) >= len(self._keys):
            return
        lists: dict[str, list[str]] = {sid: [] for sid in self._keys if sid not in self.made}
        for sid, cid in self._source.cells_in_order():
            if sid in lists:
                lists[sid].append(cid)
        for sid, cells in lists.items():
            self.made.setdefault(sid, cells)
