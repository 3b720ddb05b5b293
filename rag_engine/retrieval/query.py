"""The whole query path, without the orchestrator: expansion -> retrieval (policy gate, lexical,
dense, references, planner, traversal, fusion) -> rerank -> context -> cited answer.

Local inference steps are optional and degrade to the original query / order on any failure;
every step, event and decision lands in the result so `rag query` can show the plan, the
paths and the citations.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from rag_engine import tracing
from rag_engine.engine import Engine
from rag_engine.errors import RagError
from rag_engine.providers.clients import ModelClient
from rag_engine.retrieval.abstain import abstain_model, decision_features, unheld_words
from rag_engine.retrieval.answer import ExtractiveLimits, Reason, answer_question, extractive_answer, insufficient
from rag_engine.retrieval.candidates import Candidate, RetrievalResult
from rag_engine.retrieval.context import AssembledContext, assemble_context
from rag_engine.retrieval.conversation import Turn, turns
from rag_engine.retrieval.evidence import AliasGroups, evidence_coverage
from rag_engine.retrieval.local_inference import expand_query
from rag_engine.retrieval.local_inference import rerank as model_rerank
from rag_engine.retrieval.outcome import QueryAudit, QueryOutcome
from rag_engine.retrieval.retriever import retrieve, stamped
from rag_engine.store.session import read_transaction
from rag_engine.store.vocabulary import absent_words
from rag_engine.usage import acting_as

SYSTEM_PROMPT = (
    "You answer questions about a regulated corpus using only the numbered context blocks. "
    "Cite the chunk_id of every block you use. If the context does not answer the question, "
    "say that the evidence is insufficient."
)


def _client(engine: Engine, name: str | None) -> ModelClient | None:
    if not name:
        return None
    try:
        return engine.client(name)
    except RagError:
        return None


def alias_groups(engine: Engine, collections: tuple[str, ...]) -> AliasGroups:
    """The alias groups of the packs the question may read."""
    return AliasGroups.build(
        p.manifest.aliases for p in engine.packs.values() if set(p.manifest.collections) & set(collections)
    )


def store_absent(
    engine: Engine,
    question: str,
    candidates: list[Candidate],
    collections: tuple[str, ...],
    timing: dict[str, float] | None = None,
) -> set[str]:
    """The question's words no top candidate holds that the permitted store does not hold either
    (one read in a session of its own, a ``rag.store_absent`` span; none when every word is held
    by a top candidate). ``timing`` gets the read's wall time (``store_read_ms``: session,
    transaction and statement) when there was one."""
    words = unheld_words(question, candidates)
    if not words or not candidates:
        return set()
    started = time.perf_counter()
    with (
        tracing.span("rag.store_absent", words=len(words)),
        read_transaction(engine.driver, engine.database, packs=engine.packs) as rx,
    ):
        absent = absent_words(rx, words, collections)
    if timing is not None:
        timing["store_read_ms"] = round((time.perf_counter() - started) * 1000, 2)
    return absent


def _refusal(
    engine: Engine,
    question: str,
    candidates: list[Candidate],
    context: AssembledContext,
    coverage: float,
    aliases: AliasGroups,
    collections: tuple[str, ...],
    events: list[dict[str, Any]],
) -> Reason | None:
    """Why the evidence does not answer the question (``abstain``: the fitted model, then the
    optional word floor ``retrieval.min_evidence_coverage``), or None: answer."""
    if not context.documents:
        return None  # answered as "empty_context" without a model call
    cfg = engine.cfg.retrieval
    if cfg.evidence.abstain:
        try:
            model = abstain_model(engine.root / cfg.evidence.abstain)
        except RagError as exc:
            events.append({"event": "abstain_degraded", "error_type": type(exc).__name__, "detail": str(exc)[:200]})
        else:
            timing: dict[str, float] = {}  # the store read's time, when the check made one
            absent = store_absent(engine, question, candidates, collections, timing)
            x = decision_features(question, candidates, coverage, aliases, absent)
            p = model.probability(x)
            threshold = (
                cfg.evidence.abstain_threshold if cfg.evidence.abstain_threshold is not None else model.threshold
            )
            decision = {
                "event": "evidence_decision",
                "p_answer": round(p, 4),
                "threshold": threshold,
                **timing,
            }
            events.append({**decision, "features": {k: round(v, 4) for k, v in x.items()}, "model": model.version})
            if p < threshold:
                return "low_evidence"
    if coverage < cfg.min_evidence_coverage:
        events.append(
            {"event": "insufficient_evidence", "coverage": round(coverage, 3), "floor": cfg.min_evidence_coverage}
        )
        return "low_evidence_coverage"
    return None


def run_query(
    engine: Engine,
    question: str,
    role: str,
    *,
    k: int | None = None,
    generate: bool = True,
    local_inference: bool = True,
    conversation: Sequence[Turn | dict[str, Any]] | None = None,
    run_id: str | None = None,
    weights: dict[str, float] | None = None,
    session_id: str | None = None,
    collections: list[str] | None = None,
    rerank: bool | None = None,
    actor: str | None = None,
    on_retrieved: Callable[[RetrievalResult], None] | None = None,
) -> QueryOutcome:
    """``weights`` overrides the configured per-leg fusion weights for this call (ablations).
    ``session_id`` and ``collections`` (requested; those the role may not read are blocked) go
    to the audit trail, which gets one record per query (``outcome.QueryAudit``); a session id longer
    than ``audit.SESSION_ID_MAX`` or with other characters is a QueryInputError before anything runs.
    ``rerank``: whether the feature reranker runs (default ``retrieval.rerank.method``).
    ``actor``: the authenticated principal asking (the query service, `rag query` with a key),
    recorded in every audit record of the query and every usage record of its model calls.
    ``on_retrieved``: called with the ranked candidates as soon as they are known, before the
    answer is generated (the query service streams them first).
    ``conversation``: the earlier turns of a chat (``retrieval.conversation``: checked before
    anything runs, a QueryInputError if malformed or too long), budgeted by ``context.conversation``
    for the answer model."""
    history = turns(conversation, engine.cfg.context)
    # the actor of every model call below (expansion, embedding, rerank, generation); the root span
    # of the query's trace (tracing.enabled), whose id the audit record carries
    with acting_as(actor), tracing.span("rag.query", generate=generate, local_inference=local_inference):
        return _run_query(
            engine,
            question,
            role,
            QueryAudit(engine, session_id, run_id, generate, actor),  # begun before retrieval
            k=k,
            generate=generate,
            local_inference=local_inference,
            conversation=history,
            weights=weights,
            session_id=session_id,
            collections=collections,
            rerank=rerank,
            on_retrieved=on_retrieved,
        )


def _run_query(
    engine: Engine,
    question: str,
    role: str,
    audit: QueryAudit,
    *,
    k: int | None,
    generate: bool,
    local_inference: bool,
    conversation: list[Turn],
    weights: dict[str, float] | None,
    session_id: str | None,
    collections: list[str] | None,
    rerank: bool | None,
    on_retrieved: Callable[[RetrievalResult], None] | None,
) -> QueryOutcome:
    run_id = audit.run_id
    started = time.perf_counter()
    events: list[dict[str, Any]] = []
    local = _client(engine, engine.cfg.defaults.local_inference_model) if local_inference else None
    limits = engine.cfg.local_inference  # every local inference call is capped out of the question's budget
    with tracing.span("rag.query_expansion", applied=local_inference):
        expanded = (
            expand_query(local, question, events=events, run_id=run_id, limits=limits, started=started)
            if local_inference
            else question
        )
    with tracing.span("rag.retrieve"):  # its steps (policy gate, legs, fusion, rerank) are its children
        result = retrieve(engine, expanded, role, k=k, weights=weights, collections=collections, rerank=rerank)
    if session_id is not None:
        result = stamped(result, session_id=session_id)
    with tracing.span("rag.model_rerank", applied=local_inference):
        candidates = (
            model_rerank(
                local,
                question,
                result.candidates,
                events=events,
                run_id=run_id,
                limits=limits,
                started=started,
                scorer=_client(engine, engine.cfg.defaults.local_rerank_model),
            )
            if local_inference
            else result.candidates
        )
    if on_retrieved is not None:
        on_retrieved(result.model_copy(update={"candidates": candidates}))
    with tracing.span("rag.context"):
        context = assemble_context(
            [*candidates, *result.expansions],
            budgets=engine.cfg.context,
            system_prompt=SYSTEM_PROMPT,
            conversation=[t.model_dump() for t in conversation],
        )
    aliases = alias_groups(engine, result.collections)
    coverage = evidence_coverage(question, context.documents, aliases)
    evidence_cfg = engine.cfg.retrieval.evidence
    extractive: ExtractiveLimits = {
        "max_units": evidence_cfg.answer_max_units,
        "max_chars": evidence_cfg.answer_max_chars,
    }
    with tracing.span("rag.answer", generate=generate) as span:  # answer-or-refuse, then the cited answer
        refusal = _refusal(engine, question, candidates, context, coverage, aliases, result.collections, events)
        if refusal is not None:
            answer = insufficient(refusal)
        elif generate:
            answer = answer_question(
                _client(engine, engine.cfg.defaults.generation_model),
                question,
                context,
                run_id=run_id,
                max_tokens=engine.cfg.context.answer,
                extractive=extractive,
            )
        else:
            answer = extractive_answer(context, question, **extractive, fallback="no_generation_model")
        if span is not None:
            span.set_attribute("rag.answer_method", answer.method)
    outcome = QueryOutcome(
        question=question,
        expanded_query=expanded,
        retrieval=result,
        context=context,
        answer=answer,
        events=tuple(result.events + events),
        latency_ms=round((time.perf_counter() - started) * 1000, 2),
    )
    with tracing.span("rag.audit"):
        audit.record(outcome)  # audit trail: end (raises AuditError per audit.on_write_error)
    return outcome
