"""Appends to a SQLite records file without SQLAlchemy (``sqlite_records``, ``records_db``): the rows
are the ones SQLAlchemy writes, a missing step, table or column falls back to SQLAlchemy (which
migrates), appends and reads reach the same file whatever its path holds, a file that cannot be
used is an error at once, and a process that only appends never imports SQLAlchemy."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from rag_engine.config import load_config
from rag_engine.errors import LedgerUnavailable
from rag_engine.governance.audit import AuditRecord, AuditTrail
from rag_engine.providers import sqlite_records
from rag_engine.providers.ledger import UsageLedger, ledger_url
from rag_engine.providers.sqlite_records import SqliteRecords, column_value, sqlite_file, sqlite_url
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
    """A ledger made before a column existed: the standard-library append declines (a step not
    listed, and no column), SQLAlchemy adds the column in place and writes the record."""
    path = tmp_path / "ledger.sqlite"
    UsageLedger(f"sqlite:///{path}").record(_usage())
    with sqlite3.connect(path) as conn:
        conn.execute("ALTER TABLE usage_records DROP COLUMN actor")
        conn.execute("DELETE FROM schema_migrations WHERE version = 2")
    records = SqliteRecords(str(path))
    assert records.insert("usage_records", [{"purpose": "x"}], [("ledger", 1), ("ledger", 2)]) is None
    assert records.insert("usage_records", [{"actor": "x"}]) is None  # SQLite's "has no column named"
    assert records.insert("no_such_table", [{"x": 1}]) is None  # its "no such table"
    records.close()
    ledger = UsageLedger(f"sqlite:///{path}")
    try:
        rec = ledger.record(_usage(actor="bob"))
        assert ledger.applied == ["ledger:2"]
        assert [r.actor for r in ledger.records()] == [None, "bob"] and rec.id == 2
    finally:
        ledger.dispose()


def test_a_step_not_listed_is_applied_before_the_append_even_when_the_columns_are_there(tmp_path: Path) -> None:
    """A later step need not add a column (an index, a backfill): an append to a file that does not
    list every step goes through SQLAlchemy, which applies the missing ones first."""
    path = tmp_path / "ledger.sqlite"
    UsageLedger(f"sqlite:///{path}").record(_usage())
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM schema_migrations WHERE version = 2")
    ledger = UsageLedger(f"sqlite:///{path}")
    try:
        ledger.record(_usage())
        assert ledger._opened is not None and ledger.applied == ["ledger:2"]
    finally:
        ledger.dispose()


@pytest.mark.parametrize("folder", ["proj%41x", "proj?y", "with space+plus"])
def test_appends_and_reads_reach_the_same_file_whatever_its_path_holds(tmp_path: Path, folder: str) -> None:
    """``ledger_url`` escapes the path as SQLAlchemy renders it, and both paths decode it alike: a
    ``%``, ``?``, space or ``+`` in the project's path never splits the records over two files."""
    url = ledger_url(load_config(ROOT / "config" / "engine.yaml"), {}, tmp_path / folder)  # sqlite:///var/...
    file = tmp_path / folder / "var" / "ledger.sqlite"
    assert sqlite_file(url) == str(file) and sqlite_url(str(file)) == url
    first = UsageLedger(url)
    first.record(_usage())  # migrates through SQLAlchemy
    first.record(_usage())  # through sqlite3
    first.dispose()
    ledger = UsageLedger(url)
    try:
        assert ledger.count() == 2
        assert sorted(p.name for p in file.parent.glob("*.sqlite")) == ["ledger.sqlite"]
        assert not (tmp_path / "projAx").exists() and not (tmp_path / "proj").exists()
    finally:
        ledger.dispose()


def test_a_file_that_cannot_be_used_is_one_typed_error_at_construction(tmp_path: Path) -> None:
    """Before any model call (the metered client builds the ledger first): a missing directory or a
    file that is not a database stops the work, as it did when SQLAlchemy opened the file at once."""
    missing = tmp_path / "no-such-dir" / "ledger.sqlite"
    corrupt = tmp_path / "corrupt.sqlite"
    corrupt.write_bytes(b"not a database, " * 512)
    for path in (missing, corrupt):
        with pytest.raises(LedgerUnavailable, match="cannot be used"):
            UsageLedger(f"sqlite:///{path}")
        with pytest.raises(LedgerUnavailable, match="cannot be used"):
            AuditTrail(f"sqlite:///{path}")


def test_call_ids_of_a_file_with_no_usage_record_yet_are_none(tmp_path: Path) -> None:
    """A SQLite file that holds audit records only (an approval, `rag auth`): the usage table is made
    at the first usage record, so a query's audit record names no call, and nothing is migrated."""
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    UsageLedger(url).dispose()  # built, as a query builds it, before any model call
    trail = AuditTrail(url)
    try:
        trail.append(AuditRecord(event="approval_granted"))
        assert trail.call_ids("session:s", AT) == []
        with sqlite3.connect(tmp_path / "ledger.sqlite") as conn:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert "usage_records" not in tables
    finally:
        trail.dispose()


def test_call_ids_read_through_sqlite3_are_the_ones_sqlalchemy_reads(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    ledger = UsageLedger(f"sqlite:///{path}")
    for run, at in (("r", AT.replace(second=5)), ("r", AT.replace(second=9)), ("other", AT), ("r", AT)):
        ledger.record(_usage(run_id=run, created_at=at))
    ledger.dispose()
    since = AT  # the last record is at it exactly
    plain = AuditTrail(f"sqlite:///{path}")
    through_sqlalchemy = AuditTrail(f"sqlite+pysqlite:///{path}")  # not a plain URL: SQLAlchemy reads
    try:
        assert plain.call_ids("r", since) == through_sqlalchemy.call_ids("r", since) == [2, 4]
        assert plain._opened is None
    finally:
        plain.dispose()
        through_sqlalchemy.dispose()


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
        f"trail = AuditTrail({url!r})\n"
        "trail.append(AuditRecord(event='query'), AuditRecord(event='generation_fallback'))\n"
        "from datetime import UTC, datetime\n"
        "assert trail.call_ids('run-1', datetime(2000, 1, 1, tzinfo=UTC)) == [1]\n"  # `rag query --session`
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


def test_threads_waiting_for_a_writer_give_up_together_at_the_busy_timeout(tmp_path: Path, monkeypatch) -> None:
    """The connection is shared by the process's threads, one at a time; a thread's wait for the
    others counts against its busy timeout, so five threads behind another process's long write all
    give up after about one timeout (here 1 s), not one after another (1, 2, ... 5 s)."""
    monkeypatch.setattr(sqlite_records, "SQLITE_BUSY_TIMEOUT_MS", 1000)
    path = tmp_path / "ledger.sqlite"
    UsageLedger(f"sqlite:///{path}").record(_usage())  # the table, through SQLAlchemy
    records = SqliteRecords(str(path))
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process's writer, holding on
    started = time.monotonic()
    ended: list[float] = []
    errors: list[str] = []

    def append() -> None:
        try:
            records.insert("usage_records", [_usage().model_dump(exclude={"id"})])
        except sqlite3.OperationalError as exc:
            errors.append(str(exc))
        ended.append(time.monotonic() - started)

    threads = [threading.Thread(target=append) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    holder.execute("ROLLBACK")
    holder.close()
    records.close()
    assert len(errors) == 5 and all("locked" in e for e in errors), errors
    assert max(ended) < 1.8, ended
