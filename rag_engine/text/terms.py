"""Words, stopwords and stems: how the query path compares a question with a passage.

Comparisons of words (the evidence floor, the planner's relationship and entity matching, the
reranker's overlap features) run on **stems** of **content words**, so "notifying" meets
"notified" and "tickets" meets "ticket", while "supervisory" no longer passes for
"supervises" because one is a prefix of the other.

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
from functools import lru_cache

import Stemmer

_TOKEN = re.compile(r"[^\W_]+")
_STEMMER = Stemmer.Stemmer("english")

# Lucene's English stop set (also bm25s's "en" list)
_LUCENE = (
    "a an and are as at be but by for if in into is it no not of on or such that the their then there "
    "these they this to was will with"
)
# the question frame, pronouns, auxiliaries and modal verbs: present in questions, not evidence
_FRAME = (
    "about above after again all also am any anyone anything before being below between both can "
    "could did do does doing done during each either else ever every few from further get gets "
    "give given had has have having he her here hers him his how however i if its itself just "
    "know let me might mine more most much must my need needs nor now off once only other ought "
    "our ours out over own please same say shall she should so some tell than that those through "
    "thus too under until up upon us very via want we were what whatever when whenever where "
    "whereas whether which while who whom whose why would yes yet you your yours explain describe "
    "detail details detailed"
)
STOPWORDS: frozenset[str] = frozenset((_LUCENE + " " + _FRAME).split()) - {"between"}
"""Words that carry no evidence. "between" stays a content word: it asks about a relationship."""


def tokens(text: str) -> list[str]:
    """Lowercased runs of letters and digits, in order."""
    return _TOKEN.findall(text.lower())


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """Snowball English stem of one lowercased word (numbers and non-Latin words unchanged)."""
    return str(_STEMMER.stemWord(word))


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
