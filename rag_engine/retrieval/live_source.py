"""The live leg: SQL tables a pack declares (``packs[].live_sources``) queried at retrieval time.

Only sources whose collection the policy gate permitted are queried; the others are not even
connected to. Each query is one SELECT built with SQLAlchemy Core: table and column names come
from the config (checked against a strict identifier pattern there, quoted by SQLAlchemy), the
question's content words go only in bind parameters, at most ``row_cap`` rows come back. The
connection's session is read-only (``default_transaction_read_only``) with a
``statement_timeout``, set by the driver at connect time, so every transaction on it is read-only
whatever the role may do (grant the role SELECT only as well).

Each row becomes a fusion row (``live:<source>:<key>``) with its provenance: source, table,
primary key, committed-at, retrieved-at. The lag of a source is now - the newest committed-at of
the rows it returned; beyond ``freshness_window_ms`` the leg emits ``freshness_breach`` and marks
that source's rows stale, and still returns them. A source that cannot be used (URL variable
unset, server unreachable, timeout, failed query) emits ``live_source_unavailable`` with a reason
and an error type (never the message, which may quote the URL); retrieval goes on with the other
legs. Nothing here raises on lag or on an outage.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from concurrent.futures import Executor, Future
from datetime import UTC, date, datetime
from functools import reduce
from itertools import zip_longest
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import ColumnElement, Select, case, cast, column, func, literal, or_, select, table
from sqlalchemy.exc import OperationalError, SQLAlchemyError

from rag_engine.config import LiveSourceConfig
from rag_engine.graph.planner import content_terms
from rag_engine.store.live_sql import LiveSources, SourceUnavailable

if TYPE_CHECKING:
    from rag_engine.engine import Engine

MAX_TERMS = 32
"""At most this many distinct content words of the question are sent (each one bind parameter)."""
QUERY_CANCELED = "57014"
"""SQLSTATE of a statement cancelled by ``statement_timeout``."""


class LiveProvenance(BaseModel):
    """Where a live candidate came from and how fresh its source was when it was read."""

    model_config = ConfigDict(frozen=True)

    source: str
    table: str
    key: str
    committed_at: datetime
    retrieved_at: datetime
    stale: bool = False
    """The source's lag exceeded its freshness window when this row was read."""


class LiveLeg(BaseModel):
    """What the live leg hands to fusion: ranked rows, governance events, its trace entry."""

    rows: list[dict[str, Any]] = Field(default_factory=list)
    events: list[dict[str, Any]] = Field(default_factory=list)
    trace: dict[str, Any] = Field(default_factory=dict)


def statement(source: LiveSourceConfig, terms: list[str]) -> Select[Any]:
    """The one SELECT a source gets: rows holding any of ``terms`` (bind parameters), best first,
    newest first among equals, at most ``row_cap``. Rows without a committed-at are not used."""
    schema, _, name = source.table.rpartition(".")
    names = [source.key_column, source.text_column, source.committed_at_column]
    if source.heading_column:
        names.append(source.heading_column)
    t = table(name, *(column(n) for n in dict.fromkeys(names)), schema=schema or None)
    key, text, committed = t.c[source.key_column], t.c[source.text_column], t.c[source.committed_at_column]
    where: ColumnElement[Any]
    rank: ColumnElement[Any]
    if source.match == "fulltext":
        # PostgreSQL's dialect only for a fulltext source: importing it costs every query process ~20 ms
        from sqlalchemy.dialects.postgresql import REGCONFIG

        regconfig = cast(literal(source.text_search_config), REGCONFIG)
        document = func.to_tsvector(regconfig, func.coalesce(text, ""))
        queries: list[ColumnElement[Any]] = [func.plainto_tsquery(regconfig, literal(w)) for w in terms]
        query = reduce(lambda a, b: a.op("||")(b), queries)
        where = document.op("@@")(query)
        rank = func.ts_rank_cd(document, query)
    else:
        hits = [text.icontains(w, autoescape=True) for w in terms]
        where = or_(*hits)
        counts: list[ColumnElement[Any]] = [case((h, 1), else_=0) for h in hits]
        rank = reduce(lambda a, b: a + b, counts)
    heading = t.c[source.heading_column] if source.heading_column else literal("")
    return (
        select(
            key.label("key"),
            text.label("text"),
            committed.label("committed_at"),
            heading.label("heading"),
            rank.label("rank"),
        )
        .where(where, committed.is_not(None))
        .order_by(rank.desc(), committed.desc(), key)
        .limit(source.row_cap)
    )


def _utc(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=UTC)
    raise SourceUnavailable("committed_at_not_a_timestamp", type(value).__name__)


def query_source(sources: LiveSources, source: LiveSourceConfig, terms: list[str]) -> LiveLeg:
    """One source: its rows, its trace entry and, beyond the window, a ``freshness_breach``."""
    started = time.perf_counter()
    entry: dict[str, Any] = {"source": source.name, "collection": source.collection}
    try:
        with sources.sql_engine(source).connect() as conn:
            fetched = conn.execute(statement(source, terms)).mappings().all()
        retrieved_at = datetime.now(UTC)
        committed = [_utc(r["committed_at"]) for r in fetched]
    except SourceUnavailable as exc:
        return _unavailable(source, entry, exc.reason, exc.error_type, started)
    except OperationalError as exc:
        sqlstate = getattr(exc.orig, "pgcode", None) or getattr(exc.orig, "sqlstate", None)
        reason = "timeout" if sqlstate == QUERY_CANCELED else "unreachable"
        return _unavailable(source, entry, reason, type(exc.orig or exc).__name__, started)
    except SQLAlchemyError as exc:  # a missing table or column, a revoked grant: the source is unusable
        return _unavailable(source, entry, "query_failed", type(getattr(exc, "orig", None) or exc).__name__, started)
    newest = max(committed, default=None)
    lag_ms = round((retrieved_at - newest).total_seconds() * 1000) if newest else None
    stale = lag_ms is not None and lag_ms > source.freshness_window_ms
    rows = [
        {
            "chunk_id": f"live:{source.name}:{r['key']}",
            "anchor": f"{source.table}:{r['key']}",
            "doc_id": source.name,
            "heading": str(r["heading"] or ""),
            "text": str(r["text"] or ""),
            "collection": source.collection,
            "provenance": LiveProvenance(
                source=source.name,
                table=source.table,
                key=str(r["key"]),
                committed_at=at,
                retrieved_at=retrieved_at,
                stale=stale,
            ),
        }
        for r, at in zip(fetched, committed, strict=True)
    ]
    entry.update(
        rows=len(rows),
        newest_committed_at=newest.isoformat() if newest else None,
        lag_ms=lag_ms,
        window_ms=source.freshness_window_ms,
        stale=stale,
        ms=round((time.perf_counter() - started) * 1000, 2),
    )
    events = []
    if stale:
        events.append(
            {
                "event": "freshness_breach",
                "source": source.name,
                "collection": source.collection,
                "lag_ms": lag_ms,
                "window_ms": source.freshness_window_ms,
                "newest_committed_at": entry["newest_committed_at"],
                "stale_candidates": len(rows),
            }
        )
    return LiveLeg(rows=rows, events=events, trace=entry)


def _unavailable(
    source: LiveSourceConfig, entry: dict[str, Any], reason: str, error_type: str | None, started: float
) -> LiveLeg:
    entry.update(unavailable=reason, error_type=error_type, ms=round((time.perf_counter() - started) * 1000, 2))
    event = {
        "event": "live_source_unavailable",
        "source": source.name,
        "collection": source.collection,
        "reason": reason,
        "error_type": error_type,
    }
    return LiveLeg(events=[event], trace=entry)


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
