"""What retrieval hands on: ranked candidates with their provenance, and the result around them.

Shared by the retriever, the rerankers, the context assembler, the answerer and the audit record.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rag_engine.retrieval.live_rows import LiveProvenance


class Candidate(BaseModel):
    model_config = ConfigDict(frozen=True)

    chunk_id: str
    anchor: str
    doc_id: str
    heading: str
    text: str
    collection: str
    score: float
    """The fused score (weighted RRF plus bounded boosts) the ranking is by; a graph
    candidate's own path score is ``path_score``."""
    sources: tuple[str, ...]
    exact: bool = False
    doc_title: str = ""
    """The title of the chunk's document (set on the final candidates and expansions)."""
    via: str | None = None
    """For expansion candidates: the reference text that led here."""
    path_score: float | None = None
    path: tuple[dict[str, Any], ...] | None = None
    """For graph candidates: the hops (entities, relationship type, confidence, evidence chunk)."""
    provenance: LiveProvenance | None = None
    """For live candidates (rag_engine/retrieval/live_source.py): source, key, committed-at,
    retrieved-at, stale."""
    retrieved_at: datetime | None = None
    """When the store (or source) answered: set by ``retrieve`` on every candidate and expansion."""
    features: dict[str, float] | None = None
    """The reranker's features (``rerank.FEATURES``), for the top N when the reranker ran."""
    units: tuple[Any, ...] = Field(default=(), exclude=True)
    """Sentence evidence (``sentence_evidence.UnitEvidence``, text order) for the top candidates:
    what the extractive answer quotes; not serialized (the features carry its figures)."""
    session_id: str | None = None
    """The caller's session (``run_query(session_id=...)``, ``rag query --session``), for the audit trail."""


class RetrievalResult(BaseModel):
    query: str
    role: str
    collections: tuple[str, ...]
    candidates: list[Candidate]
    trace: list[dict[str, Any]] = Field(default_factory=list)
    events: list[dict[str, Any]] = Field(default_factory=list)
    plan: dict[str, Any] | None = None
    expansions: list[Candidate] = Field(default_factory=list)
    """Chunks the top k cite (deterministic reference expansion): context for an answer, reported
    apart so they never push a fused candidate out of the top k."""
