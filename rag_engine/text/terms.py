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

from rag_engine.text.analyzer import EVIDENCE, EVIDENCE_STOPWORDS, snowball

STOPWORDS = EVIDENCE_STOPWORDS
"""Words that carry no evidence (``rag_engine.text.analyzer``: Lucene's list and the question frame,
"between" kept)."""
stem = snowball
"""Snowball English stem of one lowercased word (numbers and non-Latin words unchanged), cached."""


def tokens(text: str) -> list[str]:
    """Lowercased runs of letters and digits, in order (the ``EVIDENCE`` profile's tokens)."""
    return EVIDENCE.tokens(text)


def is_content(word: str) -> bool:
    """A word that can carry evidence: not a stopword, and not a single letter."""
    return word not in STOPWORDS and (len(word) > 1 or word.isdigit())


_HOW = frozenset(["long", "many", "much", "often", "soon", "far"])
"""After "how" these words are the question's frame ("how long", "how many"), not its subject."""


def content_words(text: str) -> list[str]:
    words = tokens(text)
    return [w for i, w in enumerate(words) if is_content(w) and not (w in _HOW and i and words[i - 1] == "how")]


def content_stems(text: str) -> set[str]:
    """The stems of the content words of ``text``."""
    return {stem(w) for w in content_words(text)}
