"""A second look at the top candidates: question and passage read together by a learned linear
model over features the engine computes anyway, reordering the top ``retrieval.rerank.top_n``.

Fusion ranks by each leg's rank alone; it cannot see that the heading of the third candidate is
what the question asks about, or that one passage holds all the question's words close together
while another holds them scattered. The features (``FEATURES``, each in [0, 1] or a small range)
are read off what retrieval already has: each leg's rank and score, the question-passage cosine
of the active embedder (one store read for the top N), stemmed term coverage of the text, the
heading and the document title, term proximity, phrase (bigram) overlap, passage length, and
whether the candidate is an exact hit, in a document the question names, or graph evidence; and
the fused rank and exact flag again for questions that name a rule or article, so the model can
trust fusion more where the question's reference already says which passage it means.

The weights are fitted offline by ``python -m evals.fit_rerank`` on one split of the golden and
paraphrase sets (pairwise logistic loss: a gold passage against a non-gold one of the same
question), judged on the other split, and committed (``config/rerank.json``, named by
``retrieval.rerank.weights``). The score of a candidate is ``sum(weight_f * feature_f)``.

Contract (as the model rerank step, ``local_inference.rerank``): a permutation of the given
candidates, and on any failure the fused order unchanged with a ``rerank_degraded`` event. Exact
hits are protected as fusion protects them: the reference hits of a lookup question stay first,
and graph-only candidates stay below exact hits (the model step keeps every exact hit first). A
cross-encoder or an LLM server replaces it by config: ``retrieval.rerank.method: none`` and a
``local_inference_model`` with the ``rerank`` capability.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from rag_engine.errors import ConfigError
from rag_engine.text.terms import content_stem_list, content_stems

FEATURES: tuple[str, ...] = (
    "fused",  # fused score in units of one rank-1 RRF contribution
    "fused_rank",  # 1 / position in the fused order
    "lexical_rr",  # 1 / rank in the fulltext leg (0 when absent)
    "dense_rr",  # 1 / rank in the vector leg (0 when absent)
    "lexical_rel",  # fulltext score / best fulltext score among the candidates
    "cosine_rel",  # cosine to the question minus the best cosine among the candidates
    "text_cov",  # share of the question's content stems in title + heading + text
    "heading_cov",  # share of them in the heading
    "title_cov",  # share of them in the document title
    "proximity",  # matched stems / shortest token window holding them all
    "bigram_cov",  # share of the question's stem bigrams found as bigrams in the passage
    "log_len",  # log(1 + words) / log(1000)
    "exact",  # an exact reference or phrase hit
    "named_doc",  # in a document the question names
    "graph",  # reached by traversal
    "ref_fused_rank",  # fused_rank, for a question naming a reference (0 otherwise)
    "ref_exact",  # exact, for a question naming a reference (0 otherwise)
    "unit_cos_rel",  # best unit (sentence, list item, table row) cosine minus the best of all, x10
    "unit_cov",  # share of the question's content stems in the best-scoring unit
    "unit_prox",  # proximity of those stems within that unit
)


class RerankModel(BaseModel):
    """Committed weights of the linear reranker and how they were fitted."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: str
    features: tuple[str, ...]
    weights: tuple[float, ...]
    fitted_on: dict[str, Any] = {}

    def score(self, features: dict[str, float]) -> float:
        return sum(w * features.get(f, 0.0) for f, w in zip(self.features, self.weights, strict=True))


def load_model(path: Path) -> RerankModel:
    """The committed weights; a missing file or a feature this engine does not compute is a
    ``ConfigError`` (the query then keeps the fused order, with a ``rerank_degraded`` event)."""
    try:
        model = RerankModel.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"retrieval.rerank.weights {path}: {exc}") from None
    unknown = sorted(set(model.features) - set(FEATURES))
    if unknown or len(model.features) != len(model.weights):
        raise ConfigError(f"retrieval.rerank.weights {path}: unknown features {unknown} or weights of another length")
    return model


_MODELS: dict[Path, tuple[float, RerankModel]] = {}


def rerank_model(path: Path) -> RerankModel:
    """``load_model``, cached per file until it changes."""
    try:
        mtime = path.stat().st_mtime
    except OSError as exc:
        raise ConfigError(f"retrieval.rerank.weights {path}: {exc}") from None
    cached = _MODELS.get(path)
    if cached is None or cached[0] != mtime:
        cached = (mtime, load_model(path))
        _MODELS[path] = cached
    return cached[1]


def _span(events: list[tuple[int, str]], need: int) -> int:
    """Shortest span of the (position, stem) ``events`` (in position order) holding one occurrence
    of each of ``need`` distinct stems (sliding window); 0 if there is none."""
    best, left = math.inf, 0
    have: dict[str, int] = {}
    for pos, s in events:
        have[s] = have.get(s, 0) + 1
        while len(have) == need:
            first, ls = events[left]
            if pos - first + 1 < best:
                best = pos - first + 1
            have[ls] -= 1
            if not have[ls]:
                del have[ls]
            left += 1
    return int(best) if best != math.inf else 0


def _window(positions: dict[str, list[int]]) -> int:
    """Shortest span of token positions holding one occurrence of every key (sliding window)."""
    return _span(sorted([(p, s) for s, ps in positions.items() for p in ps]), len(positions))


def proximity(positions: dict[str, list[int]]) -> float:
    """Matched stems / the shortest token window holding one of each (1.0: side by side)."""
    window = _window(positions) if len(positions) > 1 else len(positions)
    return len(positions) / window if window else 0.0


def proximity_in(words: Sequence[str], matched: AbstractSet[str]) -> float:
    """``proximity`` of the positions in ``words`` of the stems ``matched`` (each of which occurs in
    ``words``), without building the positions: one stem gives 1.0, none 0.0."""
    if len(matched) < 2:
        return float(len(matched))
    return _proximity_of([(i, s) for i, s in enumerate(words) if s in matched], len(matched))


def _proximity_of(events: list[tuple[int, str]], need: int) -> float:
    """``proximity`` of the (position, stem) ``events`` in position order, of ``need`` stems."""
    if need < 2:
        return float(need)
    window = _span(events, need)
    return need / window if window else 0.0


def text_features(
    question_stems: Sequence[str],
    title: str,
    heading: str,
    text: str,
    words: Sequence[str] | None = None,
) -> dict[str, float]:
    """The word-level features of one passage against the question's content stems (in order).
    ``words``: the stems of ``text``'s content words (``content_stem_list(text)``) if the caller
    has them already."""
    terms = set(question_stems)
    if not terms:
        return {}
    if words is None:
        words = content_stem_list(text)
    heading_stems = content_stems(heading)
    title_stems = content_stems(title)
    matched = terms.intersection(words)
    q_bigrams = set(itertools.pairwise(question_stems))
    # the matched stems' occurrences in order: the proximity window's events, and the passage
    # bigrams that can be question bigrams (both stems matched, at neighbouring positions)
    events = [(i, s) for i, s in enumerate(words) if s in matched] if matched else []
    found = {(a, b) for (i, a), (j, b) in itertools.pairwise(events) if j == i + 1}
    n = len(terms)
    return {
        "text_cov": len(matched | (terms & heading_stems) | (terms & title_stems)) / n,
        "heading_cov": len(terms & heading_stems) / n,
        "title_cov": len(terms & title_stems) / n,
        "proximity": _proximity_of(events, len(matched)),
        "bigram_cov": len(q_bigrams & found) / len(q_bigrams) if q_bigrams else 0.0,
        "log_len": min(1.5, math.log1p(len(words)) / math.log(1000)),
    }


def question_stems(question: str) -> list[str]:
    return content_stem_list(question)
