"""A ledger created by the schema before the ``actor`` column is migrated in place when opened:
the column is added (nullable), every old row is kept as it was and reads back with no actor, and
new rows carry theirs. On a SQLite file and on the real PostgreSQL (in a schema of the test's own)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from decimal import Decimal

import pytest
import sqlalchemy

from rag_engine.providers.ledger import UsageLedger
from rag_engine.usage import UsageRecord

OLD_SCHEMA = """
CREATE TABLE usage_records (
    id {id},
    created_at {ts} NOT NULL,
    run_id VARCHAR(200),
    purpose VARCHAR(200) NOT NULL,
    provider VARCHAR(200) NOT NULL,
    requested_model VARCHAR(200) NOT NULL,
    reported_model VARCHAR(200),
    input_tokens INTEGER NOT NULL,
    cached_input_tokens INTEGER,
    output_tokens INTEGER NOT NULL,
    reasoning_tokens INTEGER,
    latency_ms INTEGER NOT NULL,
    status VARCHAR(16) NOT NULL,
    error_type VARCHAR(200),
    pricing_version VARCHAR(100),
    cost VARCHAR(64)
)
"""
"""The table as the ledger created it before the ``actor`` column (one old row is inserted into it)."""

OLD_ROW = (
    "INSERT INTO usage_records (created_at, run_id, purpose, provider, requested_model, input_tokens, "
    "output_tokens, latency_ms, status, cost) VALUES ('2026-01-02 03:04:05', 'old-run', 'answer', 'p', 'm', "
    "12, 3, 7, 'ok', '0.000150')"
)


def _old_ledger(url: str, id_type: str, ts_type: str) -> None:
    engine = sqlalchemy.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql(OLD_SCHEMA.format(id=id_type, ts=ts_type))
        conn.exec_driver_sql("CREATE INDEX ix_usage_records_run_id ON usage_records (run_id)")
        conn.exec_driver_sql(OLD_ROW)
    engine.dispose()


def _check_migrated(url: str) -> None:
    ledger = UsageLedger(url)  # opening it migrates it
    try:
        columns = {c["name"] for c in sqlalchemy.inspect(ledger._engine).get_columns("usage_records")}
        assert "actor" in columns
        (old,) = ledger.records("old-run")
        assert (old.run_id, old.input_tokens, old.cost, old.actor) == ("old-run", 12, Decimal("0.000150"), None)
        new = ledger.record(
            UsageRecord(run_id="new-run", actor="analyst", purpose="answer", provider="p", requested_model="m")
        )
        assert ledger.records("new-run") == [new] and new.actor == "analyst"
        assert [r["actor"] for r in ledger.summary(by="actor")] == ["(none)", "analyst"]
    finally:
        ledger.dispose()
    again = UsageLedger(url)  # a second open finds nothing to add and keeps every row
    try:
        assert [r.run_id for r in again.records()] == ["old-run", "new-run"]
    finally:
        again.dispose()


def test_an_old_sqlite_ledger_gains_the_actor_column_in_place(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.sqlite'}"
    _old_ledger(url, "INTEGER PRIMARY KEY AUTOINCREMENT", "DATETIME")
    _check_migrated(url)


@pytest.fixture
def pg_schema_url(postgres_url) -> Iterator[str]:
    """The ledger database with a schema of this test's own first on the search path."""
    base = postgres_url.rsplit("/", 1)[0] + "/rag_ledger"
    schema = "mig_" + uuid.uuid4().hex[:10]
    admin = sqlalchemy.create_engine(base)
    with admin.begin() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
    try:
        yield f"{base}?options=-csearch_path%3D{schema}"
    finally:
        with admin.begin() as conn:
            conn.exec_driver_sql(f"DROP SCHEMA {schema} CASCADE")
        admin.dispose()


def test_an_old_postgres_ledger_gains_the_actor_column_in_place(pg_schema_url):
    _old_ledger(pg_schema_url, "SERIAL PRIMARY KEY", "TIMESTAMP WITH TIME ZONE")
    _check_migrated(pg_schema_url)
