"""The SQL of the live leg (``live_source``): the one SELECT a source gets and what its rows become.

Each query is one SELECT built with SQLAlchemy Core: table and column names come from the config
(checked against a strict identifier pattern there, quoted by SQLAlchemy), the question's content
words go only in bind parameters, at most ``row_cap`` rows come back. Imported at the first
question that queries a live source: a process whose packs declare none never imports SQLAlchemy
for it.
"""

from __future__ import annotations

import time
from datetime import UTC, date, datetime
from functools import reduce
from typing import Any

from sqlalchemy import ColumnElement, Select, case, cast, column, func, literal, or_, select, table
from sqlalchemy.exc import OperationalError, SQLAlchemyError

from rag_engine.config import LiveSourceConfig
from rag_engine.retrieval.live_rows import LiveLeg, LiveProvenance
from rag_engine.store.live_sql import LiveSources, SourceUnavailable

QUERY_CANCELED = "57014"
"""SQLSTATE of a statement cancelled by ``statement_timeout``."""


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
