"""Retrieval: policy gate -> the configured legs (``retrieval.legs``: exact references, fulltext,
vector, live SQL sources, and the graph leg: planner and bounded traversal; each a ``leg.Leg``)
-> the fusion stage (weighted RRF with bounded reference and scope boosts) -> the rerank stage
(sentence evidence, features, the linear model) -> the top k and reference expansion (reported
apart). Every step and its timing lands in the trace.

All of a question's store reads run in one read transaction (``store.session.read_transaction``);
work a leg starts before it (the question's embedding, the live SQL sources) runs beside it in a
thread while the store answers the other legs.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rag_engine.config import RetrievalConfig
from rag_engine.engine import Engine
from rag_engine.errors import QueryInputError
from rag_engine.governance.policy import PolicyDecision, gate

# the built-in legs register themselves by name on import (retrieval.legs picks among them)
from rag_engine.retrieval import dense_leg, graph_leg, live_leg  # noqa: F401
from rag_engine.retrieval.candidates import RetrievalResult
from rag_engine.retrieval.expansion import reference_expansion, top_k, with_graph_tail
from rag_engine.retrieval.fusion_stage import fused_pool, protect_exact
from rag_engine.retrieval.leg import Leg, Question, Trace, build_legs
from rag_engine.retrieval.rerank_stage import RerankMode, doc_key, read_titles, reranked
from rag_engine.retrieval.text_legs import exact_hits, question_references
from rag_engine.store.session import read_transaction

__all__ = [
    "Trace",
    "check_question",
    "exact_hits",
    "protect_exact",
    "question_references",
    "retrieve",
    "stamped",
    "with_graph_tail",
]


def check_question(query: str, k: int | None, cfg: RetrievalConfig) -> int:
    """The question and k, validated before any store query: a clear input error, never a
    driver or Lucene exception."""
    if k is not None and not 1 <= k <= cfg.max_k:
        raise QueryInputError(f"k must be between 1 and {cfg.max_k}, got {k}")
    if len(query) > cfg.max_question_chars:
        raise QueryInputError(
            f"the question has {len(query)} characters; the limit is "
            f"{cfg.max_question_chars} (retrieval.max_question_chars)"
        )
    try:
        query.encode("utf-8")
    except UnicodeEncodeError:
        raise QueryInputError("the question is not valid text (it holds undecodable bytes)") from None
    return k or cfg.final_k


def retrieve(
    engine: Engine,
    query: str,
    role: str,
    *,
    k: int | None = None,
    collections: list[str] | None = None,
    weights: dict[str, float] | None = None,
    rerank: bool | None = None,
    with_features: bool = False,
    units: bool = True,
) -> RetrievalResult:
    """Policy gate, then the legs of ``retrieval.legs`` fused by weighted RRF, the feature
    reranker over the fused top ``retrieval.rerank.top_n`` (``rerank_stage``), then reference
    expansion (reported apart, after the top k).

    ``weights`` overrides the configured per-leg weights for this call (ablations, evals);
    ``rerank`` whether the feature reranker runs (default: ``retrieval.rerank.method``);
    ``with_features`` sets each top-N candidate's rerank features even without reranking
    (fitting, ``python -m evals.fit_rerank``); ``units=False`` leaves sentence evidence out (every
    candidate gets the same unit features: the ablation "engine without sentence evidence").
    """
    cfg = engine.cfg.retrieval
    k = check_question(query, k, cfg)
    trace = Trace()
    with trace.step("policy_gate", role=role) as t:
        decision: PolicyDecision = gate(engine.cfg, role, collections)
        t["collections"] = list(decision.collections)
    events = [e for e in [decision.governance_event()] if e]
    result = RetrievalResult(query=query, role=role, collections=decision.collections, candidates=[], events=events)
    if not decision.collections or not query.strip():
        result.trace = trace.steps
        return result

    legs = build_legs(cfg.legs)
    q = Question(
        engine=engine,
        text=query,
        k=k,
        collections=decision.collections,
        packs=[p for p in engine.packs.values() if set(p.manifest.collections) & set(decision.collections)],
        weights={**engine.leg_weights, **(weights or {})},
        trace=trace,
        events=result.events,
    )
    mode = RerankMode(
        reorder=cfg.rerank.method == "features" if rerank is None else rerank, features=with_features, units=units
    )
    for leg in legs:  # the question's embedding (a model call) and the live SQL leg run beside the store
        leg.start(q)
    try:
        with read_transaction(engine.driver, engine.database, packs=engine.packs) as rx:
            q.rx = trace.store = rx
            _ranked(q, legs, mode, result)
    except BaseException:
        # the store failed: work still queued would only delay the questions after this one
        for leg in legs:
            leg.cancel()
        raise
    result.plan = q.plan
    result.trace = trace.steps
    return stamped(result, retrieved_at=datetime.now(UTC))


def stamped(result: RetrievalResult, **fields: Any) -> RetrievalResult:
    """``result`` with ``fields`` (``retrieved_at``, ``session_id``) set on every candidate and expansion."""
    result.candidates = [c.model_copy(update=fields) for c in result.candidates]
    result.expansions = [c.model_copy(update=fields) for c in result.expansions]
    return result


def _ranked(q: Question, legs: list[Leg], mode: RerankMode, result: RetrievalResult) -> None:
    """The legs, then the stages over their rows, in the question's read transaction: fusion,
    rerank, the top k and reference expansion; the candidates and expansions set on ``result``."""
    cfg = q.engine.cfg.retrieval
    for leg in legs:
        leg.run(q)
    with q.trace.step("fusion", method="weighted_rrf", rrf_k=cfg.rrf_k, weights=q.weights) as fusion_trace:
        pool = fused_pool(q, legs, fusion_trace)
    if mode.runs:
        with q.trace.step("rerank", method="features", top_n=cfg.rerank.top_n, applied=mode.reorder) as t:
            pool = reranked(q, pool, mode, t)
    ordered = top_k(q, pool)
    fusion_trace.update(  # after the rerank, which may change the top k
        graph_in_top_k=sum(1 for c in ordered if "graph" in c.sources),
        graph_only_in_top_k=sum(1 for c in ordered if c.sources == ("graph",)),
    )
    with q.trace.step("reference_expansion", limit=cfg.reference_expansion_k) as t:
        added = reference_expansion(q, ordered, t)
        read_titles(q, [*ordered, *added])  # those the rerank stage's read did not give
        # retrieval's statements in the question's read transaction, all run by now, and the time
        # they took (every step's store_ms); set inside the step, so its span carries them too
        t["store_statements"] = q.rx.queries
        t["store_ms_total"] = round(q.rx.store_ms, 2)
    result.candidates = [c.model_copy(update={"doc_title": q.titles.get(doc_key(c), "")}) for c in ordered]
    result.expansions = [c.model_copy(update={"doc_title": q.titles.get(doc_key(c), "")}) for c in added]
