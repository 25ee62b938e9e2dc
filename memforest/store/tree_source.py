"""The trees, node data and records of a loaded version, read from the store when first needed
(`StoreTreeSource`: the `memforest.resident.ondemand.Source` of a version loaded from the store).

Opening a memory reads its sessions' and cells' rows less their text, its facts' ids, normalised
texts and event starts (with the fact table's rows in the partitions cache; else whole facts), its
entity labels less their members, its scenes, and of its trees only their rows and what the indexes
need at once (the leaves' items, the session trees' leaf vectors and every root's vector,
`BulkRows`); a tree's structure is read the first time something reaches the tree (from the
`nodes_structure` index), a node's text and vector the first time something reads them (with its
siblings'), a session's turns, a cell's text, a label's members and a fact's other fields and
occurrences likewise. Those reads must see the version that was loaded: the source reads through a
read transaction kept open on it (`memforest.store.read_snapshot`). After the open, the largest
entity and scene trees are read ahead, giving way to any operation's read (`warm`)."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any

from memforest.errors import StoreError
from memforest.resident.cow import CowMap, CowSet
from memforest.resident.ondemand import BulkRows, Kind, NodeData, NodeKey, TreeInfo, Waiting
from memforest.state import FactVectors
from memforest.store.loaded_facts import LoadedFacts
from memforest.store.read_snapshot import ReadSnapshot
from memforest.store.rows import (
    DATA,
    FACT_DETAIL_COLUMNS,
    STRUCTURE,
    data_of_row,
    detail_of_row,
    node_of_structure,
    read_facts,
    vec_of,
)
from memforest.trees.memtree import MemTree, Node
from memforest.types import CellSentences, Fact, Occurrence, Turn

# an entity label's members: its facts, and its fact count per session
LABEL_FACTS = "SELECT fact_id FROM entity_facts WHERE label=?"
LABEL_SESSIONS = "SELECT session_id, facts FROM entity_sessions WHERE label=?"
_NO_SEQ_BOUND = 1 << 62  # the bound of the rows a fact reads when no commit has appended to them


def _members_of(facts: list[tuple], sessions: list[tuple],
                ids: Mapping[str, str]) -> tuple[CowSet[str], CowMap[str, int]]:
    """A label's members from its `LABEL_FACTS` and `LABEL_SESSIONS` rows, each fact named by the
    string `ids` holds for it when it holds one."""
    return CowSet.over(dict.fromkeys(ids.get(r[0], r[0]) for r in facts)), CowMap.over(dict(sessions))


class StoreTreeSource(ReadSnapshot):
    """What a version loaded from the store reads when first needed (`Source.read`), through the
    read snapshot of the version (see the module's notes)."""

    def __init__(self, path: Path, con: sqlite3.Connection, version: int, dim: int,
                 shapes: dict[str, tuple[int, int | None, int]], fact_vecs: FactVectors,
                 total_nodes: int, bulk: BulkRows) -> None:
        super().__init__(path, con, version)
        self.dim = dim
        self.data: dict[NodeKey, NodeData] = {}
        self.total_nodes = total_nodes
        self.bulk: BulkRows | None = bulk
        self._shapes = shapes  # tree id -> (fanout, root, next node id), as the version stores them
        self._fact_vecs = fact_vecs  # the loaded version's (never changed): a fact's leaf shares its vector
        self._infos: dict[str, TreeInfo] = {}
        self.partial: set[str] = set()  # trees read whose nodes' data are not all in `data` yet
        self._warm_order: list[tuple[int, str]] = []  # (leaves, tree id) of entity and scene trees
        self._members_ahead: dict[str, tuple[CowSet[str], CowMap[str, int]]] = {}  # label -> members
        self._members_read: set[str] = set()  # labels whose records asked for their members
        self.waiting = Waiting()  # operations reading a tree (a read ahead gives way to them)
        self._readers: dict[str, Any] = {
            "turns": self._turns, "text": self._text, "fact": self._fact, "occurrences": self._occurrences,
            "members": self._members, "tree": self._tree, "node": self._node, "fact_key": self._fact_key,
            "cell_row": self._cell_row, "session_cells": self._session_cells, "said": self._said,
            "last_seq": self._last_seq}
        # fact id -> the last sequence number of its rows when a commit of this process was first to
        # append to them (`last_seq`): the loaded version's fact reads no row past it
        self.last_seqs: dict[str, int] = {}
        self.loaded_facts: LoadedFacts | None = None  # the facts made when first reached (`load.read_state`)

    def read(self, kind: Kind, key: Any) -> Any:
        """What a record or a tree of the loaded version reads when first needed, by kind and key
        (`memforest.resident.ondemand.Source`)."""
        return self._readers[kind](key)

    def attach(self, infos: dict[str, TreeInfo]) -> None:
        """The loaded version's trees, which `ensure` reads through."""
        self._infos = infos

    def release_bulk(self) -> None:
        """Drop the rows read for the indexes (once they are built), keeping the entity and scene
        trees largest first (`warm`)."""
        if self.bulk is not None:
            items = self.bulk.leaf_items
            sizes = items.sizes() if hasattr(items, "sizes") else {t: len(v) for t, v in items.items()}
            self._warm_order = sorted(((n, t) for t, n in sizes.items()), key=lambda x: (-x[0], x[1]))
        self.bulk = None

    def to_warm(self, min_leaves: int, share: float) -> int:
        """How many trees `warm(min_leaves, share)` would read."""
        return len(self._to_read(min_leaves, share))

    def _to_read(self, min_leaves: int, share: float) -> list[str]:
        """The entity and scene trees of at least `min_leaves` leaves (none for 0), largest first, while
        together they hold at most `share` of these trees' leaves."""
        budget, held, out = share * sum(leaves for leaves, _ in self._warm_order), 0, []
        for leaves, tid in self._warm_order if min_leaves else ():
            held += leaves
            if leaves < min_leaves or held > budget:
                break
            out.append(tid)
        return out

    def warm(self, min_leaves: int, share: float) -> int:
        """Read the trees `_to_read(min_leaves, share)` names that are not read yet, largest first; how
        many were read. A tree is read as its structure (its repeated fields shared: `MemTree.from_nodes`)
        and the summaries and vectors of its nodes above level 1 (what a write refreshing a path climbs
        through); the data of its leaves and level-1 nodes, most of its memory, are read when reached, a
        node's siblings at a time (`_node`), a write's in one statement (`memforest.refresh`). An entity
        tree's label's members are read with it. The lock is held only to fetch a batch of rows and to
        install a built tree, and no batch is fetched while an operation runs (`leases`, `waiting`), so an
        operation waits for a batch at most, not for a whole large tree."""
        if not self._warm_order or not self.lease():
            return 0
        try:
            return self._warm(self._to_read(min_leaves, share))
        finally:
            self.unlease()

    def _warm(self, to_read: list[str]) -> int:
        read = 0
        # the facts' ids as the memory holds them: a fact's leaves name it by that string, not by one of
        # their own (a read-ahead tree is mostly leaves of facts)
        ids = {k: k for k in self._fact_vecs}

        def node(row: tuple) -> Node:
            return node_of_structure(row, ids)
        for tid in to_read:
            info = self._infos.get(tid)
            if info is None or info.is_read:
                continue
            nodes = inner = None
            try:
                for _ in range(3):  # a commit moving the source to its version ends the statement: again
                    nodes = self._rows_in_batches(tid, f"SELECT {STRUCTURE} FROM nodes WHERE tree_id=?", node)
                    inner = self._rows_in_batches(
                        tid, f"SELECT {DATA} FROM nodes WHERE tree_id=? AND level>1")
                    if (nodes is not None and inner is not None) or self._con is None:
                        break
                if nodes is None or inner is None:  # closed, or moving on under every try: operations read
                    break
                tree = self._structure(tid, nodes)
            except StoreError:
                continue  # reported by the operation that reaches the tree
            with self.lock:
                if not info.is_read:
                    info.tree = tree
                    self.partial.add(tid)
                    with suppress(StoreError):  # reported by the operation that reaches the node
                        self._add_data(tid, [row for row in inner if row[0] in tree.nodes])
                    read += 1
            if info.family == "entity" and not self._warm_members(info.label, ids):
                break
        self._warm_order = []
        return read

    def _warm_members(self, label: str, ids: Mapping[str, str]) -> bool:
        """Read ahead the members of entity label `label` (its tree's facts, which a write adding to the
        label checks and counts), kept until the label's record first asks for them (`_members`);
        False when the connection closed or moved on meanwhile."""
        facts = self._rows_in_batches(label, LABEL_FACTS)
        sessions = self._rows_in_batches(label, LABEL_SESSIONS)
        if facts is None or sessions is None:
            return False
        members = _members_of(facts, sessions, ids)
        with self.lock:
            if label not in self._members_read:  # (else its record holds them already)
                self._members_ahead[label] = members
        return True

    def _rows_in_batches(self, tid: str, sql: str, convert: Callable[[tuple], Any] | None = None,
                         batch: int = 2048) -> list[Any] | None:
        """The rows `sql` selects for `tid` (a tree's nodes, or a label's members), fetched a batch at a
        time and each made what `convert` makes of it as its batch comes, so no more than a batch of raw
        rows is held (None when the connection closed or moved to a newer version meanwhile; a StoreError
        when a row does not convert)."""
        rows: list[Any] = []
        with self.lock:
            con = self._con
            if con is None:
                return None
            try:
                cur = con.execute(sql, (tid,))
            except sqlite3.Error:  # closed meanwhile (the process is exiting)
                return None
        while True:
            while self.waiting or len(self.leases) > 1:  # an operation reads, or runs beside the read ahead
                time.sleep(0.001)
            with self.lock:
                if self._con is not con:  # moved to a newer version meanwhile: the statement is gone
                    return None
                try:
                    got = cur.fetchmany(batch)
                except sqlite3.Error:
                    return None
            if not got:
                return rows
            rows += got if convert is None else self._nodes(tid, got, convert)

    def _nodes(self, tid: str, rows: list[tuple], convert: Callable[[tuple], Any]) -> list[Any]:
        """`rows` of tree `tid` each made what `convert` makes of it (a StoreError if one does not fit)."""
        try:
            return list(map(convert, rows))
        except (ValueError, TypeError, KeyError, IndexError) as e:
            raise self._damaged(tid, e) from e

    def _structure(self, tid: str, nodes: Iterable[Node]) -> MemTree:
        """The tree `tid` made from its nodes (a StoreError if they do not fit)."""
        fanout, _, next_id = self._shapes[tid]
        try:
            return MemTree.from_nodes(tid, fanout, nodes, next_node_id=next_id, validate=False)
        except (ValueError, TypeError, KeyError, IndexError) as e:
            raise self._damaged(tid, e) from e

    def _tree(self, tid: str) -> MemTree:
        """The structure of tree `tid` as the loaded version stores it: its nodes' places, not their
        texts and vectors, which are read a node's siblings at a time when first needed (`_node`).
        A write descending a tree reads the data of the nodes on its path and their children only."""
        with self.lock:
            rows = self._fetch("tree", tid, f"SELECT {STRUCTURE} FROM nodes WHERE tree_id=?", (tid,))
            nodes = self._nodes(tid, rows, node_of_structure)
            del rows
            tree = self._structure(tid, nodes)
            self.partial.add(tid)
            return tree

    def _node(self, key: NodeKey) -> NodeData | None:
        """The data of node `key` of the loaded version (None when the version has no such node),
        read with those of its siblings not read yet, its tree's structure first if need be."""
        found = self.data.get(key)
        if found is not None:
            return found
        tid, nid = key
        info = self._infos.get(tid)
        if info is None:
            return None
        tree = info.tree
        node = tree.nodes.get(nid)
        if node is None:
            return None
        self._read_nodes(tid, [nid] if node.parent is None else tree.nodes[node.parent].children)
        found = self.data.get(key)
        if found is None:
            raise StoreError(f"{self.path} is damaged: node {nid} of tree {tid!r} has no row; "
                             "run `memforest check`")
        return found

    def read_ahead(self, keys: Iterable[NodeKey]) -> None:
        """Read, one statement per tree, the data of those of `keys` that trees already read hold
        and that are not read yet (a refresh's next level: the children of the nodes it summarises)."""
        by_tree: dict[str, list[int]] = {}
        for tid, nid in keys:
            if tid in self.partial and (tid, nid) not in self.data:
                by_tree.setdefault(tid, []).append(nid)
        for tid, nids in by_tree.items():
            info = self._infos.get(tid)
            if info is not None and info.is_read:
                held = info.tree.nodes
                self._read_nodes(tid, [n for n in nids if n in held])

    def _read_nodes(self, tid: str, nids: list[int]) -> None:
        """Read the data of nodes `nids` of `tid` (nodes of the loaded version) not read yet."""
        with self.waiting, self.lock:
            if tid in self.partial:
                want = [n for n in dict.fromkeys(nids) if (tid, n) not in self.data]
                if want:
                    marks = ",".join("?" * len(want))
                    self._add_data(tid, self._fetch(
                        "tree", tid, f"SELECT {DATA} FROM nodes WHERE tree_id=? AND node_id IN ({marks})",
                        (tid, *want)))

    def read_data(self, tree_id: str) -> None:
        """Read the data of every node of `tree_id` not read yet (its structure first if need be)."""
        info = self._infos.get(tree_id)
        if info is None:
            return
        held = info.tree.nodes  # the loaded version's: a later commit's new nodes are not its
        with self.waiting, self.lock:
            if tree_id in self.partial:
                rows = self._fetch("tree", tree_id, f"SELECT {DATA} FROM nodes WHERE tree_id=?", (tree_id,))
                self._add_data(tree_id, [row for row in rows if row[0] in held])
                self.partial.discard(tree_id)

    def _add_data(self, tid: str, rows: list[tuple]) -> None:
        """Keep the data of `rows` (`DATA` columns of nodes of `tid` in the loaded version) that is
        not kept yet."""
        data, width = self.data, 4 * self.dim
        # a fact's leaf shares the fact's vector when they are equal (`data_of_row`): the vectors of
        # the facts of leaves not kept yet are asked for at once, not faulted one leaf at a time (about
        # 60 an ingest at 10^5 sessions, when the fact table's map is not in memory); a session tree's
        # leaves are cells, none of them a fact
        info = self._infos.get(tid)
        if info is not None and info.family != "session":
            self._fact_vecs.will_need([item for nid, item, *_ in rows
                                       if item is not None and (tid, int(nid)) not in data])
        for nid, item, text, mode, emb in rows:
            key = (tid, int(nid))
            if key in data:  # read before: a later version may have changed its row since
                continue
            if not isinstance(emb, bytes) or len(emb) != width:
                raise self._damaged(tid, ValueError(f"node {nid} has a vector that is not {self.dim}-d"))
            data[key] = data_of_row(item, text, mode, emb, self._fact_vecs)

    def _damaged(self, tid: str, e: Exception) -> StoreError:
        why = " ".join(str(e).split())[:120]
        return StoreError(f"{self.path} is damaged: the rows of tree {tid!r} do not fit together "
                          f"({type(e).__name__}: {why}); run `memforest check`")

    def _turns(self, session_id: str) -> list[Turn]:
        """The turns of a session of the loaded version."""
        (rows,) = self._read_rows("session", session_id, "SELECT turns FROM sessions WHERE session_id=?")
        return [Turn(r, c, t) for r, c, t in json.loads(rows[0][0])]

    def _text(self, cell_id: str) -> str:
        """The text of a cell of the loaded version."""
        (rows,) = self._read_rows("cell", cell_id, "SELECT text FROM cells WHERE cell_id=?")
        return str(rows[0][0])

    def _occurrences(self, fact_id: str) -> list[Occurrence]:
        """The occurrences of a fact of the loaded version, in order (the rows up to its `last_seq`)."""
        with self.waiting, self.lock:
            rows = self._fetch("fact", fact_id, "SELECT session_id, cell_id, turn_lo, turn_hi, source_time, "
                               "event_start, event_end FROM occurrences WHERE fact_id=? AND seq<=? "
                               "ORDER BY seq",
                               (fact_id, self._bound(fact_id)))
        return [Occurrence(*row) for row in rows]

    def _bound(self, fact_id: str) -> int:
        """The last sequence number of the rows a fact of the loaded version reads (`last_seqs`)."""
        return self.last_seqs.get(fact_id, _NO_SEQ_BOUND)

    def _said(self, key: tuple[str, str]) -> bool:
        """Whether a fact of the loaded version has an occurrence from a session (`key`: the fact's id
        and the session's), by one probe of the occurrences' index by session."""
        fact_id, session_id = key
        with self.waiting, self.lock:
            return bool(self._fetch(
                "fact", fact_id, "SELECT 1 FROM occurrences INDEXED BY occurrences_by_session WHERE "
                "session_id=? AND fact_id=? AND seq<=? LIMIT 1",
                (session_id, fact_id, self._bound(fact_id))))

    def _last_seq(self, fact_id: str) -> int | None:
        """The last sequence number of the rows of a fact of the loaded version, kept as the bound of
        its reads from now on (`last_seqs`): a commit of this process is about to append rows past
        it (`memforest.types.Appended`). None when it has no row (the store is damaged)."""
        with self.waiting, self.lock:
            last = self.last_seqs.get(fact_id)
            if last is None:
                (found,) = self._fetch("fact", fact_id, "SELECT MAX(seq) FROM occurrences WHERE fact_id=?",
                                       (fact_id,))
                if found[0] is None:
                    return None
                last = self.last_seqs[fact_id] = int(found[0])
            return last

    def _fact(self, fact_id: str) -> tuple:
        """The fields of a fact of the loaded version but its id, normalised text and event start, in
        the order of `FACT_DETAIL`."""
        (rows,) = self._read_rows("fact", fact_id, f"SELECT {FACT_DETAIL_COLUMNS} FROM facts WHERE fact_id=?")
        return detail_of_row(rows[0])

    def _cell_row(self, cell_id: str) -> tuple[str, int, int, int, float]:
        """The session, index, turns and time of a cell of the loaded version."""
        (rows,) = self._read_rows("cell", cell_id,
                                  "SELECT session_id, idx, turn_lo, turn_hi, time FROM cells WHERE cell_id=?")
        return rows[0]

    def _session_cells(self, session_id: str) -> list[str]:
        """The ids of a session's cells of the loaded version, in order (`cells_in_order`)."""
        (rows,) = self._read_rows("session", session_id, "SELECT cell_id FROM cells WHERE session_id=? "
                                  "ORDER BY idx", required=False)
        return [row[0] for row in rows]

    def cell_rows(self) -> list[tuple[str, str, int, int, int, float]]:
        """(id, session, index, turns, time) of every cell of the loaded version, in one statement."""
        return self._read_rows("cells", "*", "SELECT cell_id, session_id, idx, turn_lo, turn_hi, time "
                               "FROM cells", required=False, bound=False)[0]

    def cells_in_order(self) -> list[tuple[str, str]]:
        """(session, cell id) of every cell of the loaded version, by session and index."""
        return self._read_rows("cells", "*", "SELECT session_id, cell_id FROM cells ORDER BY session_id, idx",
                               required=False, bound=False)[0]

    def _fact_key(self, fact_id: str) -> tuple[str, float | None]:
        """The normalised text and event start of a fact of the loaded version."""
        (rows,) = self._read_rows("fact", fact_id, "SELECT norm, event_start FROM facts WHERE fact_id=?")
        return rows[0]

    def fact_keys(self) -> list[tuple[str, str, float | None]]:
        """(id, normalised text, event start) of every fact of the loaded version, in one statement."""
        return self._read_rows("facts", "*", "SELECT fact_id, norm, event_start FROM facts",
                               required=False, bound=False)[0]

    def facts_with_norm(self, norm: str) -> list[str]:
        """The ids of the facts whose normalised text is `norm` (`facts_by_norm`), in the snapshot."""
        (rows,) = self._read_rows("norm", norm, "SELECT fact_id FROM facts WHERE norm=?", required=False)
        return [row[0] for row in rows]

    def read_facts(self, facts: Iterable[Fact]) -> None:
        """Read in the fields and occurrences of those of `facts` that have not read them, in one pass
        over the store's rows rather than one read per fact."""
        unread = [f for f in facts if not f.is_read]
        if unread:
            with self.waiting, self.lock:
                read_facts(self._open_snapshot("facts", "*"), unread, self.last_seqs)

    def _members(self, label: str) -> tuple[CowSet[str], CowMap[str, int]]:
        """The facts of an entity label of the loaded version and its per-session fact counts (a
        label may have none): read ahead (`_warm_members`) or now."""
        with self.lock:
            self._members_read.add(label)
            ahead = self._members_ahead.pop(label, None)
        if ahead is not None:
            return ahead
        facts, sessions = self._read_rows("label", label, LABEL_FACTS, LABEL_SESSIONS, required=False)
        return _members_of(facts, sessions, {})

    def _read_rows(self, kind: str, key: str, *queries: str, required: bool = True,
                   bound: bool = True) -> list[list[tuple]]:
        """The rows each query gives for `key` (a parameter of each, unless not `bound`) in the loaded
        version (a StoreError when the source is closed or SQLite fails, and, if `required`, when a
        query finds no row: damage)."""
        with self.waiting, self.lock:  # a read ahead gives way (`warm`)
            found = [self._fetch(kind, key, sql, (key,) if bound else ()) for sql in queries]
        if required and not all(found):
            raise StoreError(f"{self.path} is damaged: {kind} {key!r} of version {self.version} has no row; "
                             "run `memforest check`")
        return found

    def cell_sentences(self, version: int, cell_ids: Sequence[str]) -> dict[str, CellSentences] | None:
        """The stored sentences of those of `cell_ids` that have them, in one statement
        (`memforest.sentences.SentenceStore`); None unless the source reads `version` (and can still
        read it). A row whose vectors are not a whole number of `dim`-d rows is left out."""
        width = 4 * self.dim
        with self.waiting, self.lock:
            if version != self.version or self._con is None:
                return None
            try:
                rows = self._open_snapshot("cells", "sentences").execute(
                    "SELECT cell_id, words, vectors FROM cell_sentences WHERE cell_id IN "
                    "(SELECT value FROM json_each(?))", (json.dumps(list(cell_ids)),)).fetchall()
            except (sqlite3.Error, StoreError):  # the cells' sentences are then embedded by the query
                return None
        out: dict[str, CellSentences] = {}
        for cid, words, blob in rows:
            if blob is None:
                out[cid] = CellSentences(int(words), None)
            elif isinstance(blob, bytes) and width and len(blob) % width == 0:
                out[cid] = CellSentences(int(words), vec_of(blob).reshape(-1, self.dim))
        return out

    def ensure_all(self) -> None:
        """Read every tree of the loaded version, and all of its nodes' data."""
        for info in list(self._infos.values()):
            _ = info.tree
        for tid in sorted(self.partial):
            self.read_data(tid)

    def close(self) -> None:
        """End the read snapshot (`ReadSnapshot.close`): what is still unread can no longer be read."""
        super().close()
        with self.lock:
            self._infos = {}
