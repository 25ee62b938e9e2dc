"""The lexical index of a committed version, cached beside the database in query-ready form.

Building BM25 over every cell and fact reads and tokenises the whole memory (seconds at 10^4
sessions); the cache holds the built index as one segment (`VersionedLexical.compacted`): its
posting arrays, memory-mapped, and its document ids and vocabulary. A cache is used only for the
store version (`stamp`) it was written for and only when its checksums match and its documents are
exactly the state's cells and facts; anything else is a `CacheMiss` and the index is rebuilt from
the state (and the cache rewritten). Writes never touch the cache: it is rewritten when an index is
built afresh and when a process closes the memory with a newer resident version."""

from __future__ import annotations

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
from memforest.state import UserState

KIND = "lexical"
FORMAT = 1
FILE_NAME = "lexical.cache"
_SEGMENT_ARRAYS = ("lengths", "terms", "offsets", "positions", "counts", "doc_lengths")  # Segment.restored


def write_lexical(path: Path, stamp: str, lexical: VersionedLexical) -> int:
    """Write `lexical` (the index of the committed version `stamp`) to `path`; returns its bytes."""
    seg = lexical.compacted()
    terms = [""] * len(lexical.vocab.ids)
    for term, i in lexical.vocab.ids.items():
        terms[i] = term
    docs, vocab = pack_strings(seg.docs), pack_strings(terms)
    arrays = {**seg.arrays(), "docs_blob": docs["blob"], "docs_ends": docs["ends"],
              "vocab_blob": vocab["blob"], "vocab_ends": vocab["ends"]}
    return write_arrays(path, KIND, FORMAT, stamp, arrays)


def read_lexical(path: Path, stamp: str, state: UserState, watch: MappedFiles | None = None,
                 verify: bool = False) -> VersionedLexical | CacheMiss:
    """The cached index of `state` (committed version `stamp`), or why the cache cannot serve it; a
    mapped file is added to `watch`, and read whole for its checksum only when its stamp does not
    hold or with `verify` (`cache_file.read_arrays`)."""
    found = read_arrays(path, KIND, FORMAT, stamp, watch=watch, verify=verify)
    if isinstance(found, CacheMiss):
        return found
    try:
        docs = unpack_strings(found["docs_blob"], found["docs_ends"])
        terms = unpack_strings(found["vocab_blob"], found["vocab_ends"])
        seg = Segment.restored(docs, *(found[k] for k in _SEGMENT_ARRAYS))
        _check_shapes(seg, len(terms))
    except (KeyError, ValueError, TypeError, UnicodeDecodeError) as e:
        return CacheMiss(f"{path.name}: inconsistent arrays ({type(e).__name__}: {e})")
    if not _same_documents(docs, state):
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
        first, last = seg.positions[lo[some]], seg.positions[hi[some] - 1]
        if int(first.min()) < 0 or int(last.max()) >= n or bool((first > last).any()):
            raise ValueError("a posting names no document")
    if len(seg.terms) and (int(seg.terms.max()) >= n_terms or int(seg.terms.min()) < 0):
        raise ValueError("a term id names no term")


def _same_documents(docs: list[str], state: UserState) -> bool:
    """Whether `docs` are the state's cells and facts, each once (set operations over the maps' keys:
    the facts of a loaded version are not all made)."""
    cells, facts = state.cells, state.facts
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

