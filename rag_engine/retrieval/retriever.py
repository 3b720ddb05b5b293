"""Baseline retrieval: policy gate -> exact reference hits + fulltext + vector -> RRF fusion ->
deterministic reference expansion. Every step and its timing lands in the trace."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any, Iterator

from pydantic import BaseModel, ConfigDict, Field

from rag_engine.engine import Engine
from rag_engine.graph.schema import check_embedder
from rag_engine.packs import ChunkRecord
from rag_engine.retrieval import store_reads
from rag_engine.retrieval.policy import PolicyDecision, gate


class Candidate(BaseModel):
    model_config = ConfigDict(frozen=True)

    chunk_id: str
    anchor: str
    doc_id: str
    heading: str
    text: str
    collection: str
    score: float
    sources: tuple[str, ...]
    exact: bool = False
    via: str | None = None
    """For expansion candidates: the reference text that led here."""


class RetrievalResult(BaseModel):
    query: str
    role: str
    collections: tuple[str, ...]
    candidates: list[Candidate]
    trace: list[dict[str, Any]] = Field(default_factory=list)
    events: list[dict[str, Any]] = Field(default_factory=list)


class Trace:
    def __init__(self) -> None:
        self.steps: list[dict[str, Any]] = []

    @contextmanager
    def step(self, name: str, **info: Any) -> Iterator[dict[str, Any]]:
        entry: dict[str, Any] = {"step": name, **info}
        started = time.perf_counter()
        try:
            yield entry
        finally:
            entry["ms"] = round((time.perf_counter() - started) * 1000, 2)
            self.steps.append(entry)


def query_reference_keys(engine: Engine, text: str) -> list[str]:
    """Normalized reference keys named in the question itself, per pack (``pack|key``)."""
    keys: list[str] = []
    for pack in engine.packs.values():
        probe = ChunkRecord(chunk_id="query", anchor="query", doc_id="query", doc_version="query", ordinal=0,
                            heading="", text=text, collection="", language=pack.manifest.languages[0],
                            content_hash="")
        keys += [f"{pack.name}|{r.normalized}" for r in pack.extract_references(probe)]
    return list(dict.fromkeys(keys))


def _candidate(row: dict[str, Any], score: float, sources: tuple[str, ...], **extra: Any) -> Candidate:
    return Candidate(chunk_id=row["chunk_id"], anchor=row["anchor"], doc_id=row["doc_id"], heading=row["heading"] or "",
                     text=row["text"], collection=row["collection"], score=round(score, 6), sources=sources, **extra)


def fuse(lists: dict[str, list[dict[str, Any]]], rrf_k: int) -> list[tuple[dict[str, Any], float, tuple[str, ...]]]:
    """Reciprocal rank fusion: robust to incomparable score scales (BM25 vs cosine)."""
    scores: dict[str, float] = {}
    rows: dict[str, dict[str, Any]] = {}
    sources: dict[str, list[str]] = {}
    for name, hits in lists.items():
        for rank, row in enumerate(hits, 1):
            cid = row["chunk_id"]
            scores[cid] = scores.get(cid, 0.0) + 1.0 / (rrf_k + rank)
            rows.setdefault(cid, row)
            sources.setdefault(cid, []).append(name)
    order = sorted(scores, key=lambda c: (-scores[c], c))
    return [(rows[c], scores[c], tuple(sources[c])) for c in order]


def retrieve(engine: Engine, query: str, role: str, *, k: int | None = None,
             collections: list[str] | None = None) -> RetrievalResult:
    cfg = engine.cfg.retrieval
    k = k or cfg.final_k
    trace = Trace()
    with trace.step("policy_gate", role=role) as t:
        decision: PolicyDecision = gate(engine.cfg, role, collections)
        t["collections"] = list(decision.collections)
    events = [e for e in [decision.governance_event()] if e]
    result = RetrievalResult(query=query, role=role, collections=decision.collections, candidates=[],
                             trace=trace.steps, events=events)
    if not decision.collections or not query.strip():
        result.trace = trace.steps
        return result

    drv, db = engine.driver, engine.database
    with trace.step("exact_references") as t:
        keys = query_reference_keys(engine, query)
        exact_rows = store_reads.by_keys(drv, db, keys, decision.collections, k)
        t.update(keys=keys, hits=len(exact_rows))
    with trace.step("lexical") as t:
        lexical = store_reads.fulltext(drv, db, query, decision.collections, cfg.lexical_k)
        t["hits"] = len(lexical)
    with trace.step("dense", embedder=engine.embedder_identity) as t:
        check_embedder(drv, db, engine.embedder_identity)
        vec = engine.embed_texts([query], purpose="query")[0]
        dense = store_reads.vector(drv, db, vec, decision.collections, cfg.dense_k)
        t["hits"] = len(dense)
    with trace.step("fusion", method="rrf", rrf_k=cfg.rrf_k) as t:
        fused = fuse({"lexical": lexical, "dense": dense}, cfg.rrf_k)
        exact_ids = {r["chunk_id"] for r in exact_rows}
        top = 1.0 / (cfg.rrf_k + 1) * 2
        candidates = [_candidate(r, top + 1.0, ("exact_reference",), exact=True) for r in exact_rows]
        candidates += [_candidate(r, s, src) for r, s, src in fused if r["chunk_id"] not in exact_ids]
        candidates = candidates[:k]
        t["fused"] = len(fused)
    with trace.step("reference_expansion", limit=cfg.reference_expansion_k) as t:
        have = {c.chunk_id for c in candidates}
        seeds = [c.chunk_id for c in candidates if not c.exact][: max(3, cfg.reference_expansion_k)]
        expanded = store_reads.referenced(drv, db, seeds, decision.collections, cfg.reference_expansion_k)
        by_id = {c.chunk_id: c for c in candidates}
        added = []
        for row in expanded:
            if row["chunk_id"] in have:
                continue
            seed_score = by_id[row["from_chunk"]].score if row["from_chunk"] in by_id else 0.0
            added.append(_candidate(row, seed_score * 0.5, ("reference",), via=f"{row['via']} <- {row['from_chunk']}"))
        t["added"] = len(added)
    exact = [c for c in candidates if c.exact]
    rest = sorted([c for c in candidates if not c.exact] + added, key=lambda c: (-c.score, c.chunk_id))
    result.candidates = exact + rest
    result.trace = trace.steps
    return result
