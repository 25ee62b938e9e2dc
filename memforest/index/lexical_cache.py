"""The lexical index of a committed version, cached beside the database in query-ready form.

Building BM25 over every cell and fact reads and tokenises the whole memory (seconds at 10^4
sessions); the cache holds the built index as one segment (`VersionedLexical.compacted`): its
posting arrays, memory-mapped, and its document ids and vocabulary. A cache is used only for the
store version (`stamp`) it was written for and only when its checksums match and its documents are
exactly the state's cells and facts; anything else is a `CacheMiss` and the index is rebuilt from
the state (and the cache rewritten). Writes never touch the cache: it is rewritten when an index is
built afresh and when a process closes the memory with a newer resident version."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np

from memforest.index.lexical_versions import Segment, VersionedLexical, Vocabulary
from memforest.resident.cache_file import (
    CacheMiss,
    MappedFiles,
    pack_strings,
    read_arrays,
    unpack_strings,
    write_arrays,
)
from memforest.resident.lazy_map import LazyMap
from memforest.resident.packed_keys import PackedKeys
from memforest.resident.prefetch import will_need
from memforest.state import UserState

KIND = "lexical"
FORMAT = 2  # 2: the documents as `PackedKeys`
FILE_NAME = "lexical.cache"
_SEGMENT_ARRAYS = ("lengths", "terms", "offsets", "positions", "counts", "doc_lengths")  # Segment.restored


def write_lexical(path: Path, stamp: str, lexical: VersionedLexical) -> int:
    """Write `lexical` (the index of the committed version `stamp`) to `path`; returns its bytes."""
    seg = lexical.compacted()
    terms = [""] * len(lexical.vocab.ids)
    for term, i in lexical.vocab.ids.items():
        terms[i] = term
    docs = seg.docs if isinstance(seg.docs, PackedKeys) else PackedKeys.pack(seg.docs)
    vocab = pack_strings(terms)
    arrays = {**seg.arrays(), **docs.arrays("docs"), "vocab_blob": vocab["blob"], "vocab_ends": vocab["ends"]}
    return write_arrays(path, KIND, FORMAT, stamp, arrays)


def read_lexical(path: Path, stamp: str, state: UserState, watch: MappedFiles | None = None,
                 verify: bool = False) -> VersionedLexical | CacheMiss:
    """The cached index of `state` (committed version `stamp`), or why the cache cannot serve it; a
    mapped file is added to `watch`, and read whole for its checksum only when its stamp does not
    hold or with `verify` (`cache_file.read_arrays`). The documents stay in the map
    (`PackedKeys`); they are compared with the state's by their CRC-32s, and one by one with
    `verify`. The map is read where a query reads it: it is mapped for random access, and a query
    asks for the postings it scores (`Segment.prefetch`)."""
    found = read_arrays(path, KIND, FORMAT, stamp, watch=watch, random_access=True, verify=verify)
    if isinstance(found, CacheMiss):
        return found
    try:
        docs = PackedKeys.of_arrays(found, "docs")
        docs.will_need()
        terms = unpack_strings(found["vocab_blob"], found["vocab_ends"])
        for name in ("lengths", "terms", "offsets"):  # (read whole: asked for at once)
            will_need(found[name], [(0, len(found[name]))])
        seg = Segment.restored(docs, *(found[k] for k in _SEGMENT_ARRAYS))
        _check_shapes(seg, len(terms))
    except (KeyError, ValueError, TypeError, UnicodeDecodeError) as e:
        return CacheMiss(f"{path.name}: inconsistent arrays ({type(e).__name__}: {e})")
    if not _same_documents(docs, state, verify):
        return CacheMiss(f"{path.name}: its documents are not the store's cells and facts")
    vocab = Vocabulary()
    vocab.ids = {t: i for i, t in enumerate(terms)}
    return VersionedLexical.of_segment(seg, vocab)


def _check_shapes(seg: Segment, n_terms: int) -> None:
    """The arrays fit together: lengths, offsets, and each term's postings within the documents (their
    first and last: a term's positions ascend, as a segment writes them, so the postings are not all
    read; the file's checksum or stamp vouches for the rest)."""
    n, postings = len(seg.docs), len(seg.positions)
    if len(seg.lengths) != n or len(seg.counts) != postings or len(seg.doc_lengths) != postings:
        raise ValueError("array lengths disagree")
    offsets = seg.offsets
    if len(offsets) != len(seg.terms) + 1 or (len(offsets) and int(offsets[-1]) != postings):
        raise ValueError("posting offsets disagree")
    if len(offsets) and (int(offsets[0]) != 0 or bool((np.diff(offsets) < 0).any())):
        raise ValueError("posting offsets disagree")
    if postings:
        lo, hi = offsets[:-1], offsets[1:]
        some = hi > lo
        ends = np.concatenate([lo[some], hi[some] - 1])
        will_need(seg.positions, zip(ends.tolist(), itertools.repeat(1)))  # (one page each, all at once)
        first, last = seg.positions[lo[some]], seg.positions[hi[some] - 1]
        if int(first.min()) < 0 or int(last.max()) >= n or bool((first > last).any()):
            raise ValueError("a posting names no document")
    if len(seg.terms) and (int(seg.terms.max()) >= n_terms or int(seg.terms.min()) < 0):
        raise ValueError("a term id names no term")


def _same_documents(docs: PackedKeys, state: UserState, exact: bool) -> bool:
    """Whether `docs` are the state's cells and facts, each once: by their CRC-32s, or `exact`ly (set
    operations over the maps' keys: the facts of a loaded version are not all made)."""
    cells, facts = state.cells, state.facts
    if not exact:  # (the facts' CRC-32s are the fact table's, when it holds the cache's packed keys)
        packed = facts.packed_keys() if isinstance(facts, LazyMap) else None
        return docs.same_hashes([(cells, len(cells)), packed if packed is not None else (facts, len(facts))])
    seen = set(docs)
    if len(seen) != len(docs) or len(docs) != len(cells) + len(facts):
        return False
    rest = seen.difference(cells)  # (then: every cell is a document, and the others are the facts)
    return len(rest) == len(facts) and rest.issuperset(facts)


def documents(state: UserState) -> list[tuple[str, str]]:
    """(id, text) of every cell (its full text) and every fact: what the lexical index holds."""
    state.read_facts()
    state.make_cells()
    return ([(c, cell.text) for c, cell in state.cells.items()]
            + [(f, fact.text) for f, fact in state.facts.items()])


def build_lexical(state: UserState) -> VersionedLexical:
    return VersionedLexical(documents(state))

