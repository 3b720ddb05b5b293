"""The dense (vector) leg: the question's embedding, computed in a thread while the store answers
the other legs, then the vector index on the checked active index. A failed or late embedding is
an outcome, not an exception: the leg is left out with a ``dense_degraded`` event."""

from __future__ import annotations

import contextvars
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from rag_engine.errors import ProviderTimeout, RagError
from rag_engine.retrieval.leg import Leg, Question, register_leg
from rag_engine.store import reads
from rag_engine.store.epochs import active_index

QUESTION_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="query-embed")
"""Threads for a question's work beside the store (its embedding, the live SQL leg)."""


def _timed_embed(engine: Any, query: str) -> tuple[list[float], float]:
    started = time.perf_counter()
    vec = engine.embed_texts([query], purpose="query")[0]
    return vec, round((time.perf_counter() - started) * 1000, 2)


class QueryEmbedding:
    """The question's embedding, computed in ``QUESTION_POOL`` while the store answers the
    other legs, and waited for at most ``retrieval.query_embed_timeout_s`` from its start. A
    failure (a typed provider error: timeout, unusable vector, server error) or the deadline
    passing is an outcome, not an exception: the dense leg is then left out (``dense_degraded``)."""

    def __init__(self, engine: Any, query: str):
        self.budget_s = engine.cfg.retrieval.query_embed_timeout_s
        self._started = time.perf_counter()
        # in a copy of the caller's context, so the call's usage record keeps its actor (usage.acting_as)
        self._future: Future[tuple[list[float], float]] = QUESTION_POOL.submit(
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


@register_leg("dense")
class DenseLeg(Leg):
    """Vector search with the question's embedding (``q.query_vec`` for the stages after it)."""

    def __init__(self) -> None:
        self.embedding: QueryEmbedding | None = None

    def trace_info(self, q: Question) -> dict[str, Any]:
        return {"embedder": q.engine.embedder_identity, "weight": q.weight(self.name)}

    def start(self, q: Question) -> None:
        if q.weight(self.name) > 0:
            self.embedding = q.shared["embedding"] = QueryEmbedding(q.engine, q.text)

    def cancel(self) -> None:
        if self.embedding is not None:
            self.embedding.cancel()

    def search(self, q: Question, t: dict[str, Any]) -> list[dict[str, Any]]:
        engine, rx = q.engine, q.rx
        dense: list[dict[str, Any]] = []
        early = q.shared.get("early_embedding")
        outcome = (early or self.embedding.outcome(wait=True)) if self.embedding is not None else None
        if isinstance(outcome, RagError):  # answered from the other legs, and said so
            t["degraded"] = type(outcome).__name__
            q.events.append(
                {"event": "dense_degraded", "error_type": type(outcome).__name__, "detail": str(outcome)[:200]}
            )
            active_index(rx, engine.embedder_identity)  # a stale index still says so
        elif outcome is not None:
            vec, t["embed_ms"] = outcome
            q.query_vec = vec if any(vec) else None
            prefetched = q.shared.get("dense_rows")
            if q.query_vec is None:  # no indexable word for this embedder: nothing to compare with
                t["skipped"] = "zero_vector"
                active_index(rx, engine.embedder_identity)  # a stale index still says so
            elif prefetched is not None:  # searched with the fulltext leg, on the checked cached index
                dense, t["with_lexical"] = prefetched, True
            else:  # the embedder check runs before the vector query, in the question's session
                dense = reads.vector(rx, vec, q.collections, engine.cfg.retrieval.dense_k, engine.embedder_identity)
        if self.embedding is not None:
            t["index_cached"] = rx.memo.get("index_cached")
        t["hits"] = len(dense)
        return dense
