"""A lexical index (Okapi BM25) over the memory's leaf items: cells by their full text and facts.

Dense vectors see the first few hundred tokens of a cell and blur rare words (names, titles, numbers);
BM25 sees every word of the cell exactly. It is derived from the store like the vector indexes, and
cheap enough to rebuild in memory for each published snapshot (no cache file)."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from functools import lru_cache

K1 = 1.2
B = 0.75
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
STOPWORDS = frozenset(
    ["a", "an", "the", "is", "are", "was", "were", "be", "been", "being", "am", "do", "does", "did", "doing",
     "have", "has", "had", "having", "i", "me", "my", "mine", "myself", "you", "your", "yours", "we", "us",
     "our", "they", "them", "their", "he", "him", "his", "she", "her", "it", "its", "this", "that", "these",
     "those", "what", "which", "who", "whom", "whose", "when", "where", "why", "how", "to", "of", "in", "on",
     "at", "for", "and", "or", "but", "with", "by", "from", "as", "into", "about", "than", "then", "so", "if",
     "not", "no", "can", "could", "would", "should", "will", "shall", "may", "might", "must", "just", "also",
     "very", "really", "any", "some", "all", "each", "more", "most", "other", "such", "only", "own", "same",
     "too", "there", "here", "up", "down", "out", "over", "again", "once", "user", "assistant", "s", "t"]
)


@lru_cache(maxsize=1 << 18)
def stem(word: str) -> str:
    """A light suffix stripper for plurals and -ing/-ed forms (enough for matching, not linguistics)."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    for suffix in ("ing", "ed"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            return word[: -len(suffix)]
    return word


def terms(text: str) -> list[str]:
    """Lower-cased, stemmed word terms of `text`, without stopwords."""
    return [stem(w) for w in _WORD.findall(text.lower()) if w not in STOPWORDS]


class LexicalIndex:
    """BM25 over documents keyed by id; `scores(query)` returns only documents sharing a term."""

    def __init__(self, docs: Mapping[str, str] | Iterable[tuple[str, str]]) -> None:
        items = docs.items() if isinstance(docs, Mapping) else docs
        self.postings: dict[str, list[tuple[str, int]]] = {}
        self.lengths: dict[str, int] = {}
        for doc_id, text in items:
            words = terms(text)
            self.lengths[doc_id] = len(words)
            for term, count in Counter(words).items():
                self.postings.setdefault(term, []).append((doc_id, count))
        total = sum(self.lengths.values())
        self.avg_length = total / len(self.lengths) if self.lengths else 0.0

    def __len__(self) -> int:
        return len(self.lengths)

    def idf(self, term: str) -> float:
        n = len(self.postings.get(term, ()))
        return math.log(1.0 + (len(self.lengths) - n + 0.5) / (n + 0.5))

    def scores(self, query: str) -> dict[str, float]:
        out: dict[str, float] = {}
        avg = self.avg_length or 1.0
        for term in set(terms(query)):
            postings = self.postings.get(term)
            if not postings:
                continue
            idf = self.idf(term)
            for doc_id, tf in postings:
                norm = K1 * (1.0 - B + B * self.lengths[doc_id] / avg)
                out[doc_id] = out.get(doc_id, 0.0) + idf * tf * (K1 + 1.0) / (tf + norm)
        return out
