"""Append-only usage ledger: one row per model call, successful or not.

Why a SQL table and not a log file: several Dagster processes write at once, and costs are
summed later by run, model and provider. SQLAlchemy Core keeps the SQL portable (SQLite file by
default, Postgres by URL). The API has no update or delete on purpose: a record states what a
call cost under the pricing version of its day, and later price changes never rewrite it.

Costs are stored as exact decimal text rather than a NUMERIC column, because SQLite has no
decimal type and would round-trip through binary floats.

The schema is versioned (``LEDGER_MIGRATIONS``, run once per database by
``rag_engine.providers.sql_migrations`` under a lock, so replicas and Dagster run pods may open one
PostgreSQL ledger together). Columns added after a ledger was first created (``ADDED_COLUMNS``:
nullable, so every old row stays valid) are added in place; nothing is ever dropped or rewritten.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC
from decimal import Decimal
from pathlib import Path
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
    RowMapping,
    String,
    Table,
    create_engine,
    event,
    func,
    inspect,
    select,
)
from sqlalchemy.engine import make_url
from sqlalchemy.engine.interfaces import ExceptionContext
from sqlalchemy.pool import StaticPool
from sqlalchemy.types import TypeDecorator

from rag_engine.config import EngineConfig
from rag_engine.errors import LedgerUnavailable
from rag_engine.providers.sql_migrations import Migration, run_migrations
from rag_engine.providers.sqlite_wal import to_wal
from rag_engine.usage import UsageRecord

SQLITE_BUSY_TIMEOUT_MS = 30_000


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

_COLUMNS = [c.name for c in usage_records.columns]

ADDED_COLUMNS = ("actor", "estimated")
"""Columns newer than the first ledgers, added (nullable) to a ledger that lacks them when opened."""


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


def _make_engine(url: str) -> Engine:
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
        # Busy timeout first, so switching to WAL waits for other writers instead of failing.
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        if not in_memory:
            to_wal(cur, SQLITE_BUSY_TIMEOUT_MS / 1000)
            cur.execute("PRAGMA synchronous = NORMAL")
        cur.close()

    return engine


class UsageLedger:
    """Append and read usage records. There is deliberately no update or delete."""

    def __init__(self, url: str):
        self._engine = _make_engine(url)
        self.applied = run_migrations(self._engine, LEDGER_MIGRATIONS)
        """The schema steps this open applied (``component:version``); empty when none was due."""

    def __repr__(self) -> str:
        # The URL may carry a database password: show it masked.
        return f"UsageLedger({self._engine.url.render_as_string(hide_password=True)!r})"

    @property
    def dialect(self) -> str:
        return self._engine.dialect.name

    # -- write -----------------------------------------------------------------------
    def record(self, rec: UsageRecord) -> UsageRecord:
        """Append one record; returns it with its ledger id."""
        values = rec.model_dump(exclude={"id"})
        created = values["created_at"]
        values["created_at"] = (created if created.tzinfo else created.replace(tzinfo=UTC)).astimezone(UTC)
        with self._engine.begin() as conn:
            key = conn.execute(usage_records.insert().values(**values)).inserted_primary_key
        assert key is not None, "a single-row INSERT always reports its primary key"
        new_id = key[0]
        return rec.model_copy(update={"id": new_id})

    # -- read ------------------------------------------------------------------------
    def records(self, run_id: str | None = None) -> list[UsageRecord]:
        query = select(usage_records).order_by(usage_records.c.id)
        if run_id is not None:
            query = query.where(usage_records.c.run_id == run_id)
        with self._engine.connect() as conn:
            return [_to_record(row._mapping) for row in conn.execute(query)]

    def count(self, run_id: str | None = None, status: str | None = None) -> int:
        query = select(func.count()).select_from(usage_records)
        if run_id is not None:
            query = query.where(usage_records.c.run_id == run_id)
        if status is not None:
            query = query.where(usage_records.c.status == status)
        with self._engine.connect() as conn:
            return int(conn.execute(query).scalar_one())

    def stream(self, *columns: str, batch: int = 5000) -> Iterator[tuple[Any, ...]]:
        """The named columns of every record, oldest first, fetched ``batch`` rows at a time."""
        query = select(*(usage_records.c[c] for c in columns)).order_by(usage_records.c.id)
        with self._engine.connect() as conn:
            for row in conn.execution_options(yield_per=batch).execute(query):
                yield tuple(row)

    def summary(self, run_id: str | None = None, by: str = "run_id") -> list[dict[str, Any]]:
        """``summarize`` of the records (of one run)."""
        return summarize(self.records(run_id), by=by)

    def dispose(self) -> None:
        self._engine.dispose()


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


LEDGER_MIGRATIONS = (
    Migration("ledger", 1, "usage_records", lambda conn: usage_records.create(conn, checkfirst=True)),
    Migration("ledger", 2, "usage_records actor, estimated", migrate),
)
"""The ledger's schema, step by step: a new step gets the next version, an applied one never changes."""


def _to_record(row: RowMapping) -> UsageRecord:
    data = dict(row)
    created = data["created_at"]
    if created is not None and created.tzinfo is None:  # SQLite drops the offset; we always write UTC
        data["created_at"] = created.replace(tzinfo=UTC)
    return UsageRecord.model_validate(data)


SUMMARY_COLUMNS = [
    "provider",
    "requested_model",
    "run_id",
    "calls",
    "errors",
    "input_tokens",
    "cached_input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cost",
    "unknown_cost_calls",
    "estimated_calls",
    "reported_models",
    "pricing_versions",
]


def _known_sum(values: Iterable[Decimal | None]) -> Decimal | None:
    known = [v for v in values if v is not None]
    return sum(known, Decimal(0)) if known else None


def _optional_sum(values: Iterable[int | None]) -> int | None:
    """The sum of the values given, None when none is (a count no provider reported stays unknown)."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _distinct(values: Iterable[str | None]) -> str:
    return ",".join(sorted({str(v) for v in values if v is not None}))


SUMMARY_GROUPS = ("run_id", "actor")
"""What the summary's third key may be: the run, or the principal the calls were made for."""


def summarize(records: list[UsageRecord], by: str = "run_id") -> list[dict[str, Any]]:
    """Totals per provider / requested model / run (``by="actor"``: per principal instead), one
    row each in ``SUMMARY_COLUMNS`` order (``by`` in place of ``run_id``), sorted by those keys.

    ``cost`` sums the calls whose cost is known (Decimal, exact) and is None when none is;
    ``unknown_cost_calls`` keeps the unpriced calls visible instead of counting them as free;
    ``estimated_calls`` counts the calls whose token counts (so their cost) were estimated, not reported.
    A missing run id or actor is grouped as ``(none)``.
    """
    if by not in SUMMARY_GROUPS:
        raise ValueError(f"summarize by one of {SUMMARY_GROUPS}, not {by!r}")
    groups: dict[tuple[str, str, str], list[UsageRecord]] = {}
    for r in records:
        key = getattr(r, by)
        groups.setdefault((r.provider, r.requested_model, "(none)" if key is None else key), []).append(r)
    rows = []
    for (provider, model, key), calls in sorted(groups.items()):
        rows.append(
            {
                "provider": provider,
                "requested_model": model,
                by: key,
                "calls": len(calls),
                "errors": sum(1 for c in calls if c.status == "error"),
                "input_tokens": sum(c.input_tokens for c in calls),
                "cached_input_tokens": _optional_sum(c.cached_input_tokens for c in calls),
                "output_tokens": sum(c.output_tokens for c in calls),
                "reasoning_tokens": _optional_sum(c.reasoning_tokens for c in calls),
                "cost": _known_sum(c.cost for c in calls),
                "unknown_cost_calls": sum(1 for c in calls if c.cost is None),
                "estimated_calls": sum(1 for c in calls if c.estimated is True),
                "reported_models": _distinct(c.reported_model for c in calls),
                "pricing_versions": _distinct(c.pricing_version for c in calls),
            }
        )
    return rows


# -- where the ledger lives --------------------------------------------------------------


def ledger_url(cfg: EngineConfig, env: Mapping[str, str], root: str | Path) -> str:
    """The ledger URL: env var named by ``storage.ledger.url_env``, else the configured default.

    Relative SQLite paths are resolved against the project root (not the working directory)
    and their parent directory is created. The URL may hold a password: callers must not log it.
    """
    ledger = cfg.storage.ledger
    raw = env.get(ledger.url_env) or ledger.default_url
    parsed = make_url(raw)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return raw
    path = Path(parsed.database)
    if not path.is_absolute():
        path = Path(root) / path
    path.parent.mkdir(parents=True, exist_ok=True)
    return parsed.set(database=str(path)).render_as_string(hide_password=False)
