"""Baseline retrieval: policy gate -> exact reference hits + fulltext + vector -> RRF fusion ->
deterministic reference expansion. Every step and its timing lands in the trace."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any, Iterator

from pydantic import BaseModel, ConfigDict, Field

from rag_engine.engine import Engine
from rag_engine.graph.planner import content_terms, plan
from rag_engine.graph.schema import check_embedder
from rag_engine.graph.traversal import candidate_chunks, traverse
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
    path_score: float | None = None
    path: tuple[dict, ...] | None = None
    """For graph candidates: the hops (entities, relationship type, confidence, evidence chunk)."""


class RetrievalResult(BaseModel):
    query: str
    role: str
    collections: tuple[str, ...]
    candidates: list[Candidate]
    trace: list[dict[str, Any]] = Field(default_factory=list)
    events: list[dict[str, Any]] = Field(default_factory=list)
    plan: dict[str, Any] | None = None


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
             collections: list[str] | None = None, weights: dict[str, float] | None = None) -> RetrievalResult:
    cfg = engine.cfg.retrieval
    k = k or cfg.final_k
    trace = Trace()
    with trace.step("policy_gate", role=role) as t:
        decision: PolicyDecision = gate(engine.cfg, role, collections)
        t["collections"] = list(decision.collections)
    events = [e for e in [decision.governance_event()] if e]
    result = RetrievalResult(query=query, role=role, collections=decision.collections, candidates=[],
                             events=events)
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
        phrase = " ".join(content_terms(query))
        ref_ids = {r["chunk_id"] for r in exact_rows}
        phrase_rows = []
        if len(phrase.split()) >= 2:  # a lexical hit holding the whole question is exact too
            phrase_rows = [r for r in lexical if r["chunk_id"] not in ref_ids
                           and phrase in " ".join(content_terms(f"{r['heading']} {r['text']}"))]
        exact_ids = ref_ids | {r["chunk_id"] for r in phrase_rows}
        top = 1.0 / (cfg.rrf_k + 1) * 2
        candidates = [_candidate(r, top + 1.0, ("exact_reference",), exact=True) for r in exact_rows]
        candidates += [_candidate(r, top + 0.5, ("lexical", "exact_phrase"), exact=True) for r in phrase_rows]
        candidates += [_candidate(r, s, src) for r, s, src in fused if r["chunk_id"] not in exact_ids]
        candidates = candidates[:k]
        t["fused"] = len(fused)
    graph_candidates: list[Candidate] = []
    packs = [p for p in engine.packs.values() if set(p.manifest.collections) & set(decision.collections)]
    with trace.step("planner") as t:
        decision_plan = plan(drv, db, query, packs, engine.cfg.planner, engine.cfg.traversal, decision.collections)
        t.update(reason=decision_plan.reason, seeds=[s.name for s in decision_plan.seeds], detail=decision_plan.detail)
        result.plan = decision_plan.model_dump(mode="json")
    if decision_plan.traverse:
        with trace.step("traversal", max_depth=engine.cfg.traversal.max_depth) as t:
            paths = traverse(drv, db, [(s.entity_id, s.name) for s in decision_plan.seeds], engine.cfg.traversal,
                             decision.collections)
            picked = candidate_chunks(paths, engine.cfg.traversal.max_candidates)
            rows = {r["chunk_id"]: r for r in store_reads.chunks_by_id(drv, db, [c for c, _ in picked],
                                                                       decision.collections)}
            for chunk_id, gp in picked:
                if chunk_id in rows and chunk_id not in exact_ids:
                    graph_candidates.append(_candidate(
                        rows[chunk_id], gp.path_score, ("graph",), path_score=gp.path_score,
                        path=tuple({"seed": gp.seed_name, **h.model_dump()} for h in gp.hops)))
            t.update(paths=len(paths), candidates=len(graph_candidates),
                     dropped_not_permitted=len(picked) - len([c for c, _ in picked if c in rows]))
    with trace.step("fusion_graph", max_graph=engine.cfg.traversal.max_candidates) as t:
        graph_ids = {c.chunk_id for c in graph_candidates}
        exact = [c for c in candidates if c.exact]
        rest = [c for c in candidates if not c.exact and c.chunk_id not in graph_ids]
        ordered = (exact + graph_candidates + rest)[:k]
        t["graph_in_top_k"] = len([c for c in ordered if c.chunk_id in graph_ids])
    with trace.step("reference_expansion", limit=cfg.reference_expansion_k) as t:
        have = {c.chunk_id for c in ordered}
        seeds = [c.chunk_id for c in ordered if not c.exact][: max(3, cfg.reference_expansion_k)]
        expanded = store_reads.referenced(drv, db, seeds, decision.collections, cfg.reference_expansion_k)
        by_id = {c.chunk_id: c for c in ordered}
        added = []
        for row in expanded:
            if row["chunk_id"] in have:
                continue
            seed_score = by_id[row["from_chunk"]].score if row["from_chunk"] in by_id else 0.0
            added.append(_candidate(row, seed_score * 0.5, ("reference",), via=f"{row['via']} <- {row['from_chunk']}"))
        t["added"] = len(added)
    result.candidates = ordered + added
    result.trace = trace.steps
    return result
