"""Answer or refuse, decided from the evidence the engine has, by a fitted model: not a word
floor on whole passages.

The evidence (``decision_features``), read off the top candidates after ranking:

- ``unit_cos``: the best unit's (sentence, list item, table row) cosine to the question;
- ``unit_cov``: the best share of the question's content stems one unit holds;
- ``unit_ctx_cov``: the same with the unit's heading and document title counted;
- ``passage_cov``: the best share one whole block holds (aliases folded: ``evidence``);
- ``missing``: the share of the question's content stems that no top candidate holds anywhere;
- ``unknown_name``: the question names something (a capitalised word past its first, or an
  acronym) that no top candidate holds: "parental leave at Google" asked of Company X's policies;
- ``store_missing``: the share of the question's content words that nothing the role may read
  holds at all (``store.vocabulary``: the fulltext index), and ``unknown_to_store``: a name among them;
- ``margin``: the best unit score of the first candidate minus that of the second;
- ``exact``: the first candidate is an exact reference or phrase hit.

The model is a logistic regression fitted by ``python -m evals.fit_abstain`` (scikit-learn) on
the TRAIN split of the golden sets (answerable questions whose gold was retrieved against the
questions that have no answer for their role), its threshold chosen on the DEV split, and
committed (``retrieval.evidence.abstain``, default ``config/abstain.json``); the test split
judges it. ``retrieval.evidence.abstain_threshold`` overrides the threshold: lower answers more
(fewer found-but-refused), higher refuses more (fewer out-of-scope answered).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from rag_engine.errors import ConfigError
from rag_engine.retrieval.candidates import Candidate
from rag_engine.retrieval.evidence import AliasGroups
from rag_engine.text.terms import content_stems, content_words, is_content, stem

FEATURES: tuple[str, ...] = (
    "unit_cos",
    "unit_cov",
    "unit_ctx_cov",
    "passage_cov",
    "missing",
    "unknown_name",
    "store_missing",
    "unknown_to_store",
    "margin",
    "exact",
)
TOP = 5
"""Candidates whose evidence the decision reads."""

_NAME = re.compile(r"(?<=[\s(\"'])([A-Z][\w&.-]*[A-Za-z0-9])")


class AbstainModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    version: str
    features: tuple[str, ...]
    coef: tuple[float, ...]
    intercept: float
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    threshold: float
    fitted_on: dict[str, Any] = {}

    def probability(self, x: dict[str, float]) -> float:
        z = self.intercept + sum(
            c * ((x.get(f, 0.0) - m) / (s or 1.0))
            for f, c, m, s in zip(self.features, self.coef, self.mean, self.scale, strict=True)
        )
        return 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, z))))


_MODELS: dict[Path, tuple[float, AbstainModel]] = {}


def abstain_model(path: Path) -> AbstainModel:
    """The committed model, cached per file until it changes; a missing or malformed file or an
    unknown feature is a ``ConfigError``."""
    try:
        mtime = path.stat().st_mtime
        cached = _MODELS.get(path)
        if cached is None or cached[0] != mtime:
            model = AbstainModel.model_validate_json(path.read_text(encoding="utf-8"))
            unknown = sorted(set(model.features) - set(FEATURES))
            lengths = {len(model.features), len(model.coef), len(model.mean), len(model.scale)}
            if unknown or len(lengths) != 1:
                raise ValueError(f"unknown features {unknown} or vectors of different lengths")
            cached = (mtime, model)
            _MODELS[path] = cached
    except (OSError, ValueError) as exc:
        raise ConfigError(f"retrieval.evidence.abstain {path}: {exc}") from None
    return cached[1]


def named_things(question: str) -> set[str]:
    """Stems of what the question names: capitalised words past the first, and acronyms."""
    names = {m.group(1) for m in _NAME.finditer(" " + question[1:] if question else "")}
    names |= set(re.findall(r"\b[A-Z]{2,}\b", question))
    return {stem(w.lower()) for w in names if is_content(w.lower())}


def unheld_words(question: str, candidates: Sequence[Candidate]) -> list[str]:
    """The question's content words (lowercased) that no top candidate holds: the ones to look up
    in the store (``store.vocabulary.absent_words``)."""
    held: set[str] = set()
    for c in candidates[:TOP]:
        held |= content_stems(f"{c.doc_title} {c.heading} {c.text}")
    return sorted({w for w in content_words(question) if stem(w) not in held})


def decision_features(
    question: str,
    candidates: Sequence[Candidate],
    passage_coverage: float,
    aliases: AliasGroups,
    absent: AbstractSet[str] = frozenset(),
) -> dict[str, float]:
    """The evidence of the top candidates (``TOP``) as the model's features; ``absent``: the
    question's words the permitted store does not hold at all (``store.vocabulary``)."""
    top = list(candidates[:TOP])
    units = [u for c in top for u in c.units]
    cosines = [u.cosine for u in units if u.cosine is not None]
    terms = content_stems(aliases.fold(question))
    held: set[str] = set()  # stems held, aliases folded to their group
    held_raw: set[str] = set()  # and as written
    for c in top:
        text = f"{c.doc_title} {c.heading} {c.text}"
        held |= content_stems(aliases.fold(text))
        held_raw |= content_stems(text)
    names = {n for n in named_things(question) if n not in held_raw and not content_stems(aliases.fold(n)) <= held}
    words = {stem(w) for w in content_words(question)}
    best = [max((u.score for u in c.units), default=0.0) for c in top[:2]]
    return {
        "unit_cos": max(cosines, default=0.0),
        "unit_cov": max((u.coverage for u in units), default=0.0),
        "unit_ctx_cov": max((u.context_coverage for u in units), default=0.0),
        "passage_cov": passage_coverage,
        "missing": len(terms - held) / len(terms) if terms else 0.0,
        "unknown_name": 1.0 if names else 0.0,
        "store_missing": len({stem(w) for w in absent}) / len(words) if words else 0.0,
        "unknown_to_store": 1.0 if {stem(w) for w in absent} & names else 0.0,
        "margin": best[0] - best[1] if len(best) == 2 else (best[0] if best else 0.0),
        "exact": 1.0 if top and top[0].exact else 0.0,
    }
