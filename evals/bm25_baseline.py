"""BM25 baseline: the floor every eval report shows beside the engine.

A retrieval engine that cannot beat plain BM25 over the same chunks is not earning its
complexity, so the runner scores, per golden pack and on the same questions, a ``bm25s`` index
over the pack's *active*, retrieval-eligible chunks that the query's role may read: the chunks
the engine's legs search (the policy gate applies to the baseline too: it never ranks a chunk
the engine was forbidden to return).

Scoring: ``bm25s.BM25(method="lucene", k1=1.5, b=0.75)``: Lucene's BM25 variant (idf
``log(1 + (N - df + 0.5) / (df + 0.5))``, never negative), with the common baseline settings.

Documents: ``heading + "\\n" + text`` per chunk, in anchor order; the ranking is a list of
anchors (``<doc_id>#<local>``, what golden gold lists name). Ties in score are broken by anchor,
and chunks scoring 0 (no query term at all) are not ranked: an arbitrary order of non-matches
would only add noise to recall@10.

Tokenization (the same for documents and queries): the engine's analyzer
(``rag_engine.text.analyzer``), profiles ``BM25`` and ``BM25_STEMMED``, which split, drop and stem
exactly as bm25s's own tokenizer did with these settings (``tests/test_text_analyzer.py`` compares
the two on every shipped corpus document):

- **lowercase**, then the scikit-learn ``CountVectorizer`` pattern ``(?u)\\b\\w\\w+\\b``: runs of
  two or more Unicode word characters. Punctuation splits tokens, so ``Article 17(1)`` becomes
  ``article``, ``17`` (the single character ``1`` is dropped), and ``GDPR-compliant`` becomes
  ``gdpr``, ``compliant``.
- **English stopwords removed**: bm25s's ``"en"`` list, which is Lucene's 33-word English stop
  set (``a``, ``and``, ``of``, ``the``, ``to``, ...), the one Lucene/Anserini BM25 baselines use.
  Both shipped packs are English; without it "of" and "the" would add noise to every query.
  Question words ("what", "does") are not on it and stay, with their low idf.
- **Unstemmed (``bm25``, the floor the gate enforces) and stemmed (``bm25_stemmed``, shown beside
  it in every report)**: the stemmed variant adds Snowball English stems (PyStemmer, the pinned
  stemmer the engine's own word comparisons use), as Anserini's standard BM25 baselines do.
  Neither is uniformly stronger here: on the committed sets stemming lifts BM25 on the Company X
  KB and the GDPR paraphrases and lowers it on ADGM and the GDPR's own questions. The gate's
  floor stays the unstemmed one it was calibrated on; docs/evals.md gives both and where the
  engine stands against the stemmed one.

This differs on purpose from the engine's fulltext leg (Neo4j's Lucene index, its analyzer and
k1 = 1.2, heading and text as separate fields): the report scores that leg alone as its own
system, so the two are never confused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import bm25s
import neo4j
import numpy as np

from rag_engine.store.measurement import served_texts
from rag_engine.text.analyzer import BM25, BM25_STEMMED

METHOD = "lucene"
K1 = 1.5
B = 0.75


def tokenize(texts: Sequence[str], *, stem: bool = False) -> list[list[str]]:
    """The baseline's tokens for each text (lowercase, 2+ word characters, English stopwords out;
    with ``stem``, Snowball English stems)."""
    return (BM25_STEMMED if stem else BM25).terms_of(texts)


@dataclass(frozen=True)
class Chunk:
    anchor: str
    heading: str
    text: str

    @property
    def document(self) -> str:
        return f"{self.heading}\n{self.text}"


@dataclass
class BM25Index:
    """A BM25 index over a fixed set of chunks; ``search`` returns anchors, best first."""

    chunks: tuple[Chunk, ...]
    stem: bool = False
    _model: bm25s.BM25 | None = field(default=None, repr=False)

    @classmethod
    def build(cls, chunks: Sequence[Chunk], *, stem: bool = False) -> BM25Index:
        ordered = tuple(sorted(chunks, key=lambda c: c.anchor))  # stable: equal anchors keep read order
        index = cls(ordered, stem)
        if ordered:
            model = bm25s.BM25(method=METHOD, k1=K1, b=B)
            model.index(tokenize([c.document for c in ordered], stem=stem), show_progress=False)
            index._model = model
        return index

    def scores(self, question: str) -> np.ndarray:
        """One BM25 score per chunk (in ``chunks`` order); zeros when no query term is indexed."""
        if self._model is None:
            return np.zeros(0, dtype=float)
        terms = [t for t in tokenize([question], stem=self.stem)[0] if t and t in self._model.vocab_dict]
        if not terms:
            return np.zeros(len(self.chunks), dtype=float)
        return np.asarray(self._model.get_scores(terms), dtype=float)

    def search(self, question: str, k: int) -> list[str]:
        """Top-k distinct anchors by score, ties by anchor; chunks scoring 0 are not ranked.

        Two active chunks with one anchor should not exist (one live version per document); if
        they do, the anchor is ranked once, at its best score, as the metrics would count it.
        """
        scores = self.scores(question)
        order = sorted(
            (i for i in range(len(self.chunks)) if scores[i] > 0), key=lambda i: (-scores[i], self.chunks[i].anchor)
        )
        return list(dict.fromkeys(self.chunks[i].anchor for i in order))[:k]


def read_chunks(driver: neo4j.Driver, database: str, pack: str, collections: Sequence[str]) -> list[Chunk]:
    """The pack's active, retrieval-eligible chunks in the given collections, in anchor order (a
    READ transaction): exactly the chunks the engine's legs may return to that role."""
    rows = served_texts(driver, database, pack, collections)
    return [Chunk(anchor=r["anchor"], heading=r["heading"], text=r["text"]) for r in rows]


class BM25Baseline:
    """Per (pack, permitted collections) indexes, built on first use and reused for the run."""

    def __init__(self, driver: neo4j.Driver, database: str, *, stem: bool = False) -> None:
        self._driver, self._database, self._stem = driver, database, stem
        self._indexes: dict[tuple[str, tuple[str, ...]], BM25Index] = {}

    def index(self, pack: str, collections: Sequence[str]) -> BM25Index:
        key = (pack, tuple(sorted(collections)))
        if key not in self._indexes:
            chunks = read_chunks(self._driver, self._database, pack, key[1])
            self._indexes[key] = BM25Index.build(chunks, stem=self._stem)
        return self._indexes[key]

    def search(self, pack: str, collections: Sequence[str], question: str, k: int) -> list[str]:
        return self.index(pack, collections).search(question, k)
