"""Whether the store holds a word at all, for the permitted collections: the answer-or-refuse
decision asks it of the question's words that no top candidate holds ("parental leave at
Google": is "google" anywhere in what this role may read?)."""

from __future__ import annotations

import re

from rag_engine.store.names import CHUNK_FULLTEXT
from rag_engine.store.reads import SERVED, scope
from rag_engine.store.session import Reads

_WORD = re.compile(r"^[^\W_]+$")
FETCH = 50
"""Fulltext hits read per word: a word whose first hits are all outside the permitted collections
counts as absent (an approximation that errs towards refusing)."""


def absent_words(rx: Reads, words: list[str], collections: tuple[str, ...]) -> set[str]:
    """The ``words`` (lowercase letters and digits only; others are ignored) no served chunk of
    ``collections`` holds (``reads.SERVED``), by the fulltext index (the same analyzer as the lexical leg)."""
    plain = sorted({w for w in words if _WORD.match(w)})
    if not plain or not collections:
        return set()
    rows = rx.rows(
        f"UNWIND $words AS w CALL db.index.fulltext.queryNodes('{CHUNK_FULLTEXT}', w, {{limit: $fetch}}) "
        f"YIELD node AS c WITH w, c WHERE {SERVED} RETURN DISTINCT w",
        words=plain,
        fetch=FETCH,
        **scope(rx, collections),
    )
    return set(plain) - {r["w"] for r in rows}
