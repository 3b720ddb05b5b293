"""Append-only usage ledger: one row per model call, successful or not.

Why a SQL table and not a log file: several Dagster processes write at once, and costs are
summed later by run, model and provider. SQLAlchemy Core keeps the SQL portable (SQLite file by
default, Postgres by URL); the table, its exact-decimal cost column and its versioned schema are
``records_sql``'s. An append to a SQLite file goes through ``sqlite_records`` without SQLAlchemy
(see ``UsageLedger``). The API has no update or delete on purpose: a record states what a call
cost under the pricing version of its day, and later price changes never rewrite it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rag_engine.config import EngineConfig
from rag_engine.providers.records_db import RecordsDatabase
from rag_engine.providers.records_steps import LEDGER_STEPS
from rag_engine.providers.sqlite_records import sqlite_file, sqlite_url
from rag_engine.usage import UsageRecord

if TYPE_CHECKING:
    from sqlalchemy import RowMapping

    from rag_engine.providers.sql_migrations import Migration


class UsageLedger(RecordsDatabase):
    """Append and read usage records. There is deliberately no update or delete. On a SQLite file
    an append imports no SQLAlchemy (``records_db``)."""

    _STEPS = LEDGER_STEPS

    def _migrations(self) -> Sequence[Migration]:
        from rag_engine.providers.records_sql import LEDGER_MIGRATIONS

        return LEDGER_MIGRATIONS

    # -- write -----------------------------------------------------------------------
    def record(self, rec: UsageRecord) -> UsageRecord:
        """Append one record; returns it with its ledger id."""
        values = rec.model_dump(exclude={"id"})
        created = values["created_at"]
        values["created_at"] = (created if created.tzinfo else created.replace(tzinfo=UTC)).astimezone(UTC)
        return rec.model_copy(update={"id": self._insert("usage_records", [values])[0]})

    # -- read ------------------------------------------------------------------------
    def records(self, run_id: str | None = None) -> list[UsageRecord]:
        from sqlalchemy import select

        from rag_engine.providers.records_sql import usage_records

        query = select(usage_records).order_by(usage_records.c.id)
        if run_id is not None:
            query = query.where(usage_records.c.run_id == run_id)
        with self._engine.connect() as conn:
            return [_to_record(row._mapping) for row in conn.execute(query)]

    def count(self, run_id: str | None = None, status: str | None = None) -> int:
        from sqlalchemy import func, select

        from rag_engine.providers.records_sql import usage_records

        query = select(func.count()).select_from(usage_records)
        if run_id is not None:
            query = query.where(usage_records.c.run_id == run_id)
        if status is not None:
            query = query.where(usage_records.c.status == status)
        with self._engine.connect() as conn:
            return int(conn.execute(query).scalar_one())

    def stream(self, *columns: str, batch: int = 5000) -> Iterator[tuple[Any, ...]]:
        """The named columns of every record, oldest first, fetched ``batch`` rows at a time."""
        from sqlalchemy import select

        from rag_engine.providers.records_sql import usage_records

        query = select(*(usage_records.c[c] for c in columns)).order_by(usage_records.c.id)
        with self._engine.connect() as conn:
            for row in conn.execution_options(yield_per=batch).execute(query):
                yield tuple(row)

    def summary(self, run_id: str | None = None, by: str = "run_id") -> list[dict[str, Any]]:
        """``summarize`` of the records (of one run)."""
        return summarize(self.records(run_id), by=by)


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
    plain = sqlite_file(raw)
    if plain is not None:  # the usual case, read without SQLAlchemy (see UsageLedger)
        return sqlite_url(str(_under(Path(plain), root)))
    if not raw.startswith("sqlite"):
        return raw
    from sqlalchemy.engine import make_url

    parsed = make_url(raw)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return raw
    return parsed.set(database=str(_under(Path(parsed.database), root))).render_as_string(hide_password=False)


def _under(path: Path, root: str | Path) -> Path:
    """A SQLite file's path, a relative one under ``root``; its directory made."""
    if not path.is_absolute():
        path = Path(root) / path
    path.parent.mkdir(parents=True, exist_ok=True)
    return path
