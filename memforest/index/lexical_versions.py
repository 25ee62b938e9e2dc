"""BM25 carried from version to version: immutable segments plus, per version, which segment holds
each live document and a live mask per segment, so a new version costs O(documents changed)
(amortised, with log-structured merges of segments) instead of re-indexing the whole memory.

A segment keeps its postings as arrays (document positions and term counts), so a query costs a few
array operations per (term, segment), not a Python step per posting. A version maps each live
document to its place, the segment and the position in it as one integer (`Segment.places`), so the scores
of given documents are read with array operations too."""

from __future__ import annotations

import itertools
import math
import threading
import weakref
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

from memforest.index.lexical import K1, B, terms
from memforest.resident.cow import CowMap
from memforest.resident.lazy_map import LazyMap
from memforest.resident.packed_keys import KeyPlaces, PackedKeys
from memforest.resident.prefetch import will_need

_SEQ = itertools.count(1)
_POS_BITS = 32
_POS_MASK = (1 << _POS_BITS) - 1


class Vocabulary:
    """Term -> integer id, shared (append-only) by every version of one lineage of indexes."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def id(self, term: str) -> int:
        found = self.ids.get(term)
        if found is None:
            found = self.ids[term] = len(self.ids)
        return found


class Segment:
    """Postings of a batch of documents, never changed once built, as one sorted run of
    (term id, document position, count) triples: `terms` holds each term id once, ascending, and
    its postings are positions/counts[offsets[i]:offsets[i + 1]] (positions ascending)."""

    def __init__(self, docs: list[str], lengths: np.ndarray, term_ids: np.ndarray, positions: np.ndarray,
                 counts: np.ndarray) -> None:
        self.seq = next(_SEQ)
        self.docs: Sequence[str] = docs
        self.lengths = lengths  # terms per document, float64
        order = np.lexsort((positions, term_ids))
        term_ids, self.positions, self.counts = term_ids[order], positions[order], counts[order]
        self.terms, first = np.unique(term_ids, return_index=True)
        self.offsets = np.append(first, len(term_ids)).astype(np.int64)
        self.doc_lengths = lengths[self.positions]  # each posting's document length, read in order by a query

    def __len__(self) -> int:
        return len(self.docs)

    @classmethod
    def empty(cls) -> Segment:
        return cls([], np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int32))

    @classmethod
    def restored(cls, docs: Sequence[str], lengths: np.ndarray, terms: np.ndarray, offsets: np.ndarray,
                 positions: np.ndarray, counts: np.ndarray, doc_lengths: np.ndarray) -> Segment:
        """A segment from the arrays of one already built (as `arrays` gives them): nothing is sorted
        again; the arrays, and the documents (`PackedKeys`), may be read-only views of a cache file."""
        seg = cls.__new__(cls)
        seg.seq = next(_SEQ)
        seg.docs, seg.lengths, seg.terms, seg.offsets = docs, lengths, terms, offsets
        seg.positions, seg.counts, seg.doc_lengths = positions, counts, doc_lengths
        return seg

    def arrays(self) -> dict[str, np.ndarray]:
        """The segment's arrays (documents apart), as `restored` takes them."""
        return {"lengths": self.lengths, "terms": self.terms, "offsets": self.offsets,
                "positions": self.positions, "counts": self.counts, "doc_lengths": self.doc_lengths}

    @classmethod
    def of(cls, docs: Iterable[tuple[str, str]], vocab: Vocabulary) -> Segment:
        ids: list[str] = []
        lengths: list[int] = []
        tids: list[int] = []
        pos: list[int] = []
        tfs: list[int] = []
        for doc_id, text in docs:
            words = terms(text)
            at = len(ids)
            ids.append(doc_id)
            lengths.append(len(words))
            for term, count in Counter(words).items():
                tids.append(vocab.id(term))
                pos.append(at)
                tfs.append(count)
        return cls(ids, np.asarray(lengths, np.float64), np.asarray(tids, np.int64),
                   np.asarray(pos, np.int64), np.asarray(tfs, np.int32))

    def prefetch(self, spans: list[tuple[int, int]]) -> None:
        """Ask for the postings [lo, hi) of each of `spans` at once, where they are pages of a map."""
        runs = [(lo, hi - lo) for lo, hi in spans]
        for array in (self.positions, self.counts, self.doc_lengths):
            will_need(array, runs)

    def span(self, term_id: int) -> tuple[int, int] | None:
        """Where the postings of `term_id` lie in `positions`, `counts` and `doc_lengths`."""
        i = int(np.searchsorted(self.terms, term_id))
        if i == len(self.terms) or self.terms[i] != term_id:
            return None
        return int(self.offsets[i]), int(self.offsets[i + 1])

    def places(self) -> dict[str, int]:
        """document -> place of every document of this segment: the segment's sequence number in the
        high bits, the document's position in it in the low `_POS_BITS`."""
        places = np.arange(len(self.docs), dtype=np.int64) | (self.seq << _POS_BITS)
        return dict(zip(self.docs, places.tolist()))

    def place_map(self) -> CowMap[str, int]:
        """`places` as a copy-on-write map; over `PackedKeys`, a place is found when first asked for."""
        if isinstance(self.docs, PackedKeys):
            return LazyMap(KeyPlaces(self.docs, self.seq << _POS_BITS))
        return CowMap.over(self.places())

    def triples(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(term id, position, count) of every posting."""
        return np.repeat(self.terms, np.diff(self.offsets)), self.positions, self.counts


_BLOCK = 256  # documents per block whose maximum `_block_floor` takes


def _block_floor(scores: np.ndarray, k: int) -> float:
    """A lower bound of the k-th best of `scores`: the k-th best of its blocks' maxima (0 when fewer
    than k blocks)."""
    n = len(scores) - len(scores) % _BLOCK
    blocks = n // _BLOCK
    if blocks < k:
        return 0.0
    maxima = scores[:n].reshape(blocks, _BLOCK).max(axis=1)
    return float(np.partition(maxima, blocks - k)[blocks - k])


class LexicalScores:
    """BM25 scores of one query over one version: documents sharing no term score 0."""

    def __init__(self, index: VersionedLexical, acc: dict[int, np.ndarray]) -> None:
        self._index, self._acc = index, acc
        self.best = max((float(a.max()) for a in acc.values()), default=0.0)
        if acc:  # borrowed (`VersionedLexical.scores`): given back when these scores are dropped
            weakref.finalize(self, BUFFERS.give, list(acc.values()))

    def __bool__(self) -> bool:
        return self.best > 0.0

    def __len__(self) -> int:
        """Documents sharing a term with the query."""
        return sum(int(np.count_nonzero(a)) for a in self._acc.values())

    def get(self, doc_id: str, default: float = 0.0) -> float:
        value = float(self.get_many([doc_id])[0])
        return value if value > 0.0 else default

    def get_many(self, doc_ids: list[str]) -> np.ndarray:
        """Scores of `doc_ids` (0 for documents sharing no term), one gather per segment."""
        out = np.zeros(len(doc_ids), np.float64)
        if not doc_ids or not self._acc:
            return out
        get = self._index.live.get
        places = np.fromiter((get(d, -1) for d in doc_ids), np.int64, len(doc_ids))
        seqs = places >> _POS_BITS  # -1 for a document the version does not hold
        for seq, scores in self._acc.items():
            slots = np.flatnonzero(seqs == seq)
            if len(slots):
                out[slots] = scores[places[slots] & _POS_MASK]
        return out

    def top(self, k: int) -> list[tuple[str, float]]:
        """The k best (document, score) pairs, best first, ties by document id."""
        if k <= 0:
            return []
        # The global k-th best is at least each segment's k-th best, which is at least the k-th best of
        # the segment's block maxima (k blocks each hold a score that high): one pass over the blocks'
        # maxima instead of a selection over every scored document.
        floor = max((_block_floor(arr, k) for arr in self._acc.values()), default=0.0)
        pairs: list[tuple[str, float]] = []
        for seq, arr in self._acc.items():
            hit = np.flatnonzero(arr >= floor) if floor > 0.0 else np.flatnonzero(arr)
            if len(hit):
                docs = self._index.segment(seq).docs
                keys = docs.keys_at(hit) if isinstance(docs, PackedKeys) else [docs[i] for i in hit.tolist()]
                pairs.extend(zip(keys, arr[hit].tolist()))
        pairs.sort(key=lambda p: (-p[1], p[0]))
        return pairs[:k]

    def items(self) -> list[tuple[str, float]]:
        return self.top(len(self))


class VersionedLexical:
    """BM25 over the live documents of a list of segments."""

    def __init__(self, docs: Iterable[tuple[str, str]] = ()) -> None:
        self.vocab = Vocabulary()
        seg = Segment.of(docs, self.vocab)
        self.segments: list[Segment] = [seg] if len(seg) else []
        self.live: CowMap[str, int] = CowMap.over(seg.places())  # document -> its place (`Segment.places`)
        self.masks: dict[int, np.ndarray] = {seg.seq: np.ones(len(seg), bool)} if len(seg) else {}
        self._own: set[int] = set(self.masks)
        self.dead: dict[int, int] = dict.fromkeys(self.masks, 0)  # removed documents per segment
        self._by_seq = {s.seq: s for s in self.segments}
        self.total_length = float(seg.lengths.sum())

    def __len__(self) -> int:
        return len(self.live)

    def segment(self, seq: int) -> Segment:
        return self._by_seq[seq]

    @classmethod
    def of_segment(cls, seg: Segment, vocab: Vocabulary) -> VersionedLexical:
        """The index of exactly the documents of `seg`, whose term ids are `vocab`'s."""
        out = cls.__new__(cls)
        out.vocab, out.segments = vocab, [seg] if len(seg) else []
        out.live = seg.place_map()
        out.masks = {seg.seq: np.ones(len(seg), bool)} if len(seg) else {}
        out._own, out.dead = set(out.masks), dict.fromkeys(out.masks, 0)
        out._by_seq = {s.seq: s for s in out.segments}
        out.total_length = float(seg.lengths.sum())
        return out

    def compacted(self) -> Segment:
        """One segment of every live document (the removed ones dropped): what a cache stores."""
        if not self.segments:
            return Segment.empty()
        seg, mask = self.segments[0], self.masks[self.segments[0].seq]
        for nxt in self.segments[1:]:
            seg = self._merged(seg, mask, nxt, self.masks[nxt.seq])
            mask = np.ones(len(seg), bool)
        if not mask.all():
            seg = self._merged(seg, mask, Segment.empty(), np.zeros(0, bool))
        return seg

    def next_version(self, removed: Iterable[str], added: Iterable[tuple[str, str]]) -> VersionedLexical:
        """A new version without `removed` and with `added` (documents re-added replace older copies)."""
        out = VersionedLexical.__new__(VersionedLexical)
        out.vocab, out.segments, out.live, out.total_length = (self.vocab, list(self.segments),
                                                               self.live.fork(), self.total_length)
        out.masks, out._own, out._by_seq, out.dead = (dict(self.masks), set(), dict(self._by_seq),
                                                      dict(self.dead))
        added = list(added)
        for doc_id in [*removed, *(d for d, _ in added)]:
            out._drop(doc_id)
        seg = Segment.of(added, self.vocab)
        if len(seg):
            out._add(seg)
            out.live.update(seg.places())
            out.total_length += float(seg.lengths.sum())
        out._merge_small()
        return out

    def _add(self, seg: Segment) -> None:
        self.segments.append(seg)
        self._by_seq[seg.seq] = seg
        self.masks[seg.seq] = np.ones(len(seg), bool)
        self._own.add(seg.seq)
        self.dead[seg.seq] = 0

    def _drop(self, doc_id: str) -> None:
        place = self.live.pop(doc_id, None)
        if place is None:
            return
        seq, at = place >> _POS_BITS, place & _POS_MASK
        seg = self._by_seq[seq]
        if seq not in self._own:  # the mask is shared with the version before: copy it first
            self.masks[seq] = self.masks[seq].copy()
            self._own.add(seq)
        self.masks[seq][at] = False
        self.dead[seq] += 1
        self.total_length -= float(seg.lengths[at])

    def _merge_small(self) -> None:
        """Merge the newest segments while the newest is at least half the size of the one before it."""
        segs = self.segments
        while len(segs) > 1 and 2 * len(segs[-1]) >= len(segs[-2]):
            b, a = segs.pop(), segs.pop()
            for seg in (a, b):
                self._by_seq.pop(seg.seq)
                self.dead.pop(seg.seq)
            merged = self._merged(a, self.masks.pop(a.seq), b, self.masks.pop(b.seq))
            self._add(merged)
            self.live.update(merged.places())

    @staticmethod
    def _merged(a: Segment, mask_a: np.ndarray, b: Segment, mask_b: np.ndarray) -> Segment:
        """One segment of the live documents of `a` then `b` (array operations only)."""
        parts = []
        offset = 0
        for seg, mask in ((a, mask_a), (b, mask_b)):
            new = np.full(len(mask), -1, np.int64)
            new[mask] = np.arange(offset, offset + int(mask.sum()))
            offset += int(mask.sum())
            tids, pos, tf = seg.triples()
            moved = new[pos]
            keep = moved >= 0
            parts.append((tids[keep], moved[keep], tf[keep]))
        docs = [d for seg, mask in ((a, mask_a), (b, mask_b)) for d, live in zip(seg.docs, mask.tolist())
                if live]
        lengths = np.concatenate([a.lengths[mask_a], b.lengths[mask_b]])
        return Segment(docs, lengths, *(np.concatenate([p[i] for p in parts]) for i in range(3)))

    def scores(self, query: str) -> LexicalScores:
        """BM25 of every live document sharing a term with `query`. Per (term, segment) a few passes
        over that term's contiguous postings (the removed-document mask only where the segment has
        removed documents), added into the segment's scores in sorted term order. The scores and the
        per-term temporaries are arrays `BUFFERS` lends: a query between writes then touches memory
        already mapped instead of megabytes of fresh pages (at 10^4 sessions ~1,100 page faults, ~5
        of the query's 6 ms, on a virtual machine)."""
        n_docs = len(self.live)
        avg = (self.total_length / n_docs) if n_docs else 1.0
        avg = avg or 1.0
        base, scale = K1 * (1.0 - B), K1 * B / avg
        spans: dict[int, list[tuple[Segment, int, int]]] = {}  # term id -> (segment, lo, hi)
        for term in sorted(set(terms(query))):
            term_id = self.vocab.ids.get(term)
            if term_id is not None:
                spans[term_id] = [(seg, *span) for seg in self.segments
                                  if (span := seg.span(term_id)) is not None]
        for seg in self.segments:
            seg.prefetch([(lo, hi) for held in spans.values() for s, lo, hi in held if s is seg])
        found: dict[int, list[tuple[np.ndarray, np.ndarray, np.ndarray, float]]] = {}
        for held in spans.values():
            parts = []
            df = 0
            for seg, lo, hi in held:
                pos, tf, length = seg.positions[lo:hi], seg.counts[lo:hi], seg.doc_lengths[lo:hi]
                if self.dead[seg.seq]:
                    keep = self.masks[seg.seq][pos]
                    pos, tf, length = pos[keep], tf[keep], length[keep]
                if len(pos):
                    df += len(pos)
                    parts.append((seg.seq, pos, tf, length))
            if not df:
                continue
            idf = math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))
            for seq, pos, tf, length in parts:
                found.setdefault(seq, []).append((pos, tf, length, idf))
        acc: dict[int, np.ndarray] = {}
        for seq, postings in found.items():
            out = acc[seq] = BUFFERS.take(len(self._by_seq[seq]))
            out.fill(0.0)
            for pos, tf, length, idf in postings:
                # (idf * (K1 + 1)) * tf / (tf + base + scale * length), in two borrowed arrays
                weight, norm = BUFFERS.take(len(pos)), BUFFERS.take(len(pos))
                np.multiply(length, scale, out=weight)
                np.add(tf, base, out=norm)
                norm += weight
                np.multiply(tf, idf * (K1 + 1.0), out=weight)
                np.divide(weight, norm, out=weight)
                np.add.at(out, pos, weight)
                BUFFERS.give([weight, norm])
        return LexicalScores(self, acc)


class Buffers:
    """Float64 arrays lent and given back (`take`, `give`), the best fitting free one first; free ones
    are kept up to `keep_bytes` in all. Thread-safe."""

    def __init__(self, keep_bytes: int = 64 << 20) -> None:
        self._free: list[np.ndarray] = []
        self._kept = 0
        self._keep_bytes = keep_bytes
        self._lock = threading.Lock()

    def take(self, n: int) -> np.ndarray:
        """An array of `n` float64 (its contents undefined)."""
        with self._lock:
            fits = [i for i, b in enumerate(self._free) if len(b) >= n]
            if fits:
                whole = self._free.pop(min(fits, key=lambda i: len(self._free[i])))
                self._kept -= whole.nbytes
                return whole[:n]
        return np.empty(max(n, 1), np.float64)[:n]

    def give(self, arrays: Iterable[np.ndarray]) -> None:
        """Give back arrays `take` lent (nothing may use them afterwards)."""
        with self._lock:
            for a in arrays:
                whole = a if a.base is None else a.base
                if isinstance(whole, np.ndarray) and self._kept + whole.nbytes <= self._keep_bytes:
                    self._free.append(whole)
                    self._kept += whole.nbytes


BUFFERS = Buffers()  # what scores take: one lender for every index of the process
