"""The one text analyzer: tokenize, drop stopwords, stem (Snowball English through PyStemmer).

Every word comparison of the engine and its evals goes through an ``Analyzer``: a named profile of
a token pattern, a case fold, a stopword list and a stemmer. Profiles differ only where a figure
depends on the difference (a ranking, a stored vector, a fixture), so a refactor moves no number;
which caller uses which profile:

=================  ===================  ==========================  ===========  ==========================
profile            tokens               stopwords                   stem         used by
=================  ===================  ==========================  ===========  ==========================
``EVIDENCE``       ``[^\\W_]+``, lower   Lucene + question frame     Snowball     evidence check, rerank's
                                                                                 lexical features, sentence
                                                                                 evidence, answer-or-refuse,
                                                                                 planner's entity matching
                                                                                 (``text.terms``)
``QUERY_TERMS``    ``[a-z0-9]+``, lower  the planner's 37 words      none         planner's query terms:
                                                                                 lookup rule, exact phrase,
                                                                                 live SQL terms
``BM25``           ``\\w\\w+``, lower     Lucene (bm25s's ``en``)     none         the BM25 floor (``bm25``)
``BM25_STEMMED``   ``\\w\\w+``, lower     Lucene (bm25s's ``en``)     Snowball     ``bm25_stemmed``
``HASH_EMBEDDER``  ``[a-z0-9]+``, lower  the hash embedder's 35      suffix_v1    ``local_hash`` vectors
``GROUNDING``      ``\\w+``, NFKC fold    articles                    plural       entity grounding of
                                                                                 extraction records
=================  ===================  ==========================  ===========  ==========================

Stopwords are dropped before stemming. Two stemmers are not Snowball, each kept because something
stored depends on it: ``suffix_v1`` makes the ``local_hash`` embedder's vectors (indexes built with
that identity hold them; another stemmer would need a new identity and a re-index), and ``plural``
decides which extracted entity names are grounded in their chunk (a graph rebuild's input).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

import Stemmer

_SNOWBALL = Stemmer.Stemmer("english")

_LUCENE = (
    "a an and are as at be but by for if in into is it no not of on or such that the their then there "
    "these they this to was will with"
)
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
_QUERY_TERMS = (
    "a an and are as at be by can do does for from has have how i in is it of on or that the this to "
    "was what when where which who whom why will with"
)
_HASH_EMBEDDER = (
    "a an and are as at be by for from has have in is it its of on or that the this to was were will "
    "with shall which such any may been not"
)

LUCENE_STOPWORDS: frozenset[str] = frozenset(_LUCENE.split())
"""Lucene's 33-word English stop set: what Neo4j's fulltext index and the BM25 floor drop (bm25s's
``"en"`` list is this set)."""

QUESTION_FRAME: frozenset[str] = frozenset(_FRAME.split())
"""The question frame, pronouns, auxiliaries and modal verbs: present in questions, not evidence."""

EVIDENCE_STOPWORDS: frozenset[str] = (LUCENE_STOPWORDS | QUESTION_FRAME) - {"between"}
"""Words that carry no evidence. "between" stays a content word: it asks about a relationship."""

QUERY_TERM_STOPWORDS: frozenset[str] = frozenset(_QUERY_TERMS.split())
"""The planner's list: what a question's terms (the lookup rule, the exact phrase, the live SQL
source's terms) leave out."""

HASH_EMBEDDER_STOPWORDS: frozenset[str] = frozenset(_HASH_EMBEDDER.split())
"""The ``local_hash`` embedder's list (part of its vectors: see the module docstring)."""

ARTICLES: frozenset[str] = frozenset({"the", "a", "an"})


ASCII_WORD_FOLD = bytes(c + 32 if 65 <= c <= 90 else c if 48 <= c <= 57 or 97 <= c <= 122 else 32 for c in range(256))
"""A ``bytes.translate`` table: a capital letter to its small one, a small letter or a digit kept,
any other byte a space. In ASCII text the word characters of ``[^\\W_]`` are exactly the letters and
digits, so ``text.encode().translate(ASCII_WORD_FOLD).split()`` gives the ``EVIDENCE`` tokens of an
ASCII ``text`` (lowercased runs of letters and digits) in a third of the regular expression's time."""


@lru_cache(maxsize=65536)
def snowball(word: str) -> str:
    """Snowball English stem of one lowercased word (numbers and non-Latin words unchanged)."""
    return str(_SNOWBALL.stemWord(word))


def suffix_v1(word: str) -> str:
    """The ``local_hash`` embedder's suffix stripper ("erasure"/"erase", "processing"/"processed")."""
    for suffix in ("ations", "ation", "ings", "ing", "ures", "ure", "ies", "ed", "es", "s", "e"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def plural(word: str) -> str:
    """A plural ending dropped ("policies" -> "policy", "boxes" -> "box", "controllers" -> "controller")."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 4 and word.endswith(("ches", "shes", "sses", "xes", "zes")):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def _unchanged(word: str) -> str:
    return word


StemmerName = Literal["snowball", "suffix_v1", "plural", "none"]
STEMMERS: dict[StemmerName, Callable[[str], str]] = {
    "snowball": snowball,
    "suffix_v1": suffix_v1,
    "plural": plural,
    "none": _unchanged,
}


def _lower(text: str) -> str:
    return text.lower()


def _nfkc_casefold(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


Fold = Literal["lower", "nfkc_casefold"]
FOLDS: dict[Fold, Callable[[str], str]] = {"lower": _lower, "nfkc_casefold": _nfkc_casefold}


@dataclass(frozen=True)
class Analyzer:
    """A named profile: ``tokens`` folds the case and splits, ``terms`` also drops the stopwords
    and stems what is left."""

    name: str
    token_pattern: str
    stopwords: frozenset[str] = frozenset()
    stemmer: StemmerName = "none"
    fold: Fold = "lower"
    _split: Callable[[str], list[str]] = field(init=False, repr=False, compare=False)
    _fold: Callable[[str], str] = field(init=False, repr=False, compare=False)
    _stem: Callable[[str], str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_split", re.compile(self.token_pattern).findall)
        object.__setattr__(self, "_fold", FOLDS[self.fold])
        object.__setattr__(self, "_stem", STEMMERS[self.stemmer])

    def tokens(self, text: str) -> list[str]:
        """The folded text's tokens, in order, stopwords included, unstemmed."""
        return self._split(self._fold(text))

    def stem(self, word: str) -> str:
        return self._stem(word)

    def terms(self, text: str) -> list[str]:
        """The tokens that are not stopwords, stemmed, in order."""
        stem, stop = self._stem, self.stopwords
        return [stem(t) for t in self._split(self._fold(text)) if t not in stop]

    def terms_of(self, texts: Iterable[str]) -> list[list[str]]:
        return [self.terms(t) for t in texts]


EVIDENCE = Analyzer("evidence", r"[^\W_]+", EVIDENCE_STOPWORDS, "snowball")
QUERY_TERMS = Analyzer("query_terms", r"[a-z0-9]+", QUERY_TERM_STOPWORDS)
BM25 = Analyzer("bm25", r"(?u)\b\w\w+\b", LUCENE_STOPWORDS)
BM25_STEMMED = Analyzer("bm25_stemmed", r"(?u)\b\w\w+\b", LUCENE_STOPWORDS, "snowball")
HASH_EMBEDDER = Analyzer("hash_embedder", r"[a-z0-9]+", HASH_EMBEDDER_STOPWORDS, "suffix_v1")
GROUNDING = Analyzer("grounding", r"\w+", ARTICLES, "plural", "nfkc_casefold")

PROFILES: dict[str, Analyzer] = {
    a.name: a for a in (EVIDENCE, QUERY_TERMS, BM25, BM25_STEMMED, HASH_EMBEDDER, GROUNDING)
}
