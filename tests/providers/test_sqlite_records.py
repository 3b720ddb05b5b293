"""Appends to a SQLite records file without SQLAlchemy (``sqlite_records``): the rows are the ones
SQLAlchemy writes, a missing table or column falls back to SQLAlchemy (which migrates), and a
process that only appends never imports SQLAlchemy."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from rag_engine.errors import AuditError, LedgerUnavailable
from rag_engine.governance.audit import AuditRecord, AuditTrail
from rag_engine.providers.ledger import UsageLedger
from rag_engine.providers.sqlite_records import SqliteRecords, column_value, sqlite_file
from rag_engine.usage import UsageRecord

ROOT = Path(__file__).resolve().parents[2]
AT = datetime(2026, 3, 4, 5, 6, 7, 89, tzinfo=UTC)


def _usage(**overrides: object) -> UsageRecord:
    fields: dict[str, object] = {
        "created_at": AT,
        "run_id": "run-1",
        "actor": "jane",
        "purpose": "answer",
        "provider": "p",
        "requested_model": "m",
        "reported_model": "m-2026",
        "input_tokens": 12,
        "cached_input_tokens": None,
        "output_tokens": 3,
        "reasoning_tokens": 0,
        "estimated": True,
        "latency_ms": 41,
        "pricing_version": "2026-01",
        "cost": Decimal("0.000000075"),
    }
    fields.update(overrides)
    return UsageRecord(**fields)  # type: ignore[arg-type]


def _raw(path: Path, table: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as conn:
        return [row[1:] for row in conn.execute(f"SELECT * FROM {table} ORDER BY id")]  # every column but the id


def test_sqlite_urls_that_take_the_standard_library_path() -> None:
    assert sqlite_file("sqlite:///var/ledger.sqlite") == "var/ledger.sqlite"
    assert sqlite_file("sqlite:////abs/ledger.sqlite") == "/abs/ledger.sqlite"
    for other in ("sqlite://", "sqlite:///:memory:", "sqlite:///x.db?mode=ro", "sqlite+pysqlite:///x.db"):
        assert sqlite_file(other) is None, other
    assert sqlite_file("postgresql+psycopg2://u:p@h/db") is None


def test_values_are_stored_as_sqlalchemy_stores_them() -> None:
    assert column_value(AT) == "2026-03-04 05:06:07.000089"
    assert column_value(Decimal("1E-9")) == "0.000000001"  # never scientific notation
    assert column_value(True) == 1 and column_value(False) == 0 and column_value(None) is None


def test_the_first_append_migrates_through_sqlalchemy_and_the_next_rows_are_the_same(tmp_path: Path) -> None:
    """The first record finds no table: SQLAlchemy creates it and writes the row. The second, the
    same record, goes through sqlite3: every stored column is equal, and both read back equal."""
    path = tmp_path / "ledger.sqlite"
    ledger = UsageLedger(f"sqlite:///{path}")
    trail = AuditTrail(f"sqlite:///{path}")
    try:
        assert ledger._opened is None  # nothing opened through SQLAlchemy yet
        first = ledger.record(_usage())
        assert ledger._opened is not None and ledger.applied == ["ledger:1", "ledger:2"]
        second = UsageLedger(f"sqlite:///{path}")
        again = second.record(_usage())
        assert second._opened is None  # appended without SQLAlchemy
        second.dispose()
        a, b = _raw(path, "usage_records")
        assert a == b
        records = ledger.records()
        assert [r.id for r in records] == [first.id, again.id]
        assert (
            records[0].model_dump(exclude={"id"})
            == records[1].model_dump(exclude={"id"})
            == _usage().model_dump(exclude={"id"})
        )

        record = AuditRecord(created_at=AT, event="query", query_id="q1", role="employee", payload={"k": [1, "x"]})
        trail.append(record)  # no audit table yet: SQLAlchemy migrates and writes
        other = AuditTrail(f"sqlite:///{path}")
        other.append(record, record.model_copy(update={"event": "generation_fallback"}))
        assert other._opened is None
        other.dispose()
        rows = _raw(path, "audit_records")
        assert rows[0] == rows[1] and rows[2][1] == "generation_fallback"
        stored = trail.records()
        assert [r.model_dump(exclude={"id"}) for r in stored[:2]] == [record.model_dump(exclude={"id"})] * 2
    finally:
        ledger.dispose()
        trail.dispose()


def test_an_older_ledger_gets_its_missing_column_before_the_append(tmp_path: Path) -> None:
    """A ledger made before a column existed: the standard-library append declines (no column),
    SQLAlchemy adds the column in place and writes the record."""
    path = tmp_path / "ledger.sqlite"
    UsageLedger(f"sqlite:///{path}").record(_usage())
    with sqlite3.connect(path) as conn:
        conn.execute("ALTER TABLE usage_records DROP COLUMN actor")
        conn.execute("DELETE FROM schema_migrations WHERE version = 2")
    assert SqliteRecords(str(path)).insert("usage_records", [{"actor": "x"}]) is None
    ledger = UsageLedger(f"sqlite:///{path}")
    try:
        rec = ledger.record(_usage(actor="bob"))
        assert ledger.applied == ["ledger:2"]
        assert [r.actor for r in ledger.records()] == [None, "bob"] and rec.id == 2
    finally:
        ledger.dispose()


def test_a_file_that_cannot_be_opened_is_one_typed_error(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir" / "ledger.sqlite"
    with pytest.raises(LedgerUnavailable, match="cannot be opened"):
        UsageLedger(f"sqlite:///{missing}").record(_usage())
    with pytest.raises((LedgerUnavailable, AuditError)):
        AuditTrail(f"sqlite:///{missing}").append(AuditRecord(event="query"))


def test_a_process_that_only_appends_never_imports_sqlalchemy(tmp_path: Path) -> None:
    """What a one-off `rag query` writes (a usage record, audit records) to a migrated SQLite file,
    written by a fresh process that never imports SQLAlchemy (about 0.1 s of its start)."""
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    UsageLedger(url).record(_usage())
    AuditTrail(url).append(AuditRecord(event="query"))
    probe = (
        "import sys\n"
        "from rag_engine.governance.audit import AuditRecord, AuditTrail\n"
        "from rag_engine.providers.ledger import UsageLedger\n"
        "from rag_engine.retrieval.query import run_query\n"  # the query path's own imports
        "from rag_engine.usage import UsageRecord\n"
        f"UsageLedger({url!r}).record(UsageRecord(purpose='answer', provider='p', requested_model='m'))\n"
        f"AuditTrail({url!r}).append(AuditRecord(event='query'), AuditRecord(event='generation_fallback'))\n"
        "print('LOADED', 'sqlalchemy' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-1] == "LOADED False"
    ledger, trail = UsageLedger(url), AuditTrail(url)
    try:
        assert ledger.count() == 2 and [r.event for r in trail.records()] == ["query", "query", "generation_fallback"]
    finally:
        ledger.dispose()
        trail.dispose()
