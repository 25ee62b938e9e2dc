"""BM25 carried from version to version: immutable segments plus a map of which segment holds each
live document, so a new version costs O(documents changed) (amortised, with log-structured merges of
segments) instead of re-indexing the whole memory."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterable

from memforest.cow import CowMap
from memforest.index.lexical import K1, B, terms

_SEQ = itertools.count(1)


class Segment:
    """Postings of a batch of documents; never changes once built."""

    def __init__(self, postings: dict[str, list[tuple[str, int]]], lengths: dict[str, int]) -> None:
        self.seq = next(_SEQ)
        self.postings = postings
        self.lengths = lengths

    @classmethod
    def of(cls, docs: Iterable[tuple[str, str]]) -> Segment:
        postings: dict[str, list[tuple[str, int]]] = {}
        lengths: dict[str, int] = {}
        for doc_id, text in docs:
            words = terms(text)
            lengths[doc_id] = len(words)
            for term, count in Counter(words).items():
                postings.setdefault(term, []).append((doc_id, count))
        return cls(postings, lengths)


class VersionedLexical:
    """BM25 over the live documents of a list of segments (`scores` as `LexicalIndex.scores`)."""

    def __init__(self, docs: Iterable[tuple[str, str]] = ()) -> None:
        seg = Segment.of(docs)
        self.segments: list[Segment] = [seg] if seg.lengths else []
        self.live: CowMap[str, int] = CowMap((d, seg.seq) for d in seg.lengths)
        self.total_length = sum(seg.lengths.values())

    def __len__(self) -> int:
        return len(self.live)

    def next_version(self, removed: Iterable[str], added: Iterable[tuple[str, str]]) -> VersionedLexical:
        """A new version without `removed` and with `added` (documents re-added replace older copies)."""
        out = VersionedLexical.__new__(VersionedLexical)
        out.segments, out.live, out.total_length = list(self.segments), self.live.fork(), self.total_length
        added = list(added)
        for doc_id in [*removed, *(d for d, _ in added)]:
            out._drop(doc_id)
        seg = Segment.of(added)
        if seg.lengths:
            out.segments.append(seg)
            out.live.update((d, seg.seq) for d in seg.lengths)
            out.total_length += sum(seg.lengths.values())
        out._merge_small()
        return out

    def _drop(self, doc_id: str) -> None:
        seq = self.live.pop(doc_id, None)
        if seq is not None:
            seg = next(s for s in self.segments if s.seq == seq)
            self.total_length -= seg.lengths[doc_id]

    def _merge_small(self) -> None:
        """Merge the newest segments while the newest is at least half the size of the one before it."""
        segs = self.segments
        while len(segs) > 1 and 2 * len(segs[-1].lengths) >= len(segs[-2].lengths):
            b, a = segs.pop(), segs.pop()
            segs.append(self._merged(a, b))

    def _merged(self, a: Segment, b: Segment) -> Segment:
        postings: dict[str, list[tuple[str, int]]] = {}
        lengths: dict[str, int] = {}
        for seg in (a, b):
            for term, plist in seg.postings.items():
                keep = [p for p in plist if self.live.get(p[0]) == seg.seq]
                if keep:
                    postings.setdefault(term, []).extend(keep)
            lengths.update((d, n) for d, n in seg.lengths.items() if self.live.get(d) == seg.seq)
        out = Segment(postings, lengths)
        self.live.update((d, out.seq) for d in lengths)
        return out

    def scores(self, query: str) -> dict[str, float]:
        out: dict[str, float] = {}
        n_docs = len(self.live)
        avg = (self.total_length / n_docs) if n_docs else 1.0
        avg = avg or 1.0
        live = self.live
        for term in set(terms(query)):
            hits = [(doc, tf, seg) for seg in self.segments for doc, tf in seg.postings.get(term, ())
                    if live.get(doc) == seg.seq]
            if not hits:
                continue
            idf = math.log(1.0 + (n_docs - len(hits) + 0.5) / (len(hits) + 0.5))
            for doc, tf, seg in hits:
                norm = K1 * (1.0 - B + B * seg.lengths[doc] / avg)
                out[doc] = out.get(doc, 0.0) + idf * tf * (K1 + 1.0) / (tf + norm)
        return out
