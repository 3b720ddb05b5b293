"""The rerank stage's word work as it was before it was made cheaper: tokenizing, stemming, unit
splitting, ``score_chunk``, ``evidence_features``, ``text_features`` and ``question_stems``,
copied verbatim and frozen. It is the reference the equality test
(``tests/test_rerank_words_equal.py``) and the micro-benchmark (``evals.bench.rerank_cpu``) hold the
engine's code to: same units, same features, same rounding, bit for bit. Not used by the engine.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping, Sequence

import numpy as np

from rag_engine.retrieval.sentence_evidence import COVERAGE_WEIGHT, ChunkEvidence, UnitEvidence
from rag_engine.store.units import decode
from rag_engine.text.analyzer import EVIDENCE_STOPWORDS, snowball
from rag_engine.text.sentences import MAX_UNIT_CHARS, MAX_UNITS, MIN_WORDS, Unit

STOPWORDS = EVIDENCE_STOPWORDS
stem = snowball
_TOKEN = re.compile(r"[^\W_]+")


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


def is_content(word: str) -> bool:
    return word not in STOPWORDS and (len(word) > 1 or word.isdigit())


_HOW = frozenset(["long", "many", "much", "often", "soon", "far"])


def content_words(text: str) -> list[str]:
    words = tokens(text)
    return [w for i, w in enumerate(words) if is_content(w) and not (w in _HOW and i and words[i - 1] == "how")]


def content_stems(text: str) -> set[str]:
    return {stem(w) for w in content_words(text)}


_ABBREVIATIONS = frozenset(
    [
        "e.g",
        "i.e",
        "etc",
        "art",
        "arts",
        "no",
        "nos",
        "para",
        "paras",
        "cf",
        "vs",
        "mr",
        "mrs",
        "ms",
        "dr",
        "st",
        "sec",
        "ch",
        "p",
        "pp",
        "fig",
        "ltd",
        "inc",
        "co",
        "eu",
        "approx",
        "min",
        "max",
        "jan",
        "feb",
        "mar",
        "apr",
        "jun",
        "jul",
        "aug",
        "sep",
        "sept",
        "oct",
        "nov",
        "dec",
        "reg",
        "regs",
        "sub",
        "rev",
        "vol",
    ]
)
_END = re.compile(r"([.!?])[\"')\]]?\s+(?=[\"'(\[]?[A-Z0-9])")
_POINT = re.compile(r";\s+(?:and\s+|or\s+)?(?=\((?:[a-z]{1,4}|\d{1,3})\)\s)")
_LIST_ITEM = re.compile(r"^\s*(?:[-*\u2022]|\d{1,3}[.)]|\((?:[a-z]{1,4}|\d{1,3})\))\s+")
_TABLE_SEPARATOR = re.compile(r"^\s*\|?\s*:?-{3,}")
_WORD = re.compile(r"[^\W_]+")


def _words(text: str) -> int:
    return len(_WORD.findall(text))


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _prose_cuts(text: str, base: int) -> list[tuple[int, int]]:
    """Spans (absolute) of the sentences of one prose block starting at ``base``."""
    cuts: list[int] = []
    for m in _END.finditer(text):
        before = text[: m.start(1)].rsplit(None, 1)
        word = before[-1].lower().lstrip("(\"'") if before else ""
        if m.group(1) == "." and (word.rstrip(".") in _ABBREVIATIONS or (len(word) == 1 and word.isalpha())):
            continue
        cuts.append(m.end())
    cuts += [m.start() + 1 for m in _POINT.finditer(text)]
    bounds = [0, *sorted(set(cuts)), len(text)]
    spans = []
    for a, b in itertools.pairwise(bounds):
        piece = text[a:b]
        lead = len(piece) - len(piece.lstrip())
        trail = len(piece.rstrip())
        if trail > lead:
            spans.append((base + a + lead, base + a + trail))
    return spans


def _blocks(text: str) -> list[tuple[str, int, int, str]]:
    """(kind, start, end, embed prefix) of each table row, list item or prose paragraph."""
    out: list[tuple[str, int, int, str]] = []
    header: list[str] | None = None
    para_start: int | None = None
    para_end = 0
    pos = 0
    for line in text.split("\n"):
        start, end = pos, pos + len(line)
        pos = end + 1
        stripped = line.strip()
        is_table = stripped.startswith("|") and stripped.count("|") >= 2
        if para_start is not None and (not stripped or is_table or _LIST_ITEM.match(line)):
            out.append(("prose", para_start, para_end, ""))
            para_start = None
        if not stripped:
            header = None
            continue
        if is_table:
            if _TABLE_SEPARATOR.match(stripped):
                continue
            if header is None:
                header = _cells(stripped)
                continue
            out.append(("row", start, end, "; ".join(header)))
            continue
        header = None
        if _LIST_ITEM.match(line):
            out.append(("item", start, end, ""))
            continue
        if para_start is None:
            para_start = start
        para_end = end
    if para_start is not None:
        out.append(("prose", para_start, para_end, ""))
    return out


def _row_text(line: str, header: str) -> tuple[str, str]:
    cells = _cells(line)
    names = header.split("; ")
    shown = " | ".join(c for c in cells if c)
    if len(names) != len(cells):
        return shown, shown
    return shown, "; ".join(f"{n}: {c}" for n, c in zip(names, cells, strict=True) if c)


def _clip(text: str) -> str:
    return text if len(text) <= MAX_UNIT_CHARS else text[:MAX_UNIT_CHARS].rsplit(" ", 1)[0]


def split_units(text: str) -> list[Unit]:
    """The units of ``text`` in order (see the module docstring)."""
    raw: list[tuple[int, int, str, str]] = []
    for kind, start, end, header in _blocks(text):
        if kind == "row":
            shown, embedded = _row_text(text[start:end], header)
            raw.append((start, end, shown, embedded))
            continue
        spans = _prose_cuts(text[start:end], start) if kind == "prose" else [(start, end)]
        if kind == "item" and _words(text[start:end]) > 40:  # a long list item reads as prose
            spans = _prose_cuts(text[start:end], start)
        for a, b in spans:
            shown = " ".join(text[a:b].split())
            raw.append((a, b, shown, shown))
    units: list[Unit] = []
    pending: tuple[int, str, str] | None = None
    for start, end, shown, embedded in raw:
        if pending is not None:
            start, shown, embedded = pending[0], f"{pending[1]} {shown}", f"{pending[2]} {embedded}"
            pending = None
        if _words(shown) < MIN_WORDS:
            pending = (start, shown, embedded)
            continue
        units.append(Unit(start, end, shown, _clip(embedded)))
    if pending is not None:
        if units:
            last = units[-1]
            units[-1] = Unit(last.start, len(text.rstrip()), f"{last.text} {pending[1]}", _clip(last.embed_text))
        elif pending[1].strip():
            units.append(Unit(pending[0], len(text.rstrip()), pending[1], _clip(pending[2])))
    return units


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
    units = split_units(text)
    terms = set(question_stems)
    cosines: list[float | None] = [None] * len(units)
    if query_vec is not None and blob:
        matrix = decode(blob, int(query_vec.shape[0]))
        if len(matrix) == min(len(units), MAX_UNITS):
            norms = np.linalg.norm(matrix, axis=1)
            sims = (matrix @ query_vec) / np.where(norms > 0, norms, 1.0)
            cosines[: len(sims)] = [float(s) for s in sims]
    out = []
    for i, u in enumerate(units):
        words = [stem(w) for w in content_words(u.text)]
        have = terms & set(words)
        coverage = len(have) / len(terms) if terms else 0.0
        context_coverage = len(terms & (set(words) | context_stems)) / len(terms) if terms else 0.0
        positions: dict[str, list[int]] = {}
        for pos, s in enumerate(words):
            if s in terms:
                positions.setdefault(s, []).append(pos)
        cos = cosines[i]
        score = (cos if cos is not None else 0.0) + COVERAGE_WEIGHT * coverage
        out.append(
            UnitEvidence(
                chunk_id=chunk_id,
                index=i,
                text=u.text,
                start=u.start,
                end=u.end,
                cosine=None if cos is None else round(cos, 6),
                coverage=round(coverage, 6),
                context_coverage=round(context_coverage, 6),
                proximity=round(proximity(positions), 6),
                score=round(score, 6),
            )
        )
    return ChunkEvidence(chunk_id, tuple(out), chunk_cosine)


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


def _window(positions: dict[str, list[int]]) -> int:
    """Shortest span of token positions holding one occurrence of every key (sliding window)."""
    events = sorted((p, s) for s, ps in positions.items() for p in ps)
    need, best, left = len(positions), math.inf, 0
    have: dict[str, int] = {}
    for pos, s in events:
        have[s] = have.get(s, 0) + 1
        while len(have) == need:
            best = min(best, pos - events[left][0] + 1)
            ls = events[left][1]
            have[ls] -= 1
            if not have[ls]:
                del have[ls]
            left += 1
    return int(best) if best != math.inf else 0


def proximity(positions: dict[str, list[int]]) -> float:
    """Matched stems / the shortest token window holding one of each (1.0: side by side)."""
    window = _window(positions) if len(positions) > 1 else len(positions)
    return len(positions) / window if window else 0.0


def text_features(question_stems: Sequence[str], title: str, heading: str, text: str) -> dict[str, float]:
    """The word-level features of one passage against the question's content stems (in order)."""
    terms = set(question_stems)
    if not terms:
        return {}
    words = [stem(w) for w in content_words(text)]
    heading_stems = {stem(w) for w in content_words(heading)}
    title_stems = {stem(w) for w in content_words(title)}
    body = set(words)
    positions: dict[str, list[int]] = {}
    for i, s in enumerate(words):
        if s in terms:
            positions.setdefault(s, []).append(i)
    q_bigrams = set(itertools.pairwise(question_stems))
    p_bigrams = set(itertools.pairwise(words))
    return {
        "text_cov": len(terms & (body | heading_stems | title_stems)) / len(terms),
        "heading_cov": len(terms & heading_stems) / len(terms),
        "title_cov": len(terms & title_stems) / len(terms),
        "proximity": proximity(positions),
        "bigram_cov": len(q_bigrams & p_bigrams) / len(q_bigrams) if q_bigrams else 0.0,
        "log_len": min(1.5, math.log1p(len(words)) / math.log(1000)),
    }


def question_stems(question: str) -> list[str]:
    return [stem(w) for w in content_words(question)]
