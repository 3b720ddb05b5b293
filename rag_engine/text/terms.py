"""Words, stopwords and stems: how the query path compares a question with a passage.

Comparisons of words (the evidence floor, the planner's relationship and entity matching, the
reranker's overlap features) run on **stems** of **content words**, so "notifying" meets
"notified" and "tickets" meets "ticket", while "supervisory" no longer passes for
"supervises" because one is a prefix of the other.

The words come from the analyzer's ``EVIDENCE`` profile (``rag_engine.text.analyzer``):

- Stemmer: Snowball English through PyStemmer (the C implementation bm25s also takes), cached per
  word: a question and its context blocks hold a few thousand distinct words at most.
- Stopwords: Lucene's English list (what the BM25 baseline and the fulltext index drop), the
  question frame ("what", "how", "tell me about") and modal verbs ("must", "may", "shall"). They
  carry no evidence: a passage need not contain "must" to answer "what must a controller do".
- Tokens: runs of letters and digits (any script), lowercased; a single letter is not a content
  word ("Company X", "point (a)").
"""

from __future__ import annotations

import re

from rag_engine.text.analyzer import ASCII_WORD_FOLD, EVIDENCE, EVIDENCE_STOPWORDS, snowball

STOPWORDS = EVIDENCE_STOPWORDS
"""Words that carry no evidence (``rag_engine.text.analyzer``: Lucene's list and the question frame,
"between" kept)."""
stem = snowball
"""Snowball English stem of one lowercased word (numbers and non-Latin words unchanged), cached."""


_FINDALL = re.compile(EVIDENCE.token_pattern).findall
_WORD_CHAR = re.compile(EVIDENCE.token_pattern).match
_ASCII = frozenset(map(chr, range(128)))


def tokens(text: str) -> list[str]:
    """Lowercased runs of letters and digits, in order (the ``EVIDENCE`` profile's tokens: its
    pattern over ``str.lower``). Text whose lowercase holds no word character outside ASCII (most
    text: curly quotes and dashes are not word characters) is split by ``ASCII_WORD_FOLD``, the
    same tokens at a third of the cost; other text by the pattern."""
    if text.isascii():
        return text.encode("ascii").translate(ASCII_WORD_FOLD).decode("ascii").split()
    lowered = text.lower()
    if any(_WORD_CHAR(c) for c in set(lowered).difference(_ASCII)):
        return _FINDALL(lowered)
    return lowered.encode("ascii", "replace").translate(ASCII_WORD_FOLD).decode("ascii").split()


def is_content(word: str) -> bool:
    """A word that can carry evidence: not a stopword, and not a single letter."""
    return word not in STOPWORDS and (len(word) > 1 or word.isdigit())


_HOW = frozenset(["long", "many", "much", "often", "soon", "far"])
"""After "how" these words are the question's frame ("how long", "how many"), not its subject."""


_CONTENT_STEMS: dict[str, str | None] = {}
"""Word -> its stem if it is a content word, else None: one plain dict lookup per token on the
query path, where ``is_content`` and ``stem`` were two calls. Emptied past ``_CACHE_WORDS``."""
_CACHE_WORDS = 200_000


def _learned(words: list[str]) -> dict[str, str | None]:
    """``_CONTENT_STEMS`` for ``words``, the ones it lacks added (a dict of just these words, so a
    concurrent clear cannot lose one between the add and the read)."""
    if len(_CONTENT_STEMS) > _CACHE_WORDS:
        _CONTENT_STEMS.clear()
    found = {w: snowball(w) if is_content(w) else None for w in set(words)}
    _CONTENT_STEMS.update(found)
    return found


def _stems_or_none(words: list[str]) -> list[str | None]:
    """Per token of ``words`` (``tokens`` of one text): its stem if it is a content word, else None
    (the "how long" rule below applied)."""
    table = _CONTENT_STEMS
    try:
        out = [table[w] for w in words]
    except KeyError:
        table = _learned(words)
        out = [table[w] for w in words]
    if "how" in words:
        for i in range(1, len(words)):
            if words[i] in _HOW and words[i - 1] == "how":
                out[i] = None
    return out


def content_words(text: str) -> list[str]:
    """The content words of ``text`` in order: its tokens less stopwords, single letters, and the
    word after "how" that only frames the question ("how long", "how many")."""
    words = tokens(text)
    return [w for w, s in zip(words, _stems_or_none(words), strict=True) if s is not None]


def stems_of_tokens(words: list[str]) -> list[str]:
    """The stems of the content words among ``words`` (``tokens`` of one text), in order."""
    if "how" in words:
        return [s for s in _stems_or_none(words) if s is not None]
    try:
        return [s for s in map(_CONTENT_STEMS.__getitem__, words) if s is not None]
    except KeyError:
        table = _learned(words)
        return [s for s in map(table.__getitem__, words) if s is not None]


def content_stem_list(text: str) -> list[str]:
    """The stems of the content words of ``text``, in order (``[stem(w) for w in content_words(text)]``)."""
    return stems_of_tokens(tokens(text))


def content_stems(text: str) -> set[str]:
    """The stems of the content words of ``text``."""
    return set(stems_of_tokens(tokens(text)))


def frames_after_how(previous: str, word: str) -> bool:
    """``word`` is the question frame after ``previous`` ("how long"), not a content word."""
    return previous == "how" and word in _HOW
