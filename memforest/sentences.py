"""The user sentences a long cell is scored by (`memforest.retrieval.hybrid`), chosen by one rule for
the write path, which embeds them beside the cell's vector and stores them with the cell, for the
backfill of a store written before (`memforest.store.backfill`), which stores what the write would
have, and for the query path, which embeds them itself for a cell stored without them.

A cell's sentences are those of its user turns, split after `.`, `!` or `?`, of at least
SENTENCE_MIN_WORDS words, the first SENTENCES_PER_CELL of them. They are looked at only for a cell
longer than its leaf vector reads (`TreeConfig.leaf_words`, all cells when it is 0): the write path
embeds those of the cells long by its own `leaf_words`, and records every cell's length, so a query
under another `leaf_words` knows which cells it must embed itself."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

from memforest.state import UserState
from memforest.types import Cell, CellSentences, Turn

SENTENCE_MIN_WORDS = 4  # shorter sentences ("Thanks!", "Hi Nate!") say too little to match on
SENTENCES_PER_CELL = 8  # the first ones of its user turns: a pasted document does not flood the batch
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


class SentenceStore(Protocol):
    """Where the stored sentence vectors of a loaded version's cells are read
    (`memforest.store.tree_source.StoreTreeSource`)."""

    def cell_sentences(self, version: int, cell_ids: Sequence[str]) -> dict[str, CellSentences] | None: ...


def cell_turns(state: UserState, cell: Cell) -> list[Turn]:
    session = state.sessions.get(cell.session_id)
    return session.turns[cell.turn_lo : cell.turn_hi + 1] if session is not None else []


def turn_words(turns: Sequence[Turn]) -> int:
    """How many words the turns hold (a cell's length, as its leaf vector's budget counts it)."""
    return sum(len(turn.content.split()) for turn in turns)


def read_whole(words: int, leaf_words: int) -> bool:
    """Whether a cell of `words` words is read whole by its leaf vector (`TreeConfig.leaf_words`)."""
    return 0 < leaf_words >= words


def user_sentences(turns: Sequence[Turn]) -> list[str]:
    """The sentences of the user's turns a cell is scored by (the module's notes)."""
    return [sentence for turn in turns if turn.role == "user"
            for sentence in _SENTENCE_END.split(" ".join(turn.content.split()))
            if len(sentence.split()) >= SENTENCE_MIN_WORDS][:SENTENCES_PER_CELL]


def sentences_to_embed(turns: Sequence[Turn], leaf_words: int) -> tuple[int, list[str] | None]:
    """A cell's length in words and the sentences the write embeds for it, by the module's rule:
    None for a cell its leaf vector reads whole (its row then holds its length alone)."""
    words = turn_words(turns)
    return words, None if read_whole(words, leaf_words) else user_sentences(turns)


def stored_sentences(state: UserState, cell_ids: Sequence[str]) -> dict[str, CellSentences]:
    """The stored sentences of those of `cell_ids` that have them, read in one statement from the
    store snapshot of `state`'s version ({} for a version not read from a store, or whose source
    has moved to another version: a cell then has none)."""
    source: SentenceStore | None = state.tree_source
    if source is None or not cell_ids:
        return {}
    return source.cell_sentences(state.version, cell_ids) or {}
