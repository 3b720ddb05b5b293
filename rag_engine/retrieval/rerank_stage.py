"""The rerank stage over the fused pool: sentence evidence of the top candidates (their units
scored against the question), the rerank features (``rerank.FEATURES``) of the top N, and, when
the feature reranker is on, the top N reordered by the committed linear model. Any failure keeps
the fused order, with a ``rerank_degraded`` event."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rag_engine import tracing
from rag_engine.errors import RagError
from rag_engine.retrieval.candidates import Candidate
from rag_engine.retrieval.fusion_stage import protect_exact
from rag_engine.retrieval.leg import Question
from rag_engine.retrieval.rerank import question_stems, rerank_model, text_features
from rag_engine.retrieval.sentence_evidence import (
    ChunkEvidence,
    evidence_features,
    normalized,
    prepare,
    score_prepared,
)
from rag_engine.store import reads, top_reads
from rag_engine.text.sentences import SPLITTER_VERSION
from rag_engine.text.terms import content_stems


@dataclass(frozen=True)
class RerankMode:
    """What the stage does: ``reorder`` the top N by the model, set their ``features`` (fitting,
    evals), score their sentence ``units`` (off: the ablation without sentence evidence)."""

    reorder: bool = False
    features: bool = False
    units: bool = True

    @property
    def runs(self) -> bool:
        return self.reorder or self.features


def reranked(q: Question, pool: list[Candidate], mode: RerankMode, t: dict[str, Any]) -> list[Candidate]:
    """``pool`` with its top N carrying their features and, when ``mode.reorder``, reordered by the
    committed linear model; on any failure the fused order, with a ``rerank_degraded`` event."""
    engine = q.engine
    cfg = engine.cfg.retrieval.rerank
    top, rest = pool[: cfg.top_n], pool[cfg.top_n :]
    try:
        if mode.units:
            with tracing.span("rag.sentence_evidence", candidates=len(top)):
                evidence = sentence_evidence(q, top, t)
            cos = {cid: ev.cosine for cid, ev in evidence.items() if ev.cosine is not None}
        else:
            read_titles(q, top)
            evidence = {}
            ids = [c.chunk_id for c in top]
            cos = reads.cosines(q.rx, ids, q.query_vec, engine.embedder_identity, q.collections) if q.query_vec else {}
        feats = features_of(q, top, cos, evidence)
        for f, u in zip(feats, evidence_features(evidence, [c.chunk_id for c in top]), strict=True):
            f.update({name: round(value, 6) for name, value in u.items()})
        top = [
            c.model_copy(update={"features": f, "units": evidence[c.chunk_id].units if c.chunk_id in evidence else ()})
            for c, f in zip(top, feats, strict=True)
        ]
        if not mode.reorder:
            return top + rest
        model = rerank_model(engine.root / cfg.weights)
        scores = {c.chunk_id: model.score(c.features or {}) for c in top}
        # a lookup's reference hits lead, in their own order, as in fusion; the rest by the model
        leads = [c for c in top if q.refs.lookup and "exact_reference" in c.sources]
        others = iter(sorted((c for c in top if c not in leads and not is_live(c)), key=lambda c: -scores[c.chunk_id]))
        # live rows have no stored vector or title to be judged on: they keep their fused places
        rest_slots = [c for c in top if c not in leads]
        reordered = protect_exact(leads + [c if is_live(c) else next(others) for c in rest_slots])
        t["changed"] = [c.chunk_id for c in reordered] != [c.chunk_id for c in top]
        t["model"] = model.version
        return reordered + rest
    except (RagError, ValueError, TypeError, KeyError, ArithmeticError) as exc:
        q.events.append({"event": "rerank_degraded", "error_type": type(exc).__name__, "detail": str(exc)[:200]})
        t["degraded"] = type(exc).__name__
        return pool


def sentence_evidence(q: Question, top: list[Candidate], t: dict[str, Any]) -> dict[str, ChunkEvidence]:
    """Each of the first ``retrieval.evidence.top_n`` candidates scored by its units (a live row's
    cosines come from the live leg's evidence, and a live row without them is scored on its words
    alone); the rest get none. One store read (``top_reads``) gives the scored chunks' cosines and
    unit vectors, the titles of every candidate of ``top`` and, when reference expansion is on,
    what they cite (``q.shared["cited"]``, for ``expansion.reference_expansion``). The read is
    sent first and received last: the chunks' units, and the question's stems in each
    (``sentence_evidence.prepare``), are made while the store answers."""
    engine = q.engine
    scored = top[: engine.cfg.retrieval.evidence.top_n]
    stored = [c.chunk_id for c in top if not is_live(c)]
    pending = top_reads.started(
        q.rx,
        stored,
        evidence_ids=[c.chunk_id for c in scored if not is_live(c)],
        embedding=q.query_vec,
        identity=engine.embedder_identity,
        collections=q.collections,
        splitter=SPLITTER_VERSION,
        references=engine.cfg.retrieval.reference_expansion_k > 0,
    )
    try:  # while the store reads: what needs nothing from it (the units, the question's stems in each)
        stems = question_stems(q.text)
        prepared = [prepare(c.chunk_id, c.text, stems) for c in scored]
        vec = normalized(q.query_vec)
    finally:  # received even when that failed: the titles and cited rows serve the fused order too
        read = pending.result()
        q.titles.update(read.titles)
        if read.cited is not None:
            q.shared["cited"] = read.cited
    rows = {**read.evidence, **q.shared.get("live_evidence", {})}
    out = {}
    for c, chunk in zip(scored, prepared, strict=True):
        row = rows.get(c.chunk_id, {})
        context = content_stems(f"{q.titles.get(doc_key(c), '')} {c.heading}")
        out[c.chunk_id] = score_prepared(chunk, context, vec, row.get("units"), row.get("cosine"))
    t["units_scored"] = sum(len(ev.units) for ev in out.values())
    t["unit_vectors"] = sum(1 for r in rows.values() if r.get("units"))
    return out


def features_of(
    q: Question, top: list[Candidate], cosines: dict[str, float], evidence: dict[str, ChunkEvidence]
) -> list[dict[str, float]]:
    """The rerank features (``rerank.FEATURES``) of each candidate of ``top``, in order (a text's
    stems from its sentence ``evidence`` where that holds them)."""
    lexical, dense = q.rows.get("lexical", []), q.rows.get("dense", [])
    rrf_k, names_reference = q.engine.cfg.retrieval.rrf_k, bool(q.refs.keys)
    lex_rank = {r["chunk_id"]: i for i, r in enumerate(lexical, 1)}
    lex_score = {r["chunk_id"]: float(r.get("score") or 0.0) for r in lexical}
    best_lex = max((lex_score.get(c.chunk_id, 0.0) for c in top), default=0.0) or 1.0
    dense_rank = {r["chunk_id"]: i for i, r in enumerate(dense, 1)}
    best_cos = max(cosines.values(), default=0.0)
    stems = question_stems(q.text)
    out = []
    for position, c in enumerate(top, 1):
        f = {
            "fused": c.score * (rrf_k + 1),
            "fused_rank": 1.0 / position,
            "lexical_rr": 1.0 / lex_rank[c.chunk_id] if c.chunk_id in lex_rank else 0.0,
            "dense_rr": 1.0 / dense_rank[c.chunk_id] if c.chunk_id in dense_rank else 0.0,
            "lexical_rel": lex_score.get(c.chunk_id, 0.0) / best_lex,
            "cosine_rel": (cosines[c.chunk_id] - best_cos) * 10 if c.chunk_id in cosines else -1.0,
            "exact": 1.0 if c.exact else 0.0,
            "named_doc": 1.0 if doc_key(c) in q.named else 0.0,
            "graph": 1.0 if "graph" in c.sources else 0.0,
        }
        # the same two for a question naming a rule or article: how far to trust fusion there
        f["ref_fused_rank"] = f["fused_rank"] if names_reference else 0.0
        f["ref_exact"] = f["exact"] if names_reference else 0.0
        words = evidence[c.chunk_id].words if c.chunk_id in evidence else None
        f.update(text_features(stems, q.titles.get(doc_key(c), ""), c.heading, c.text, words))
        out.append({name: round(value, 6) for name, value in f.items()})
    return out


def read_titles(q: Question, candidates: list[Candidate]) -> None:
    """Add to ``q.titles`` the document titles of ``candidates`` it does not hold yet (one read)."""
    missing = sorted({doc_key(c) for c in candidates} - set(q.titles))
    if missing:
        q.titles.update(reads.document_titles(q.rx, missing, q.collections))


def is_live(c: Candidate) -> bool:
    return "live" in c.sources


def doc_key(c: Candidate) -> str:
    """``pack:doc_id`` of a candidate (chunk ids start with their pack)."""
    return f"{c.chunk_id.split(':', 1)[0]}:{c.doc_id}"
