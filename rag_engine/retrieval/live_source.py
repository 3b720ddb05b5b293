"""The live leg: SQL tables a pack declares (``packs[].live_sources``) queried at retrieval time.

Only sources whose collection the policy gate permitted are queried; the others are not even
connected to. Each query is one SELECT (``live_query``: SQLAlchemy Core, imported only when a
source is queried; the rows' types are ``live_rows``'). The connection's session is read-only
(``default_transaction_read_only``) with a ``statement_timeout``, set by the driver at connect
time, so every transaction on it is read-only whatever the role may do (grant the role SELECT
only as well).

Each row becomes a fusion row (``live:<source>:<key>``) with its provenance: source, table,
primary key, committed-at, retrieved-at. The lag of a source is now - the newest committed-at of
the rows it returned; beyond ``freshness_window_ms`` the leg emits ``freshness_breach`` and marks
that source's rows stale, and still returns them. A source that cannot be used (URL variable
unset, server unreachable, timeout, failed query) emits ``live_source_unavailable`` with a reason
and an error type (never the message, which may quote the URL); retrieval goes on with the other
legs. Nothing here raises on lag or on an outage.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import Executor, Future
from itertools import zip_longest
from typing import TYPE_CHECKING, Any

from rag_engine.config import LiveSourceConfig
from rag_engine.graph.planner import content_terms
from rag_engine.retrieval.live_rows import LiveLeg

if TYPE_CHECKING:
    from rag_engine.engine import Engine
    from rag_engine.store.live_sql import LiveSources

MAX_TERMS = 32
"""At most this many distinct content words of the question are sent (each one bind parameter)."""


def _round_robin(lists: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [r for rank in zip_longest(*lists) for r in rank if r is not None]


def live_leg(
    sources: LiveSources, declared: list[LiveSourceConfig], question: str, collections: Iterable[str]
) -> LiveLeg:
    """Query every declared source whose collection is permitted (never the others), one after the
    other; their rows are one ranked list (rank 1 of each source, then rank 2, ...), and the trace
    says what each source did."""
    permitted = set(collections)
    queried = [s for s in declared if s.collection in permitted]
    terms = list(dict.fromkeys(content_terms(question)))[:MAX_TERMS]
    trace: dict[str, Any] = {"not_permitted": [s.name for s in declared if s.collection not in permitted]}
    if not queried or not terms:
        trace.update(sources=[], hits=0, **({"skipped": "no_terms"} if queried else {}))
        return LiveLeg(trace=trace)
    from rag_engine.retrieval.live_query import query_source  # SQLAlchemy: only when a source is queried

    parts = [query_source(sources, s, terms) for s in queried]
    rows = _round_robin([p.rows for p in parts])
    trace.update(
        sources=[p.trace for p in parts],
        hits=len(rows),
        stale=[r["chunk_id"] for r in rows if r["provenance"].stale],
    )
    return LiveLeg(rows=rows, events=[e for p in parts for e in p.events], trace=trace)


def start_live_leg(engine: Engine, question: str, collections: Iterable[str], pool: Executor) -> Future[LiveLeg] | None:
    """The live leg of one retrieval, running in ``pool`` while the store answers the other legs;
    None when no pack of the engine declares a live source."""
    declared = [s for p in engine.packs.values() for s in p.entry.live_sources]
    if not declared:
        return None
    return pool.submit(live_leg, engine.live_sources, declared, question, tuple(collections))
