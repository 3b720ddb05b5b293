"""The query path's knobs: legs and their weights, rerank, sentence evidence, the graph,
traversal and the planner."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, field_validator

from rag_engine.config.base import Frozen

LEGS = ("exact", "lexical", "dense", "live", "graph")
"""Retrieval legs fused by weighted RRF; a weight of 0 turns a leg off (its index stays). ``live``
is the packs' live SQL sources (nothing without ``packs[].live_sources``); ``graph`` the chunks
bounded traversal reaches (ranked by path score), when the planner lets it run."""


class RerankConfig(Frozen):
    """The feature reranker (``rag_engine/retrieval/rerank.py``) over the fused top ``top_n``."""

    method: Literal["features", "none"] = "features"
    """``none`` keeps the fused order (a ``local_inference_model`` with the rerank capability may
    still reorder it in ``run_query``)."""
    top_n: int = Field(20, ge=2, le=200)
    weights: str = "config/rerank.json"
    """Committed weights, fitted by ``python -m evals.fit_rerank`` (path relative to the root)."""


class EvidenceConfig(Frozen):
    """Sentence evidence (``rag_engine/retrieval/sentence_evidence.py``): each chunk's answerable
    units (sentences, list items, table rows) get their own vectors at index time; the query path
    scores the top candidates by their best units, answers by quoting them, and decides
    answer-or-refuse from that evidence (``abstain``)."""

    index_units: bool = True
    """Embed every chunk's units beside the chunk (the same embedder and cache, the same write).
    Off: units are scored by their words only."""
    top_n: int = Field(20, ge=1, le=200)
    """Candidates of the fused order whose units are scored (their scores are rerank features)."""
    answer_max_units: int = Field(3, ge=1, le=10)
    """The extractive answer quotes at most this many units."""
    answer_max_chars: int = Field(600, ge=80, le=4000)
    """... and at most this many characters of them."""
    abstain: str | None = "config/abstain.json"
    """The fitted answer-or-refuse model (``python -m evals.fit_abstain``); None: always answer
    what was retrieved (the model still may refuse)."""
    abstain_threshold: float | None = Field(None, ge=0, le=1)
    """Refuse below this probability that the evidence answers the question; None: the threshold
    the fitting chose on the dev split (written in the model file)."""


class RetrievalConfig(Frozen):
    lexical_k: int = Field(20, ge=1, le=1000)
    dense_k: int = Field(20, ge=1, le=1000)
    legs: tuple[str, ...] = LEGS
    """The retrieval legs a question runs, in order, by registered name (``retrieval/leg.py``): a
    new leg is a class registered by name plus its name here. The live leg reads the dense leg's
    rows, so it comes after it; fusion ranks ties in this order."""
    weights: dict[str, float] = {}
    """Per-leg weight in the weighted RRF (score = sum weight / (rrf_k + rank)); 0 turns a leg off.
    Legs left out keep 1.0, except the dense leg, whose default comes from the active embedding
    model's ``dense_weight`` (a lexical-only embedder such as local_hash gets a low one)."""
    max_exact: int = Field(3, ge=0, le=20)
    """At most this many exact reference hits (resolved, unambiguous keys), ranked by the chunk's
    lexical rank for the question."""
    graph_tail: int = Field(0, ge=0, le=20)
    """At most this many chunks the graph reached, which fusion ranked below k, take the last
    places of the top k (the graph adds what text retrieval cannot rank; it never takes over).
    Off by default: with the shipped (fixture) graph, 2 cost one GDPR golden question its gold
    passage (Recall@10 0.897 -> 0.862) and moved no other set; turn it on for a graph you trust."""
    exact_phrase: bool = False
    """Lexical hits holding the question's whole content phrase join the exact leg. Off: measured
    on and off, it cost 0.011 MAP@10 on the GDPR golden questions that name no rule and moved no
    other set (a phrase hit is a lexical hit already; docs/retrieval.md)."""
    ambiguous_ref_boost: float = Field(0.5, ge=0, le=2)
    """Weight of the ``references`` list: candidates citing a reference the question names, and (at
    half strength) those of a document answering a key the question names ambiguously (several
    documents answer it: not an exact hit), each getting ``weight / (rrf_k + n)`` by its place n
    in that list, as a leg would."""
    min_chunk_words: int = Field(2, ge=0, le=50)
    """Engine floor of words (two letters or more) a chunk needs to be retrieved by the lexical or
    dense leg by itself; a pack's ``min_chunk_words`` may raise it. Below it a chunk ("INTRODUCTION",
    a bare rule number) stays a citation anchor and exact reference target."""
    scope_boost: float = Field(0.5, ge=0, le=2)
    """Weight of the ``scope`` list: the candidates of a document the question names as a whole
    ("under the AML Rulebook"), each getting ``weight / (rrf_k + n)`` by its place n in that list
    (a preference, never a filter)."""
    lookup_max_terms: int = Field(3, ge=0, le=20)
    """A question with at most this many content words besides its references is a lookup: its
    exact hits lead the ranking. Otherwise exact hits are one fused leg (a question that only
    mentions a rule in passing is usually answered by a passage that cites it)."""
    max_k: int = Field(50, ge=1, le=1000)
    """Largest k a caller may ask for; a k outside 1..max_k is a clear input error."""
    max_question_chars: int = Field(4000, ge=16)
    """Longer questions are refused with a clear input error (Lucene caps boolean clauses)."""
    query_embed_timeout_s: float = Field(5.0, gt=0, le=600)
    """The longest a question waits for its embedding, all attempts together; each attempt's
    HTTP timeout is the same (the indexing side keeps its provider's ``timeout_s``, sized for a
    batch of long passages). Past it, or on any embedding failure, the question is answered from
    the other legs, with a ``dense_degraded`` event."""
    query_embed_retries: int = Field(0, ge=0, le=3)
    """Retries of a failed question embedding (at most the provider's ``max_retries``), within
    ``query_embed_timeout_s``."""

    @field_validator("legs")
    @classmethod
    def _live_after_dense(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(value)) != len(value):
            raise ValueError(f"retrieval.legs names a leg twice: {list(value)}")
        if "live" in value and "dense" in value and value.index("live") < value.index("dense"):
            raise ValueError("retrieval.legs: 'live' must come after 'dense' (it places its rows among the dense hits)")
        return value

    @field_validator("weights")
    @classmethod
    def _known_legs(cls, value: dict[str, float], info: ValidationInfo) -> dict[str, float]:
        known = [*LEGS, *(leg for leg in info.data.get("legs", ()) if leg not in LEGS)]
        unknown = sorted(set(value) - set(known))
        if unknown:
            raise ValueError(f"unknown retrieval legs {unknown}; known: {known}")
        if any(w < 0 for w in value.values()):
            raise ValueError("leg weights must be >= 0")
        return {leg: float(w) for leg, w in value.items()}

    live_on_dense: bool = True
    """Rows of the live SQL leg are embedded (passage side, on the question's deadline) and placed
    in the dense leg by their cosine to the question, so a row that answers competes as a stored
    passage would (``retrieval/live_dense.py``); off, they have their own leg's share only."""
    reference_expansion_k: int = Field(5, ge=0, le=100)
    final_k: int = Field(10, ge=1, le=100)
    rrf_k: int = Field(60, ge=1)
    exact_match_boost: float = Field(1.0, ge=0)
    rerank: RerankConfig = RerankConfig()
    evidence: EvidenceConfig = EvidenceConfig()
    min_evidence_coverage: float = Field(0.5, ge=0, le=1)
    """Share of the question's content stems (``rag_engine/retrieval/evidence.py``) the best
    context block must hold in its text, heading or document title; below it the answer is
    "insufficient evidence" without a model call (exact reference hits always pass). Measured
    against 0.51 (more than half) on the golden and paraphrase sets: docs/retrieval.md."""


class GraphConfig(Frozen):
    confidence_floor: float = Field(0.5, ge=0, le=1)
    confidence_buckets: dict[str, float] = {"high": 0.8, "medium": 0.5, "low": 0.0}
    target_resolution_version: str = "1"


class TraversalConfig(Frozen):
    max_depth: int = Field(2, ge=1, le=4)
    max_paths: int = Field(20, ge=1, le=500)
    max_candidates: int = Field(5, ge=0, le=100)
    max_graph_only_in_top_k: int = Field(2, ge=0, le=20)
    """At most this many candidates found by traversal alone in a question's top k, whatever
    ``retrieval.weights.graph`` is (``graph/quality_bounds.py``); exact hits always rank above
    anything the graph contributed to."""
    per_seed_limit: int = Field(5, ge=1, le=100)
    confidence_floor: float = Field(0.5, ge=0, le=1)
    relationship_bonus: dict[str, float] = {}
    policy_version: str = "1"


class PlannerConfig(Frozen):
    min_query_terms: int = Field(3, ge=1)
    min_entity_match_score: float = Field(0.75, ge=0, le=1)
    max_ambiguous_matches: int = Field(3, ge=1)
    min_seed_entities: int = Field(2, ge=1)
