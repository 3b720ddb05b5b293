"""Retrieval: policy gate -> legs (exact reference hits, fulltext, vector, live SQL sources, and
the graph leg: planner and bounded traversal) -> weighted RRF fusion with bounded reference and
scope boosts -> deterministic reference expansion (reported apart). Every step and its timing lands in the trace.

All of a question's store reads run in one read transaction (``store.session.read_transaction``);
the question's embedding (a model call) runs beside it in a thread while the store answers the
exact-reference and fulltext legs.

Longer than 500 lines because ``retrieve``, its legs and the ordering of the pool share one read
transaction, one trace and one title cache; the candidate types and fusion live apart
(``candidates``, ``fusion``).
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Iterator, Mapping
from collections.abc import Set as AbstractSet
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from rag_engine import tracing
from rag_engine.config import RetrievalConfig
from rag_engine.engine import Engine
from rag_engine.errors import ProviderTimeout, QueryInputError, RagError
from rag_engine.governance.policy import PolicyDecision, gate
from rag_engine.graph.planner import content_terms, plan
from rag_engine.graph.quality_bounds import bounded
from rag_engine.graph.traversal import candidate_chunks, traverse
from rag_engine.packs import DomainPack
from rag_engine.retrieval.candidates import Candidate, RetrievalResult
from rag_engine.retrieval.fusion import Fused, fuse, rank_key
from rag_engine.retrieval.live_dense import place_on_dense
from rag_engine.retrieval.live_source import LiveLeg, start_live_leg
from rag_engine.retrieval.rerank import question_stems, rerank_model, text_features
from rag_engine.retrieval.sentence_evidence import ChunkEvidence, evidence_features, normalized, score_chunk
from rag_engine.store import reads, units
from rag_engine.store.epochs import active_index
from rag_engine.store.session import Reads, read_transaction
from rag_engine.text.sentences import SPLITTER_VERSION
from rag_engine.text.terms import content_stems


class Trace:
    def __init__(self) -> None:
        self.steps: list[dict[str, Any]] = []

    @contextmanager
    def step(self, name: str, **info: Any) -> Iterator[dict[str, Any]]:
        entry: dict[str, Any] = {"step": name, **info}
        started = time.perf_counter()
        try:
            with tracing.span(f"rag.{name}", facts=entry):  # one OpenTelemetry span per step (when on)
                yield entry
        finally:
            entry["ms"] = round((time.perf_counter() - started) * 1000, 2)
            self.steps.append(entry)


def question_references(engine: Engine, text: str, packs: list[DomainPack] | None = None) -> tuple[list[str], str]:
    """(keys ``pack|key`` named in the question, the question without those references), through
    each pack's ``query_references`` (the question side of the pack's key scoping)."""
    keys: list[str] = []
    spans: list[tuple[int, int]] = []
    for pack in packs if packs is not None else engine.packs.values():
        for r in pack.query_references(text):
            keys.append(f"{pack.name}|{r.normalized}")
            spans.append((r.start, r.end))
    residual = text
    for start, end in sorted(set(spans), reverse=True):
        if 0 <= start < end <= len(residual):
            residual = residual[:start] + " " + residual[end:]
    return list(dict.fromkeys(keys)), residual


_EMBEDDER_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="query-embed")


def _timed_embed(engine: Engine, query: str) -> tuple[list[float], float]:
    started = time.perf_counter()
    vec = engine.embed_texts([query], purpose="query")[0]
    return vec, round((time.perf_counter() - started) * 1000, 2)


class QueryEmbedding:
    """The question's embedding, computed in ``_EMBEDDER_POOL`` while the store answers the
    other legs, and waited for at most ``retrieval.query_embed_timeout_s`` from its start. A
    failure (a typed provider error: timeout, unusable vector, server error) or the deadline
    passing is an outcome, not an exception: the dense leg is then left out (``dense_degraded``)."""

    def __init__(self, engine: Engine, query: str):
        self.budget_s = engine.cfg.retrieval.query_embed_timeout_s
        self._started = time.perf_counter()
        # in a copy of the caller's context, so the call's usage record keeps its actor (usage.acting_as)
        self._future: Future[tuple[list[float], float]] = _EMBEDDER_POOL.submit(
            contextvars.copy_context().run, _timed_embed, engine, query
        )

    def cancel(self) -> None:
        """Drop the embedding if it has not started (one already running finishes)."""
        self._future.cancel()

    def outcome(self, *, wait: bool) -> tuple[list[float], float] | RagError | None:
        """(vector, embed ms), the error that stopped it, or None when not done and ``wait`` is False."""
        if not wait and not self._future.done():
            return None
        try:
            return self._future.result(timeout=max(0.0, self._started + self.budget_s - time.perf_counter()))
        except FutureTimeout:
            return ProviderTimeout(
                f"the question's embedding took longer than {self.budget_s}s (retrieval.query_embed_timeout_s)"
            )
        except RagError as exc:
            return exc


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


def _candidate(row: dict[str, Any], score: float, sources: tuple[str, ...], **extra: Any) -> Candidate:
    return Candidate(
        chunk_id=row["chunk_id"],
        anchor=row["anchor"],
        doc_id=row["doc_id"],
        heading=row["heading"] or "",
        text=row["text"],
        collection=row["collection"],
        score=round(score, 6),
        sources=sources,
        provenance=row.get("provenance"),
        **extra,
    )


def _is_zero(vector: list[float]) -> bool:
    return not any(vector)


def exact_hits(
    rows: list[dict[str, Any]], docs_by_key: dict[str, list[str]], lexical: list[dict[str, Any]], limit: int
) -> tuple[list[dict[str, Any]], list[str], set[str]]:
    """(exact rows, ambiguous keys, documents answering an ambiguous key).

    An exact hit answers to a key that resolves to exactly one document; at most ``limit`` of
    them, ordered by the chunk's lexical rank for the question (unranked ones after, in document
    order), never by document id alone.
    """
    ambiguous = sorted(k for k, docs in docs_by_key.items() if len(docs) > 1)
    ambiguous_docs = {d for k in ambiguous for d in docs_by_key[k]}
    unique = [r for r in rows if any(len(docs_by_key.get(k, ())) == 1 for k in r["keys"])]
    lex_rank = {r["chunk_id"]: i for i, r in enumerate(lexical)}
    unique.sort(key=lambda r: (lex_rank.get(r["chunk_id"], len(lex_rank)), r["pack"], r["doc_id"], r["ordinal"]))
    return unique[:limit], ambiguous, ambiguous_docs


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
    """Policy gate, then the legs (exact references, fulltext, vector, live SQL sources, and the
    graph leg: the planner and bounded traversal) fused by weighted RRF, the feature reranker over
    the fused top ``retrieval.rerank.top_n`` (``rerank.py``), then reference expansion (reported
    apart, after the top k).

    ``weights`` overrides the configured per-leg weights for this call (ablations, evals);
    ``rerank`` whether the feature reranker runs (default: ``retrieval.rerank.method``);
    ``with_features`` sets each top-N candidate's rerank features even without reranking
    (fitting, ``python -m evals.fit_rerank``); ``units=False`` leaves sentence evidence out (every
    candidate gets the same unit features: the ablation "engine without sentence evidence").
    """
    cfg = engine.cfg.retrieval
    k = check_question(query, k, cfg)
    legs = {**engine.leg_weights, **(weights or {})}
    trace = Trace()
    with trace.step("policy_gate", role=role) as t:
        decision: PolicyDecision = gate(engine.cfg, role, collections)
        t["collections"] = list(decision.collections)
    events = [e for e in [decision.governance_event()] if e]
    result = RetrievalResult(query=query, role=role, collections=decision.collections, candidates=[], events=events)
    if not decision.collections or not query.strip():
        result.trace = trace.steps
        return result

    # the question's embedding (a model call) runs while the store answers the other legs
    embedding = QueryEmbedding(engine, query) if legs["dense"] > 0 else None
    # so does the live SQL leg, for the permitted collections only
    live = start_live_leg(engine, query, decision.collections, _EMBEDDER_POOL) if legs["live"] > 0 else None
    packs = [p for p in engine.packs.values() if set(p.manifest.collections) & set(decision.collections)]
    try:
        with read_transaction(engine.driver, engine.database, packs=engine.packs) as rx:
            use_rerank = cfg.rerank.method == "features" if rerank is None else rerank
            _legs(
                engine,
                rx,
                query,
                k,
                legs,
                decision,
                packs,
                embedding,
                live,
                trace,
                result,
                (use_rerank, with_features, units),
            )
    except BaseException:
        # the store failed: an embedding still queued would only delay the questions after this one
        if embedding is not None:
            embedding.cancel()
        raise
    result.trace = trace.steps
    return stamped(result, retrieved_at=datetime.now(UTC))


def stamped(result: RetrievalResult, **fields: Any) -> RetrievalResult:
    """``result`` with ``fields`` (``retrieved_at``, ``session_id``) set on every candidate and expansion."""
    result.candidates = [c.model_copy(update=fields) for c in result.candidates]
    result.expansions = [c.model_copy(update=fields) for c in result.expansions]
    return result


def _legs(
    engine: Engine,
    rx: Reads,
    query: str,
    k: int,
    legs: dict[str, float],
    decision: PolicyDecision,
    packs: list[DomainPack],
    embedding: QueryEmbedding | None,
    live: Future[LiveLeg] | None,
    trace: Trace,
    result: RetrievalResult,
    rerank: tuple[bool, bool, bool] = (False, False, True),
) -> None:
    """The legs, fusion, planner, traversal, rerank and expansion of ``retrieve``, in its read
    transaction. ``rerank``: (reorder the top N, set their features, score their units)."""
    cfg = engine.cfg.retrieval
    with trace.step("exact_references", weight=legs["exact"], max_exact=cfg.max_exact) as t:
        keys, residual = (
            question_references(engine, query, packs) if legs["exact"] > 0 or cfg.ambiguous_ref_boost else ([], query)
        )
        key_rows, docs_by_key = reads.by_keys(rx, keys, decision.collections)
        # a question that is little more than its reference ("What does Article 17(1) require?")
        # is a lookup: its exact hits lead; otherwise they are one fused leg among the others
        lookup = bool(keys) and len(content_terms(residual)) <= cfg.lookup_max_terms
        t.update(keys=keys, answered=len(key_rows), lookup=lookup)
    # an embedding already computed rides along in the fulltext leg's statement (one round trip
    # for both legs and the store epochs); one still being computed is not waited for here
    early = embedding.outcome(wait=False) if embedding is not None else None
    ready = early if isinstance(early, tuple) else None
    with trace.step("lexical", weight=legs["lexical"]) as t:
        lexical, dense_rows = reads.legs(
            rx,
            query if legs["lexical"] > 0 or legs["exact"] > 0 else "",
            ready[0] if ready is not None and not _is_zero(ready[0]) else None,
            decision.collections,
            lexical_k=cfg.lexical_k,
            dense_k=cfg.dense_k,
            identity=engine.embedder_identity,
        )
        t["hits"] = len(lexical)
    query_vec: list[float] | None = None
    with trace.step("dense", embedder=engine.embedder_identity, weight=legs["dense"]) as t:
        dense: list[dict[str, Any]] = []
        outcome = (early or embedding.outcome(wait=True)) if embedding is not None else None
        if isinstance(outcome, RagError):  # answered from the other legs, and said so
            t["degraded"] = type(outcome).__name__
            result.events.append(
                {"event": "dense_degraded", "error_type": type(outcome).__name__, "detail": str(outcome)[:200]}
            )
            active_index(rx, engine.embedder_identity)  # a stale index still says so
        elif outcome is not None:
            vec, t["embed_ms"] = outcome
            query_vec = None if _is_zero(vec) else vec
            if _is_zero(vec):  # no indexable word for this embedder: nothing to compare with
                t["skipped"] = "zero_vector"
                active_index(rx, engine.embedder_identity)  # a stale index still says so
            elif dense_rows is not None:  # searched with the fulltext leg, on the checked cached index
                dense, t["with_lexical"] = dense_rows, True
            else:  # the embedder check runs before the vector query, in the question's session
                dense = reads.vector(rx, vec, decision.collections, cfg.dense_k, engine.embedder_identity)
        if embedding is not None:
            t["index_cached"] = rx.memo.get("index_cached")
        t["hits"] = len(dense)
    with trace.step("live", weight=legs["live"]) as t:
        leg = live.result() if live is not None else LiveLeg()
        t.update(leg.trace)
        result.events.extend(leg.events)
        live_evidence: dict[str, dict[str, Any]] = {}
        if leg.rows and query_vec is not None and cfg.live_on_dense:  # rows compete as stored passages do
            placed = place_on_dense(engine, leg.rows, dense, query_vec)
            dense, live_evidence = placed.dense, placed.evidence
            t.update(placed.trace)
            result.events.extend(placed.events)
    graph_rows, graph_paths = _graph_leg(engine, rx, query, packs, decision, legs, trace, result)
    with trace.step("fusion", method="weighted_rrf", rrf_k=cfg.rrf_k, weights=legs) as t:
        exact_rows, ambiguous, ambiguous_docs = (
            exact_hits(key_rows, docs_by_key, lexical, cfg.max_exact) if legs["exact"] > 0 else ([], [], set())
        )
        phrase = " ".join(content_terms(query))
        ref_ids = {r["chunk_id"] for r in exact_rows}
        phrase_rows = []
        if cfg.exact_phrase and legs["exact"] > 0 and len(phrase.split()) >= 2:  # holds the whole question
            phrase_rows = [
                r
                for r in lexical
                if r["chunk_id"] not in ref_ids and phrase in " ".join(content_terms(f"{r['heading']} {r['text']}"))
            ][: cfg.max_exact]
        exact_ids = ref_ids | {r["chunk_id"] for r in phrase_rows}
        fused = fuse(
            {
                "exact": exact_rows + phrase_rows,
                "lexical": lexical if legs["lexical"] > 0 else [],
                "dense": dense,
                "live": leg.rows,
                "graph": graph_rows,
            },
            cfg.rrf_k,
            legs,
        )
        named = {f"{p.name}:{d}" for p in packs for d in p.documents_named(query)}
        boosted = _reference_boost(
            rx, fused, keys, ambiguous_docs, cfg.ambiguous_ref_boost, named, cfg.scope_boost, cfg.rrf_k
        )
        if lookup:  # exact reference hits first, in their own order, then the rest as fused
            lead = {r["chunk_id"]: i for i, r in enumerate(exact_rows)}
            boosted.sort(key=lambda p: lead.get(p[0].row["chunk_id"], len(lead)))
        pool = protect_exact(
            [
                _candidate(
                    f.row,
                    score,
                    _sources(f, exact_ids, phrase_rows),
                    exact=f.row["chunk_id"] in exact_ids,
                    **graph_paths.get(f.row["chunk_id"], {}),
                )
                for f, score in boosted
            ]
        )
        t.update(
            fused=len(fused),
            exact=len(exact_ids),
            ambiguous_keys=ambiguous,
            named_documents=sorted(named),
            boosted=sum(1 for f, score in boosted if score > f.score),
        )
        fusion_trace = t
    titles: dict[str, str] = {}  # pack:doc_id -> title, read once per question (rerank, then the result)
    if any(rerank[:2]):
        with trace.step("rerank", method="features", top_n=cfg.rerank.top_n, applied=rerank[0]) as t:
            pool = _reranked(
                engine,
                rx,
                query,
                pool,
                lexical,
                dense,
                query_vec,
                named,
                lookup,
                bool(keys),
                decision.collections,
                rerank,
                t,
                result,
                titles,
                live_evidence,
            )
    ordered = with_graph_tail(pool, k, cfg.graph_tail)
    ordered = bounded(  # exact hits first and a cap on graph-only ones, whatever the weights (graph/quality_bounds)
        ordered + [c for c in pool if c not in ordered], k, engine.cfg.traversal.max_graph_only_in_top_k,
        exact=lambda c: c.exact, graph=lambda c: "graph" in c.sources, graph_only=lambda c: c.sources == ("graph",),
    )[:k]  # fmt: skip
    fusion_trace.update(  # after the rerank, which may change the top k
        graph_in_top_k=sum(1 for c in ordered if "graph" in c.sources),
        graph_only_in_top_k=sum(1 for c in ordered if c.sources == ("graph",)),
    )
    with trace.step("reference_expansion", limit=cfg.reference_expansion_k) as t:
        have = {c.chunk_id for c in ordered}
        seeds = [c.chunk_id for c in ordered if not c.exact][: max(3, cfg.reference_expansion_k)]
        expanded = reads.referenced(rx, seeds, decision.collections, cfg.reference_expansion_k)
        by_id = {c.chunk_id: c for c in ordered}
        added = []
        for row in expanded:
            if row["chunk_id"] in have:
                continue
            seed_score = by_id[row["from_chunk"]].score if row["from_chunk"] in by_id else 0.0
            added.append(_candidate(row, seed_score * 0.5, ("reference",), via=f"{row['via']} <- {row['from_chunk']}"))
        t["added"] = len(added)
    _read_titles(rx, titles, [*ordered, *added], decision.collections)
    result.candidates = [c.model_copy(update={"doc_title": titles.get(_doc_key(c), "")}) for c in ordered]
    result.expansions = [c.model_copy(update={"doc_title": titles.get(_doc_key(c), "")}) for c in added]


def _reranked(
    engine: Engine,
    rx: Reads,
    query: str,
    pool: list[Candidate],
    lexical: list[dict[str, Any]],
    dense: list[dict[str, Any]],
    query_vec: list[float] | None,
    named: AbstractSet[str],
    lookup: bool,
    names_reference: bool,
    collections: tuple[str, ...],
    rerank: tuple[bool, bool, bool],
    t: dict[str, Any],
    result: RetrievalResult,
    titles: dict[str, str],
    live_evidence: Mapping[str, dict[str, Any]],
) -> list[Candidate]:
    """``pool`` with its top N carrying their features and, when ``rerank[0]``, reordered by the
    committed linear model; on any failure the fused order, with a ``rerank_degraded`` event.
    ``titles`` is the question's title cache (``_read_titles``); ``live_evidence`` the live rows'
    vectors (``live_dense``)."""
    cfg = engine.cfg.retrieval.rerank
    top, rest = pool[: cfg.top_n], pool[cfg.top_n :]
    try:
        _read_titles(rx, titles, top, collections)
        if rerank[2]:
            with tracing.span("rag.sentence_evidence", candidates=len(top)):
                evidence = sentence_evidence(engine, rx, query, top, query_vec, collections, titles, t, live_evidence)
            cos = {cid: ev.cosine for cid, ev in evidence.items() if ev.cosine is not None}
        else:
            evidence = {}
            ids = [c.chunk_id for c in top]
            cos = reads.cosines(rx, ids, query_vec, engine.embedder_identity, collections) if query_vec else {}
        feats = features_of(query, top, lexical, dense, cos, titles, named, names_reference, engine.cfg.retrieval.rrf_k)
        for f, u in zip(feats, evidence_features(evidence, [c.chunk_id for c in top]), strict=True):
            f.update({name: round(value, 6) for name, value in u.items()})
        top = [
            c.model_copy(update={"features": f, "units": evidence[c.chunk_id].units if c.chunk_id in evidence else ()})
            for c, f in zip(top, feats, strict=True)
        ]
        if not rerank[0]:
            return top + rest
        model = rerank_model(engine.root / cfg.weights)
        scores = {c.chunk_id: model.score(c.features or {}) for c in top}
        # a lookup's reference hits lead, in their own order, as in fusion; the rest by the model
        leads = [c for c in top if lookup and "exact_reference" in c.sources]
        others = iter(sorted((c for c in top if c not in leads and not _live(c)), key=lambda c: -scores[c.chunk_id]))
        # live rows have no stored vector or title to be judged on: they keep their fused places
        rest_slots = [c for c in top if c not in leads]
        reordered = protect_exact(leads + [c if _live(c) else next(others) for c in rest_slots])
        t["changed"] = [c.chunk_id for c in reordered] != [c.chunk_id for c in top]
        t["model"] = model.version
        return reordered + rest
    except (RagError, ValueError, TypeError, KeyError, ArithmeticError) as exc:
        result.events.append({"event": "rerank_degraded", "error_type": type(exc).__name__, "detail": str(exc)[:200]})
        t["degraded"] = type(exc).__name__
        return pool


def sentence_evidence(
    engine: Engine,
    rx: Reads,
    query: str,
    top: list[Candidate],
    query_vec: list[float] | None,
    collections: tuple[str, ...],
    titles: dict[str, str],
    t: dict[str, Any],
    live_evidence: Mapping[str, dict[str, Any]] | None = None,
) -> dict[str, ChunkEvidence]:
    """Each of the first ``retrieval.evidence.top_n`` candidates scored by its units (one store
    read for their cosines and unit vectors; a live row's come from ``live_evidence``, and a live
    row without them is scored on its words alone); the rest get none."""
    n = engine.cfg.retrieval.evidence.top_n
    scored = top[:n]
    stored = [c.chunk_id for c in scored if not _live(c)]
    rows = {
        **units.chunk_evidence(rx, stored, query_vec, engine.embedder_identity, collections, SPLITTER_VERSION),
        **(live_evidence or {}),
    }
    vec = normalized(query_vec)
    stems = question_stems(query)
    out = {}
    for c in scored:
        row = rows.get(c.chunk_id, {})
        context = content_stems(f"{titles.get(_doc_key(c), '')} {c.heading}")
        out[c.chunk_id] = score_chunk(c.chunk_id, c.text, context, stems, vec, row.get("units"), row.get("cosine"))
    t["units_scored"] = sum(len(ev.units) for ev in out.values())
    t["unit_vectors"] = sum(1 for r in rows.values() if r.get("units"))
    return out


def features_of(
    query: str,
    top: list[Candidate],
    lexical: list[dict[str, Any]],
    dense: list[dict[str, Any]],
    cosines: dict[str, float],
    titles: dict[str, str],
    named: AbstractSet[str],
    names_reference: bool,
    rrf_k: int,
) -> list[dict[str, float]]:
    """The rerank features (``rerank.FEATURES``) of each candidate of ``top``, in order."""
    lex_rank = {r["chunk_id"]: i for i, r in enumerate(lexical, 1)}
    lex_score = {r["chunk_id"]: float(r.get("score") or 0.0) for r in lexical}
    best_lex = max((lex_score.get(c.chunk_id, 0.0) for c in top), default=0.0) or 1.0
    dense_rank = {r["chunk_id"]: i for i, r in enumerate(dense, 1)}
    best_cos = max(cosines.values(), default=0.0)
    stems = question_stems(query)
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
            "named_doc": 1.0 if _doc_key(c) in named else 0.0,
            "graph": 1.0 if "graph" in c.sources else 0.0,
        }
        # the same two for a question naming a rule or article: how far to trust fusion there
        f["ref_fused_rank"] = f["fused_rank"] if names_reference else 0.0
        f["ref_exact"] = f["exact"] if names_reference else 0.0
        f.update(text_features(stems, titles.get(_doc_key(c), ""), c.heading, c.text))
        out.append({name: round(value, 6) for name, value in f.items()})
    return out


def _read_titles(rx: Reads, titles: dict[str, str], candidates: list[Candidate], collections: tuple[str, ...]) -> None:
    """Add to ``titles`` the document titles of ``candidates`` it does not hold yet (one read)."""
    missing = sorted({_doc_key(c) for c in candidates} - set(titles))
    if missing:
        titles.update(reads.document_titles(rx, missing, collections))


def _live(c: Candidate) -> bool:
    return "live" in c.sources


def _doc_key(c: Candidate) -> str:
    return f"{c.chunk_id.split(':', 1)[0]}:{c.doc_id}"


def with_graph_tail(pool: list[Candidate], k: int, tail: int) -> list[Candidate]:
    """The top k of ``pool``, with up to ``tail`` chunks the graph reached that fusion ranked below
    k (best fused first) placed at the end of it: the graph may add what text retrieval cannot
    rank, in the last places, never above the fused top k - tail nor over an exact hit. Chunks
    only the graph found that are in the top k already count against the tail."""
    top = pool[:k]
    reached = [c for c in pool[k:] if "graph" in c.sources]
    room = tail - sum(1 for c in top if c.sources == ("graph",))
    if room <= 0 or not reached:
        return top
    droppable = [i for i in range(len(top) - 1, -1, -1) if not top[i].exact and top[i].sources != ("graph",)]
    dropped = set(droppable[: min(room, len(reached))])  # reached is non-empty: len(top) == k
    return [c for i, c in enumerate(top) if i not in dropped] + reached[: len(dropped)]


def protect_exact(candidates: list[Candidate]) -> list[Candidate]:
    """The candidates with every graph-only one (found by traversal alone) moved below the last
    exact hit: graph evidence may outrank text evidence by fusion, never a passage the question
    named by its reference or phrase."""
    last = max((i for i, c in enumerate(candidates) if c.exact), default=-1)
    head = candidates[: last + 1]
    graph_only = [c for c in head if c.sources == ("graph",)]
    if not graph_only:
        return candidates
    return [c for c in head if c.sources != ("graph",)] + graph_only + candidates[last + 1 :]


def _graph_leg(
    engine: Engine,
    rx: Reads,
    query: str,
    packs: list[DomainPack],
    decision: PolicyDecision,
    legs: dict[str, float],
    trace: Trace,
    result: RetrievalResult,
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """The planner, then (when it says traverse) bounded traversal: the graph leg's rows in path
    score order, at most ``traversal.max_candidates``, and each one's path score and hops. The
    rows enter fusion by rank like every other leg (weight ``retrieval.weights.graph``), so a
    graph-only chunk outranks a lexical and dense hit only when the weights say so."""
    with trace.step("planner") as t:
        decision_plan = plan(rx, query, packs, engine.cfg.planner, engine.cfg.traversal, decision.collections)
        t.update(reason=decision_plan.reason, seeds=[s.name for s in decision_plan.seeds], detail=decision_plan.detail)
        if "edges_cached" in rx.memo:
            t["eligible_edges_cached"] = rx.memo["edges_cached"]
        result.plan = decision_plan.model_dump(mode="json")
    if not decision_plan.traverse or legs["graph"] <= 0:
        return [], {}
    with trace.step("traversal", max_depth=engine.cfg.traversal.max_depth, weight=legs["graph"]) as t:
        paths = traverse(
            rx, [(s.entity_id, s.name) for s in decision_plan.seeds], engine.cfg.traversal, decision.collections
        )
        picked = candidate_chunks(paths, engine.cfg.traversal.max_candidates)
        rows = {r["chunk_id"]: r for r in reads.chunks_by_id(rx, [c for c, _ in picked], decision.collections)}
        graph_rows = [rows[c] for c, _ in picked if c in rows]
        graph_paths = {
            chunk_id: {
                "path_score": gp.path_score,
                "path": tuple({"seed": gp.seed_name, **h.model_dump()} for h in gp.hops),
            }
            for chunk_id, gp in picked
            if chunk_id in rows
        }
        t.update(
            paths=len(paths),
            candidates=len(graph_rows),
            path_scores=[round(gp.path_score, 4) for c, gp in picked if c in rows],
            dropped_not_permitted=len(picked) - len(graph_rows),
        )
    return graph_rows, graph_paths


def _sources(f: Fused, exact_ids: set[str], phrase_rows: list[dict[str, Any]]) -> tuple[str, ...]:
    cid = f.row["chunk_id"]
    if cid not in exact_ids:
        return f.sources
    kind = "exact_phrase" if any(r["chunk_id"] == cid for r in phrase_rows) else "exact_reference"
    return (kind, *[s for s in f.sources if s != "exact"])


def _doc_of(row: dict[str, Any]) -> str:
    """``pack:doc_id`` of a store row (chunk ids start with their pack)."""
    return f"{row.get('pack') or row['chunk_id'].split(':', 1)[0]}:{row['doc_id']}"


def _reference_boost(
    rx: Reads,
    fused: list[Fused],
    keys: list[str],
    ambiguous_docs: set[str],
    weight: float,
    named_docs: AbstractSet[str] = frozenset(),
    scope_weight: float = 0.0,
    rrf_k: int = 60,
) -> list[tuple[Fused, float]]:
    """What the question names, as two more ranked lists fused by rank like any leg, then the
    candidates reordered by the new score (ties as in ``fuse``):

    - ``references`` (weight ``weight``): the candidates that cite the references the question
      names, or (at half strength) sit in a document answering a reference it names
      ambiguously ("Rule 3.8" without its rulebook), in their fused order;
    - ``scope`` (weight ``scope_weight``): the candidates of a document the question names as a
      whole ("under the AML Rulebook"), in their fused order.

    The n-th candidate of such a list gets ``weight * strength / (rrf_k + n)``: the best of them
    as much as a rank-1 hit of another leg, the later ones less, so a named document's weak
    passages do not all jump above strong ones elsewhere. They reorder; they never add a chunk."""
    if not fused or ((weight <= 0 or not keys) and (scope_weight <= 0 or not named_docs)):
        return [(f, f.score) for f in fused]
    cites = reads.citing(rx, [f.row["chunk_id"] for f in fused], keys) if weight > 0 and keys else {}
    bonus: dict[str, float] = {}
    ref_rank = scope_rank = 0
    for f in fused:
        cid, doc = f.row["chunk_id"], _doc_of(f.row)
        share = cites.get(cid, 0) / len(keys) if keys else 0.0
        strength = min(1.0, max(share, 0.5 if doc in ambiguous_docs else 0.0))
        if weight > 0 and strength > 0:
            ref_rank += 1
            bonus[cid] = bonus.get(cid, 0.0) + weight * strength / (rrf_k + ref_rank)
        if scope_weight > 0 and doc in named_docs:
            scope_rank += 1
            bonus[cid] = bonus.get(cid, 0.0) + scope_weight / (rrf_k + scope_rank)
    out = [(f, f.score + bonus.get(f.row["chunk_id"], 0.0)) for f in fused]
    out.sort(key=lambda p: rank_key(*p))
    return out
