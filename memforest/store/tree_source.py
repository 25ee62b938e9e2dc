"""The trees, session turns, cell texts, entity members and fact fields of a loaded version, read
from the store when first needed.

Opening a memory reads its sessions' and cells' rows less their text, its facts' ids, normalised
texts and event starts (with the fact table's rows in the partitions cache; else whole facts), its
entity labels less their members, its scenes, and of its trees only their rows and what the indexes
need at once (the leaves' items, the session trees' leaf vectors and every root's vector,
`BulkRows`); a tree's structure is read the first time something reaches the tree (from the
`nodes_structure` index), a node's text and vector the first time something reads them (with its
siblings'), a session's turns, a cell's text, a label's members and a fact's other fields and
occurrences likewise. Those reads must see the version that was loaded, so the source keeps a read
transaction open on its own connection: SQLite (in WAL mode) shows it that snapshot however many
commits follow.

A snapshot held open keeps the write-ahead log from being checkpointed past it, so after each commit
this process makes the source moves to the new version (`advance`). That is sound because a commit
reads in, before it is written, every tree it changes or drops with the data of every node it
changes or drops, the text of every session and cell it replaces or deletes, the members of every
label and the fields and occurrences of every fact it changes or drops (`read_for_commit`): what is
still unread is what no commit of this process changed, and its rows are the same in both versions
(data read later are kept only for nodes the loaded version's structure holds, never a later
commit's new ones). After another process's commit the source stays where it is (a reader reloads
the new version into a new source, and the old source is released: `memforest.store.versions`).

The snapshot is open only while something may read through it: an operation (a lease), or a
version handed to a caller that is still referenced (`hold`). Otherwise it ends after each
operation (`rest`), and the next read begins it again when the store is still at the same commit
(`pin`): an idle memory holds no snapshot that would keep another process's commits in the log.

Moving is not enough for the log to be restarted: a snapshot begun before the log was checkpointed
reads frames of it, and the source always holds one begun right after a commit, so the log would
grow with every commit of a long-lived process (a 10^4-session store ingesting batches grew a 5 GB
log). Every `RELEASE_LOG_EVERY` moves the source checkpoints what is committed, in a background thread
on a connection of its own, and then begins its snapshot again on the database file alone, so the
next commit restarts the log."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from memforest.errors import StoreError
from memforest.resident.ondemand import BulkRows, NodeData, NodeKey, TreeInfo, Waiting
from memforest.state import CellSentences
from memforest.store.connection import open_reader, rollback
from memforest.trees.memtree import MemTree
from memforest.trees.node import Node
from memforest.types import FACT_DETAIL, Fact, Occurrence, Turn

RELEASE_LOG_EVERY = 16  # commits of this process between checkpoints that let the log restart
RELEASE_LOG_IN_BACKGROUND = True  # False: the commit that is due checkpoints before it returns


def vec_of(b: bytes) -> np.ndarray:
    """A stored vector, read in place (a read-only view of the row's bytes: vectors are replaced,
    never changed in place)."""
    return np.frombuffer(b, dtype=np.float32)


def json_list(text: str) -> list:
    """A JSON list column (most are empty: a leaf's children, a fact without entities)."""
    return [] if text == "[]" else json.loads(text)


def int_list(text: str) -> list[int]:
    """A JSON list of integers (a node's children), parsed without the JSON decoder; a ValueError for
    anything else."""
    if text == "[]":  # a leaf's
        return []
    if not (text.startswith("[") and text.endswith("]")):
        raise ValueError(f"not a list of node ids: {text[:40]!r}")
    return [int(x) for x in text[1:-1].split(",")]


# the columns of a node's place in its tree (`node_of_structure`), and of its data (`data_of_row`)
STRUCTURE = "node_id, level, parent, children, t_lo, item_lo, t_hi, item_hi, count, item, prev, next"
DATA = "node_id, item, text, mode, embedding"


def node_of_structure(row: tuple) -> Node:
    """A node made from its `STRUCTURE` columns (as `node_from_row` makes it)."""
    return Node(int(row[0]), int(row[1]), row[2], int_list(row[3]), (float(row[4]), str(row[5])),
                (float(row[6]), str(row[7])), int(row[8]), row[9], row[10], row[11])


def data_of_row(item: str | None, text: str, mode: str, emb: bytes,
                fact_vecs: Mapping[str, np.ndarray]) -> NodeData:
    """A node's data from its columns. A fact's leaf carries the fact's own vector (one array for
    both, as the write path makes it) when its bytes are the fact's."""
    vec = fact_vecs.get(item) if item is not None else None
    if vec is None or vec.tobytes() != emb:
        vec = vec_of(emb)
    return NodeData(text, mode, vec)


def node_of_row(row: tuple, fact_vecs: Mapping[str, np.ndarray]) -> tuple[Node, NodeData]:
    """A whole `nodes` row as its tree node and its data."""
    return node_of_structure(row[1:13]), data_of_row(row[10], row[13], row[14], row[15], fact_vecs)


class StoreTreeSource:
    """`memforest.resident.ondemand.TreeSource` over one store snapshot (see the module's notes)."""

    def __init__(self, path: Path, con: sqlite3.Connection, version: int, dim: int,
                 shapes: dict[str, tuple[int, int | None, int]], fact_vecs: Mapping[str, np.ndarray],
                 total_nodes: int, bulk: BulkRows) -> None:
        self.path = path
        self.version = version
        self.dim = dim
        self.lock = threading.RLock()
        self.data: dict[NodeKey, NodeData] = {}
        self.total_nodes = total_nodes
        self.bulk: BulkRows | None = bulk
        self._con: sqlite3.Connection | None = con
        self._spare: sqlite3.Connection | None = None
        self._shapes = shapes  # tree id -> (fanout, root, next node id), as the version stores them
        self._fact_vecs = fact_vecs  # the loaded version's (never changed): a fact's leaf shares its vector
        self._infos: dict[str, TreeInfo] = {}
        self.partial: set[str] = set()  # trees read whose nodes' data are not all in `data` yet
        self._warm_order: list[tuple[int, str]] = []  # (leaves, tree id) of entity and scene trees
        self.waiting = Waiting()  # operations reading a tree (a read ahead gives way to them)
        self._moves = 0  # moves since the log was last released (`advance`)
        self._releasing: threading.Thread | None = None  # a checkpoint under way (`_release_log`)
        self._checkpointer: sqlite3.Connection | None = None
        self._cons = [con]  # closed with the source at the latest (`weakref.finalize`)
        weakref.finalize(self, _close, self._cons)
        # the versions (states) reading through the source that are still referenced somewhere
        self._served: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
        # the versions a caller was handed (`MemForest.snapshot`) that are still referenced: while
        # one is, the read transaction stays open (`rest`)
        self._held: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
        self.leases = Waiting()  # operations using the source now (`lease`)
        self.drained = False  # every version it serves has read in what it would read (`drain`)
        self._pinned = True  # a read transaction of `version` is open on `_con` (the loader began it)
        self._stamp: tuple[int, object] | None = None  # (version, its commit time), read while pinned

    def serve(self, state: Any) -> None:
        """`state` (a loaded version, or a fork of one) reads through this source."""
        self._served[id(state)] = state

    def hold(self, state: Any) -> bool:
        """`state` was handed to a caller, who may read it at any time: keep the snapshot open while
        it is referenced. False when the snapshot has ended and the store has moved past its version."""
        with self.lock:
            if not self.pin():
                return False
            self._held[id(state)] = state
            return True

    def lease(self) -> bool:
        """An operation starts using the source: its snapshot is open until `unlease`. False (and no
        lease taken) when the snapshot had ended and the store has moved past its version since."""
        self.leases.__enter__()
        with self.lock:
            if self.pin():
                return True
        self.leases.__exit__()
        return False

    def unlease(self) -> None:
        """An operation stopped using the source (`lease`); the snapshot ends when nothing needs it."""
        self.leases.__exit__()
        self.rest()

    def pin(self) -> bool:
        """Begin the snapshot again if it has ended (`rest`), when the store is still at the version
        the source reads (the same commit: its version and time); whether the snapshot is open.
        Called with the lock held."""
        con = self._con
        if con is None:
            return False
        if self._pinned:
            return True
        try:
            con.execute("BEGIN")
            if self._read_stamp(con) == self._stamp:
                self._pinned = True
                return True
        except sqlite3.Error:
            pass
        rollback(con)
        return False

    def rest(self) -> bool:
        """End the read transaction while no operation uses the source and no version handed to a
        caller is referenced: an idle memory then holds no snapshot of the store, and the log can be
        checkpointed and restarted whatever other processes commit. The next read begins it again
        (`pin`). Whether the snapshot is ended now."""
        with self.lock:
            if not self._pinned:
                return True
            if self.leases or len(self._held) or self._releasing is not None or self._con is None:
                return False
            try:
                if self._stamp is None:
                    self._stamp = self._read_stamp(self._con)
            except sqlite3.Error:
                return False
            rollback(self._con)
            self._pinned = False
            return True

    def _read_stamp(self, con: sqlite3.Connection) -> tuple[int, object]:
        (version,) = con.execute("SELECT value FROM meta WHERE key='version'").fetchone()
        row = con.execute("SELECT time FROM operations WHERE version=?", (int(version),)).fetchone()
        return int(version), row[0] if row else None

    def _open_snapshot(self, kind: str, key: str) -> sqlite3.Connection:
        """The connection whose snapshot reads the source's version (begun again if it had ended);
        a StoreError when the source is closed or the store has moved past that version meanwhile.
        Called with the lock held."""
        con = self._con
        if con is None:
            raise StoreError(f"{self.path}: {kind} {key!r} of version {self.version} can no longer be read "
                             "(the memory was closed); open it again")
        if not self.pin():
            raise StoreError(f"{self.path}: {kind} {key!r} of version {self.version} can no longer be read: "
                             "another process has committed since, and nothing held that version open; "
                             "nothing was read: take the memory's current version")
        return con

    @property
    def closed(self) -> bool:
        return self._con is None

    def serves_any(self) -> bool:
        """Whether some version reading through the source is still referenced."""
        return len(self._served) > 0

    def drain(self) -> None:
        """Have every version the source serves that is still referenced read in what it would read
        from the store (`UserState.read_all`): the source's snapshot is then needed by none of them."""
        try:
            with self.lock:
                if not self.pin():  # ended, and the store moved past it: nothing can be read in
                    return
            for state in list(self._served.values()):
                state.read_all()
        except StoreError:  # damage, reported by what reaches it: closed the same
            pass
        finally:
            self.drained = True

    def attach(self, infos: dict[str, TreeInfo]) -> None:
        """The loaded version's trees, which `ensure` reads through."""
        self._infos = infos

    def release_bulk(self) -> None:
        """Drop the rows read for the indexes (once they are built), keeping the entity and scene
        trees largest first (`warm`)."""
        if self.bulk is not None:
            sizes = self.bulk.leaf_items
            self._warm_order = sorted(((len(v), t) for t, v in sizes.items()), key=lambda x: (-x[0], x[1]))
        self.bulk = None

    def to_warm(self, min_leaves: int) -> int:
        """How many trees `warm(min_leaves)` would read (0 for `min_leaves` 0)."""
        return sum(1 for leaves, _ in self._warm_order if leaves >= min_leaves) if min_leaves else 0

    def warm(self, min_leaves: int) -> int:
        """Read the entity and scene trees of at least `min_leaves` leaves not read yet, largest
        first; how many were read. The lock is held only to fetch a batch of rows and to install a
        built tree, and no batch is fetched while an operation reads a tree (`waiting`), so an
        operation waits for a batch at most, not for a whole large tree."""
        if not self._warm_order or not self.lease():
            return 0
        try:
            return self._warm(min_leaves)
        finally:
            self.unlease()

    def _warm(self, min_leaves: int) -> int:
        read = 0
        for leaves, tid in self._warm_order:
            if leaves < min_leaves:
                break
            info = self._infos.get(tid)
            if info is None or info.is_read:
                continue
            rows = None
            for _ in range(3):  # a commit moving the source to its version ends the statement: again
                rows = self._rows_in_batches(tid)
                if rows is not None or self._con is None:
                    break
            if rows is None:  # closed, or moving on under every try: operations read what they reach
                break
            try:
                tree, data = self._built(tid, rows)
            except StoreError:
                continue  # reported by the operation that reaches the tree
            with self.lock:
                if not info.is_read:
                    self.data.update(data)
                    info.tree = tree
                    read += 1
        self._warm_order = []
        return read

    def _rows_in_batches(self, tid: str, batch: int = 2048) -> list[tuple] | None:
        """The node rows of `tid`, fetched a batch at a time (None when the connection closed or
        moved to a newer version meanwhile)."""
        rows: list[tuple] = []
        with self.lock:
            con = self._con
            if con is None:
                return None
            try:
                cur = con.execute("SELECT * FROM nodes WHERE tree_id=?", (tid,))
            except sqlite3.Error:  # closed meanwhile (the process is exiting)
                return None
        while True:
            while self.waiting:
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
            rows += got

    def _built(self, tid: str, rows: list[tuple]) -> tuple[MemTree, dict[NodeKey, NodeData]]:
        """The tree `tid` made from its node rows, and its nodes' data (a StoreError if they do not fit)."""
        fanout, _, next_id = self._shapes[tid]
        data: dict[NodeKey, NodeData] = {}
        try:
            nodes, width = [], 4 * self.dim
            for row in rows:
                if len(row[15]) != width:
                    raise ValueError(f"a node vector of {len(row[15])} bytes, not {self.dim}-d")
                node, data[(tid, row[1])] = node_of_row(row, self._fact_vecs)
                nodes.append(node)
            tree = MemTree.from_nodes(tid, fanout, nodes, next_node_id=next_id, validate=False)
        except (ValueError, TypeError, KeyError, IndexError) as e:
            raise self._damaged(tid, e) from e
        return tree, data

    def read_tree(self, info: TreeInfo) -> MemTree:
        """The structure of `info`'s tree as the loaded version stores it: its nodes' places, not their
        texts and vectors, which are read a node's siblings at a time when first needed (`node_data`).
        A write descending a tree reads the data of the nodes on its path and their children only."""
        tid = info.tree_id
        with self.lock:
            rows = self._fetch("tree", tid, f"SELECT {STRUCTURE} FROM nodes WHERE tree_id=?", (tid,))
            fanout, _, next_id = self._shapes[tid]
            try:
                tree = MemTree.from_nodes(tid, fanout, map(node_of_structure, rows), next_node_id=next_id,
                                          validate=False)
            except (ValueError, TypeError, KeyError, IndexError) as e:
                raise self._damaged(tid, e) from e
            self.partial.add(tid)
            return tree

    def node_data(self, key: NodeKey) -> NodeData | None:
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
        for nid, item, text, mode, emb in rows:
            key = (tid, int(nid))
            if key in data:  # read before: a later version may have changed its row since
                continue
            if not isinstance(emb, bytes) or len(emb) != width:
                raise self._damaged(tid, ValueError(f"node {nid} has a vector that is not {self.dim}-d"))
            data[key] = data_of_row(item, text, mode, emb, self._fact_vecs)

    def _fetch(self, kind: str, key: str, sql: str, args: tuple) -> list[tuple]:
        """The rows `sql` gives in the loaded version (called with the lock held)."""
        con = self._open_snapshot(kind, key)
        try:
            return con.execute(sql, args).fetchall()
        except sqlite3.Error as e:
            why = " ".join(str(e).split())[:120]
            raise StoreError(f"{self.path}: the rows of {kind} {key!r} cannot be read ({why})") from e

    def _damaged(self, tid: str, e: Exception) -> StoreError:
        why = " ".join(str(e).split())[:120]
        return StoreError(f"{self.path} is damaged: the rows of tree {tid!r} do not fit together "
                          f"({type(e).__name__}: {why}); run `memforest check`")

    def session_turns(self, session_id: str) -> list[Turn]:
        """The turns of a session of the loaded version (`memforest.types.TextSource`)."""
        (rows,) = self._read_rows("session", session_id, "SELECT turns FROM sessions WHERE session_id=?")
        return [Turn(r, c, t) for r, c, t in json.loads(rows[0][0])]

    def cell_text(self, cell_id: str) -> str:
        """The text of a cell of the loaded version (`memforest.types.TextSource`)."""
        (rows,) = self._read_rows("cell", cell_id, "SELECT text FROM cells WHERE cell_id=?")
        return str(rows[0][0])

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

    def fact_occurrences(self, fact_id: str) -> list[Occurrence]:
        """The occurrences of a fact of the loaded version, in order
        (`memforest.types.FactSource`)."""
        (rows,) = self._read_rows("fact", fact_id, "SELECT session_id, cell_id, turn_lo, turn_hi, "
                                  "source_time, event_start, event_end FROM occurrences WHERE fact_id=? "
                                  "ORDER BY seq", required=False)
        return [Occurrence(*row) for row in rows]

    def fact_detail(self, fact_id: str) -> tuple:
        """The fields of a fact of the loaded version but its id, normalised text and event start, in
        the order of `FACT_DETAIL` (`memforest.types.FactSource`)."""
        (rows,) = self._read_rows("fact", fact_id, f"SELECT {FACT_DETAIL_COLUMNS} FROM facts WHERE fact_id=?")
        return detail_of_row(rows[0])

    def read_facts(self, facts: Iterable[Fact]) -> None:
        """Read in the fields and occurrences of those of `facts` that have not read them, in one pass
        over the store's rows rather than one read per fact."""
        unread = [f for f in facts if not f.is_read]
        if unread:
            with self.waiting, self.lock:
                read_facts(self._open_snapshot("facts", "*"), unread)

    def entity_members(self, label: str) -> tuple[list[str], dict[str, int]]:
        """The facts of an entity label of the loaded version and its per-session fact counts
        (`memforest.resident.ondemand.MemberSource`); a label may have none."""
        facts, sessions = self._read_rows("label", label, "SELECT fact_id FROM entity_facts WHERE label=?",
                                          "SELECT session_id, facts FROM entity_sessions WHERE label=?",
                                          required=False)
        return [r[0] for r in facts], dict(sessions)

    def _read_rows(self, kind: str, key: str, *queries: str, required: bool = True) -> list[list[tuple]]:
        """The rows each query gives for `key` in the loaded version (a StoreError when the source is
        closed or SQLite fails, and, if `required`, when a query finds no row: damage)."""
        with self.waiting, self.lock:  # a read ahead gives way (`warm`)
            found = [self._fetch(kind, key, sql, (key,)) for sql in queries]
        if required and not all(found):
            raise StoreError(f"{self.path} is damaged: {kind} {key!r} of version {self.version} has no row; "
                             "run `memforest check`")
        return found

    def ensure_all(self) -> None:
        """Read every tree of the loaded version, and all of its nodes' data."""
        for info in list(self._infos.values()):
            _ = info.tree
        for tid in sorted(self.partial):
            self.read_data(tid)

    def advance(self, version: int) -> None:
        """Move to `version`, which this process has just committed on top of the source's (every
        tree and text the commits changed read in before: `read_for_commit`), unless another process
        has committed since. The read transaction is begun on a second connection kept for it, and
        the old one ends and is kept in turn; every `RELEASE_LOG_EVERY` moves, a background thread
        checkpoints the log and begins the snapshot again (`_release_log`; the module's notes), so the
        commit does not wait for the checkpoint (`RELEASE_LOG_IN_BACKGROUND` False: it does)."""
        with self.lock:
            if not self._move(version):
                return
            self._moves += 1
            if self._moves < RELEASE_LOG_EVERY or self._releasing is not None:
                return
            self._moves = 0
            if not RELEASE_LOG_IN_BACKGROUND:
                self._release_log()
                return
            self._releasing = threading.Thread(target=self._release_log, name="memforest-log", daemon=True)
            self._releasing.start()

    def _release_log(self) -> None:
        """Checkpoint what is committed (on a connection of its own, outside the lock: reads and
        commits go on meanwhile), then begin the snapshot again at the version the source is at,
        on the database file alone, or end it when nothing uses it (`rest`)."""
        try:
            with self.lock:
                if self._con is None:
                    return
                if self._checkpointer is None:
                    self._checkpointer = open_reader(self.path, shared=True)
                    self._cons.append(self._checkpointer)
                con = self._checkpointer
            con.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            with self.lock:  # begun again only for what uses it now; else it ends (`rest`)
                if self._con is not None and self._pinned and (self.leases or len(self._held)):
                    self._move(self.version)
        except (sqlite3.Error, StoreError):
            pass  # the log is released at a later try
        finally:
            with self.lock:
                self._releasing = None
            self.rest()

    def close(self) -> None:
        """End the read transactions and close the connections (the memory that opened the source is
        closed): what is still unread can no longer be read, and the log is no longer held. A
        checkpoint `advance` started ends first."""
        releasing = self._releasing
        if releasing is not None:
            releasing.join()
        with self.lock:
            self._con = self._spare = self._checkpointer = None
            self._pinned = False
            self._infos = {}
            _close(self._cons)
            self._cons.clear()

    def _move(self, version: int) -> bool:
        """Begin a read transaction of `version` on the spare connection and end the current one;
        whether it did (the source stays on its snapshot when it is closed or the store is at
        another version). Called with the lock held."""
        if self._con is None:
            return False
        con = self._spare
        try:
            if con is None:
                con = self._spare = open_reader(self.path, shared=True)
                self._cons.append(con)
            con.execute("BEGIN")
            (found,) = con.execute("SELECT value FROM meta WHERE key='version'").fetchone()
        except (sqlite3.Error, StoreError):
            if con is not None:
                rollback(con)
            return False
        if int(found) != version:
            rollback(con)
            return False
        rollback(self._con)
        self._con, self._spare, self.version = con, self._con, version
        self._pinned, self._stamp = True, None
        return True


def _close(cons: list[sqlite3.Connection]) -> None:
    for con in cons:
        try:
            con.rollback()
            con.close()
        except sqlite3.Error:
            pass


FACT_DETAIL_COLUMNS = ", ".join(FACT_DETAIL)


def detail_of_row(row: tuple) -> tuple:
    """The values of `FACT_DETAIL` from a row of its columns (the JSON lists parsed)."""
    text, origin, role, parts, ents, topics, *rest = row
    return (text, origin, role, json_list(parts), json_list(ents), json_list(topics), *rest)


def read_facts(con: sqlite3.Connection, facts: Iterable[Fact]) -> None:
    """Set the fields and occurrences `facts` have not read from the store's rows (a full pass over
    each table that some fact needs: these are many facts)."""
    wanted = {f.id: f for f in facts if not f.is_read}
    if not wanted:
        return
    if not all(f.occurrences_read for f in wanted.values()):
        pool: dict[str, str] = {}
        occ = read_occurrences(con, pool.setdefault)
        for fid, unread in wanted.items():
            if not unread.occurrences_read:
                unread.occurrences = occ.get(fid, [])
    for fid, *row in con.execute(f"SELECT fact_id, {FACT_DETAIL_COLUMNS} FROM facts"):
        fact = wanted.get(fid)
        if fact is not None and not fact.is_read:  # (its occurrences are read by now)
            fact.take_detail(detail_of_row(row))


def read_occurrences(con: sqlite3.Connection, same: Callable[[str, str], str]
                     ) -> dict[str, list[Occurrence]]:
    """Every fact's occurrences in `seq` order, their session and cell ids shared through `same`."""
    occ: dict[str, list[Occurrence]] = {}
    unordered: set[str] = set()  # facts whose occurrences came out of `seq` order
    last: dict[str, int] = {}
    for fid, seq, sid, cid, lo, hi, t, es, ee in con.execute(
            "SELECT fact_id, seq, session_id, cell_id, turn_lo, turn_hi, source_time, event_start, event_end "
            "FROM occurrences"):  # table order: no sort by key
        if last.get(fid, -1) > seq:
            unordered.add(fid)
        last[fid] = seq
        occ.setdefault(fid, []).append(Occurrence(same(sid, sid), same(cid, cid), lo, hi, t, es, ee))
    if unordered:  # as `ORDER BY fact_id, seq` gives them
        ordered = con.execute("SELECT fact_id, session_id, cell_id, turn_lo, turn_hi, source_time, "
                              "event_start, event_end FROM occurrences WHERE fact_id IN (SELECT value FROM "
                              "json_each(?)) ORDER BY fact_id, seq", (json.dumps(sorted(unordered)),))
        for fid in unordered:
            occ[fid] = []
        for row in ordered:
            occ[row[0]].append(Occurrence(*row[1:]))
    return occ


def read_bulk(con: sqlite3.Connection, dim: int) -> BulkRows:
    """`BulkRows` of the version `con`'s transaction reads, in one pass over the nodes. A vector of
    another width is a ValueError."""
    out = BulkRows()
    width = 4 * dim
    leaf_items, cell_leaves, roots = out.leaf_items, out.cell_leaves, out.roots
    for tid, nid, item, session, root, emb in con.execute(
            "SELECT n.tree_id, n.node_id, n.item, t.family = 'session', n.node_id = t.root, "
            "CASE WHEN (t.family = 'session' AND n.level = 0) OR n.node_id = t.root THEN n.embedding END "
            "FROM nodes n JOIN trees t ON t.tree_id = n.tree_id WHERE n.level = 0 OR n.node_id = t.root"):
        if emb is not None and len(emb) != width:
            raise ValueError(f"a node vector of tree {tid!r} has {len(emb)} bytes, not {dim}-d")
        if root:
            roots[tid] = vec_of(emb)
        if item is None:
            continue
        if session:
            cell_leaves.setdefault(tid, []).append((int(nid), item, vec_of(emb)))
        else:
            leaf_items.setdefault(tid, []).append(item)
    return out
