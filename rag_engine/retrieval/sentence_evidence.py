"""Sentence evidence: the question read against each answerable unit (sentence, list item, table
row: ``rag_engine.text.sentences``) of the top candidates, not against the passage as a whole.

For each unit: its cosine to the question (the unit vectors made at index time, same embedder),
the share of the question's content stems it holds (with its passage's heading and title, which
say what the unit is about), and how close together they stand. A unit's ``score`` is its
cosine plus ``COVERAGE_WEIGHT`` x its coverage: the vector says it is about the question, the
words that it holds what was asked. Three uses:

- rerank features (``unit_cos_rel``, ``unit_cov``): a passage whose one sentence answers the
  question outranks a general one that shares its words (17(3) over 17(2));
- the extractive answer quotes the best units (``answer.extractive_answer``);
- the answer-or-refuse decision reads the best unit's cosine and coverage (``abstain``).

Without unit vectors (an index built before them, or ``retrieval.evidence.index_units`` off) a
unit is scored by its words alone (cosine None), and said so in the trace.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from rag_engine.retrieval.rerank import proximity_in
from rag_engine.store.units import decode
from rag_engine.text.sentences import MAX_UNITS, Unit, split_units
from rag_engine.text.terms import frames_after_how, is_content, stems_of_tokens, tokens

COVERAGE_WEIGHT = 0.25
"""Weight of a unit's coverage beside its cosine in its score. Not fitted: coverage in [0, 1]
next to e5 cosines that spread over about 0.75-0.90, so a unit holding every question word
gains about as much as the cosine spread between a passing and a close match."""


@dataclass(frozen=True)
class UnitEvidence:
    chunk_id: str
    index: int
    text: str
    start: int
    end: int
    cosine: float | None
    coverage: float
    context_coverage: float
    proximity: float
    score: float


@dataclass(frozen=True)
class ChunkEvidence:
    chunk_id: str
    units: tuple[UnitEvidence, ...]  # in text order
    cosine: float | None  # the chunk's own vector against the question
    words: list[str] | None = field(default=None, compare=False, repr=False)
    """The stems of the chunk text's content words when its units' give them (``joined_stems``),
    for ``rerank.text_features``: the text is then not read a second time."""

    @property
    def best(self) -> UnitEvidence | None:
        return max(self.units, key=lambda u: (u.score, -u.index), default=None)


def normalized(vec: Sequence[float] | None) -> np.ndarray | None:
    if vec is None:
        return None
    v = np.asarray(vec, dtype=np.float32)
    n = float(np.linalg.norm(v))
    return v / n if n > 0 else None


def score_chunk(
    chunk_id: str,
    text: str,
    context_stems: set[str],
    question_stems: Sequence[str],
    query_vec: np.ndarray | None,
    blob: bytes | None,
    chunk_cosine: float | None = None,
) -> ChunkEvidence:
    """Each unit of ``text`` scored against the question. ``context_stems``: the stems of the
    passage's heading and document title, counted with every unit for ``context_coverage``."""
    return score_prepared(prepare(chunk_id, text, question_stems), context_stems, query_vec, blob, chunk_cosine)


@dataclass(frozen=True)
class PreparedChunk:
    """The part of ``score_chunk`` that needs nothing from the store (``prepare``): the units of
    a chunk's text, which of the question's stems each holds, and how close together."""

    chunk_id: str
    terms: frozenset[str]
    units: tuple[Unit, ...]
    have: tuple[frozenset[str], ...]
    proximity: tuple[float, ...]
    words: list[str] | None = field(default=None, compare=False, repr=False)


def prepare(chunk_id: str, text: str, question_stems: Sequence[str]) -> PreparedChunk:
    """``text`` split into units and each read against ``question_stems``: the query path does
    this while the store reads the unit vectors and titles ``score_prepared`` needs."""
    units = split_units(text)
    terms = frozenset(question_stems)
    unit_tokens = [tokens(u.text) for u in units]
    unit_words = [stems_of_tokens(t) for t in unit_tokens]
    have = tuple(terms.intersection(words) for words in unit_words)
    # proximity_in is 0.0 or 1.0 (already rounded) below two stems
    near = tuple(
        round(proximity_in(w, h), 6) if len(h) > 1 else proximity_in(w, h)
        for w, h in zip(unit_words, have, strict=True)
    )
    words = joined_stems(text, units, unit_tokens, unit_words)
    return PreparedChunk(chunk_id, terms, tuple(units), have, near, words)


def score_prepared(
    chunk: PreparedChunk,
    context_stems: set[str],
    query_vec: np.ndarray | None,
    blob: bytes | None,
    chunk_cosine: float | None = None,
) -> ChunkEvidence:
    """``score_chunk`` of a ``prepare``d chunk, given what the store read: its unit vectors
    (``blob``) and the stems of its heading and title (``context_stems``)."""
    units, terms = chunk.units, chunk.terms
    cosines: list[float | None] = [None] * len(units)
    if query_vec is not None and blob:
        matrix = decode(blob, int(query_vec.shape[0]))
        if len(matrix) == min(len(units), MAX_UNITS):
            norms = np.linalg.norm(matrix, axis=1)
            sims = (matrix @ query_vec) / np.where(norms > 0, norms, 1.0)
            cosines[: len(sims)] = sims.tolist()
    n = len(terms)
    context_terms = terms & context_stems
    # a coverage is k/n for k of the n question stems: each rounding (and a score without a
    # cosine) made once per k, not once per unit
    shares = [k / n for k in range(n + 1)] if n else [0.0]
    rounded = [round(share, 6) for share in shares]
    word_scores = [round(0.0 + COVERAGE_WEIGHT * share, 6) for share in shares]
    out = []
    for i, u in enumerate(units):
        have = chunk.have[i]
        k = len(have)
        cos = cosines[i]
        out.append(
            UnitEvidence(
                chunk_id=chunk.chunk_id,
                index=i,
                text=u.text,
                start=u.start,
                end=u.end,
                cosine=None if cos is None else round(cos, 6),
                coverage=rounded[k],
                context_coverage=rounded[len(have | context_terms)],
                proximity=chunk.proximity[i],
                score=word_scores[k] if cos is None else round(cos + COVERAGE_WEIGHT * shares[k], 6),
            )
        )
    return ChunkEvidence(chunk.chunk_id, tuple(out), chunk_cosine, chunk.words)


def joined_stems(
    text: str, units: list[Unit], unit_tokens: list[list[str]], unit_words: list[list[str]]
) -> list[str] | None:
    """The stems of ``text``'s content words (``content_stem_list(text)``) put together from its
    units' tokens and stems, or None where they cannot be: ``text`` is not ASCII (lowercasing
    and word characters are then per character), a unit's shown text is not its span's text
    with whitespace collapsed (a table row, a fragment merged across a table header), or a
    word stands outside every unit (a table header). Then the units' tokens, in order, are the
    text's, and the content words are the units' but for the word after a "how" ending the unit
    before ("how long"), which the text drops and its unit (starting with it) keeps."""
    if not text.isascii():
        return None
    end = 0
    for u in units:
        if u.start < end or not _no_word_between(text, end, u.start):
            return None
        if u.text != " ".join(text[u.start : u.end].split()):
            return None
        end = u.end
    if not _no_word_between(text, end, len(text)):
        return None
    out: list[str] = []
    previous = ""
    for toks, words in zip(unit_tokens, unit_words, strict=True):
        if toks and frames_after_how(previous, toks[0]) and is_content(toks[0]):  # words[0] is its stem
            out += words[1:]
        else:
            out += words
        previous = toks[-1] if toks else previous
    return out


def evidence_features(evidence: Mapping[str, ChunkEvidence], chunk_ids: Sequence[str]) -> list[dict[str, float]]:
    """The rerank features of sentence evidence for each of ``chunk_ids`` (in order):
    ``unit_cos_rel`` (best unit cosine minus the best of all candidates, x10; -1 without one),
    ``unit_cov`` (coverage of the best-scoring unit) and ``unit_prox`` (its proximity)."""
    best = {cid: ev.best for cid, ev in evidence.items()}
    top = max((b.cosine for b in best.values() if b is not None and b.cosine is not None), default=None)
    out = []
    for cid in chunk_ids:
        b = best.get(cid)
        cos_units = [u.cosine for u in evidence[cid].units if u.cosine is not None] if cid in evidence else []
        out.append(
            {
                "unit_cos_rel": (max(cos_units) - top) * 10 if cos_units and top is not None else -1.0,
                "unit_cov": b.coverage if b is not None else 0.0,
                "unit_prox": b.proximity if b is not None else 0.0,
            }
        )
    return out


def _no_word_between(text: str, start: int, end: int) -> bool:
    """No token of the ASCII ``text`` has a character in ``text[start:end]`` or, where that is
    empty, runs across ``start``."""
    if start == end:
        return not (0 < start < len(text) and text[start - 1].isalnum() and text[start].isalnum())
    gap = text[start:end]
    return gap.isspace() or not tokens(gap)
