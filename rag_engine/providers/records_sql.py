"""The SQL records' tables (usage ledger, audit trail), their schema steps and the SQLAlchemy engine
that opens them: SQLAlchemy Core, imported only where a records database is read, migrated or
written outside a plain SQLite file (``sqlite_records`` appends to one without it).

Costs are stored as exact decimal text rather than a NUMERIC column, because SQLite has no
decimal type and would round-trip through binary floats. Each schema is versioned (its
``*_MIGRATIONS``, run once per database by ``sql_migrations`` under a lock, so replicas and
Dagster run pods may open one PostgreSQL database together). Ledger columns added after a ledger
was first created (``ADDED_COLUMNS``: nullable, so every old row stays valid) are added in place;
nothing is ever dropped or rewritten.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

from sqlalchemy import (
    Boolean,
    Column,
    Connection,
    DateTime,
    Engine,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    event,
    inspect,
)
from sqlalchemy.engine import make_url
from sqlalchemy.engine.interfaces import ExceptionContext
from sqlalchemy.pool import StaticPool
from sqlalchemy.types import TypeDecorator

from rag_engine.errors import LedgerUnavailable
from rag_engine.providers.records_steps import AUDIT_STEPS, LEDGER_STEPS, Step
from rag_engine.providers.sql_migrations import Migration
from rag_engine.providers.sqlite_records import SQLITE_BUSY_TIMEOUT_MS
from rag_engine.providers.sqlite_wal import configure


class _DecimalText(TypeDecorator[Decimal]):
    """Exact Decimal on every backend: stored as plain decimal text (never scientific notation)."""

    impl = String(64)
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Any) -> str | None:
        return None if value is None else format(Decimal(value), "f")

    def process_result_value(self, value: Any, dialect: Any) -> Decimal | None:
        return None if value is None else Decimal(value)


_metadata = MetaData()
usage_records = Table(
    "usage_records",
    _metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("run_id", String(200), nullable=True),
    Column("actor", String(200), nullable=True),
    Column("purpose", String(200), nullable=False),
    Column("provider", String(200), nullable=False),
    Column("requested_model", String(200), nullable=False),
    Column("reported_model", String(200), nullable=True),
    Column("input_tokens", Integer, nullable=False),
    Column("cached_input_tokens", Integer, nullable=True),
    Column("output_tokens", Integer, nullable=False),
    Column("reasoning_tokens", Integer, nullable=True),
    Column("estimated", Boolean, nullable=True),
    Column("latency_ms", Integer, nullable=False),
    Column("status", String(16), nullable=False),
    Column("error_type", String(200), nullable=True),
    Column("pricing_version", String(100), nullable=True),
    Column("cost", _DecimalText(), nullable=True),
    Index("ix_usage_records_run_id", "run_id"),
)

ADDED_COLUMNS = ("actor", "estimated")
"""Columns newer than the first ledgers, added (nullable) to a ledger that lacks them when opened."""


_audit_metadata = MetaData()
audit_records = Table(
    "audit_records",
    _audit_metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("event", String(64), nullable=False),
    Column("query_id", String(64), nullable=True),
    Column("session_id", String(200), nullable=True),
    Column("role", String(200), nullable=True),
    Column("actor", String(200), nullable=True),
    Column("payload", Text, nullable=False),
    Index("ix_audit_records_created_at", "created_at"),
    Index("ix_audit_records_session_id", "session_id"),
    Index("ix_audit_records_event", "event"),
)


def _unreachable(context: ExceptionContext) -> None:
    """A connection that cannot be opened (or was lost) is ``LedgerUnavailable``: one typed line
    naming the database (password masked) and the driver's first line, not a multi-line
    ``OperationalError`` every caller would have to recognise."""
    if context.connection is not None and not context.is_disconnect:
        return  # an error of a statement (a constraint, a lock): the caller's to handle
    engine = context.engine
    where = engine.url.render_as_string(hide_password=True) if engine is not None else "the ledger database"
    first = (str(context.original_exception).strip().splitlines() or [""])[0]
    raise LedgerUnavailable(
        f"the ledger database {where} cannot be reached ({type(context.original_exception).__name__}: {first}); "
        "is it running? storage.ledger names it (its url_env, else default_url)"
    ) from None


def make_engine(url: str) -> Engine:
    """A SQLAlchemy engine for a records URL: PostgreSQL's pinged before use, SQLite's connections
    configured as ``sqlite_records``' (``sqlite_wal.configure``); a connection that cannot be
    opened is ``LedgerUnavailable``."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        engine = create_engine(parsed, pool_pre_ping=True)
        event.listen(engine, "handle_error", _unreachable)
        return engine
    in_memory = parsed.database in (None, "", ":memory:")
    engine = create_engine(
        parsed,
        connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
        poolclass=StaticPool if in_memory else None,
    )
    event.listen(engine, "handle_error", _unreachable)

    @event.listens_for(engine, "connect")
    def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        if in_memory:
            cur.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        else:
            configure(cur, SQLITE_BUSY_TIMEOUT_MS)
        cur.close()

    return engine


def migrate(conn: Connection) -> list[str]:
    """Add the ``ADDED_COLUMNS`` an existing ``usage_records`` table lacks, in place and additively
    (nullable, no default, no row rewritten); returns the columns added. Run inside the locked
    migration transaction, so no other process adds them at the same time."""
    present = {c["name"] for c in inspect(conn).get_columns(usage_records.name)}
    added = []
    for name in ADDED_COLUMNS:
        if name in present:
            continue
        column = usage_records.c[name]
        conn.exec_driver_sql(
            f"ALTER TABLE {usage_records.name} ADD COLUMN {name} {column.type.compile(dialect=conn.dialect)}"
        )
        added.append(name)
    return added


def _paired(steps: Sequence[Step], applies: Sequence[Callable[[Connection], object]]) -> tuple[Migration, ...]:
    """Each of ``steps`` (``records_steps``) with what applies it, in order; a step without one, or
    one too many, fails at import."""
    return tuple(Migration(c, v, name, apply) for (c, v, name), apply in zip(steps, applies, strict=True))


LEDGER_MIGRATIONS = _paired(LEDGER_STEPS, (lambda conn: usage_records.create(conn, checkfirst=True), migrate))
"""The ledger's schema, step by step: a new step gets the next version, an applied one never changes."""

AUDIT_MIGRATIONS = _paired(AUDIT_STEPS, (lambda conn: audit_records.create(conn, checkfirst=True),))
"""The trail's schema, step by step."""

TABLES = {t.name: t for t in (usage_records, audit_records)}
"""Each records table by name: where ``records_db`` appends through SQLAlchemy."""
