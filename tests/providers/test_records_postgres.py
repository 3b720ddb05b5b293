"""The engine's records (usage ledger, audit trail, approvals) on the real PostgreSQL server with
several writers at once, as a fleet has them: replicas and ingest processes open one fresh database
together (so their schema migrations race), then each appends usage records, audit records and
approval checks. Nothing is lost (every writer's every record is there once), no id repeats, and
each schema step is applied by exactly one process and listed once. The same race on a SQLite file
(the one-machine default) holds too.

Processes are started with ``spawn`` (no inherited connections), meet at a barrier so they really
start together, and are bounded in time (``JOIN_SECONDS``).
"""

from __future__ import annotations

import multiprocessing as mp
import sqlite3
import threading
import time
from collections import Counter
from typing import Any

import sqlalchemy

from rag_engine.governance.approvals import Approval, require
from rag_engine.governance.audit import AuditRecord, AuditTrail
from rag_engine.providers.ledger import UsageLedger
from rag_engine.providers.sql_migrations import schema_migrations
from rag_engine.usage import UsageRecord

WRITERS = 4
RECORDS_EACH = 40
JOIN_SECONDS = 120
STEPS = {"ledger:1", "ledger:2", "audit:1"}


def _writer(url: str, name: str, barrier: Any, out: Any) -> None:
    """One process: open the ledger and the trail at the barrier (migrating if needed), then append
    RECORDS_EACH usage records and as many audit records (every fourth an approval check)."""
    try:
        barrier.wait(timeout=60)
        ledger = UsageLedger(url)
        trail = AuditTrail(url)
        applied = [*ledger.applied, *trail.applied]
        ids: dict[str, list[int]] = {"usage": [], "audit": []}
        for i in range(RECORDS_EACH):
            rec = ledger.record(
                UsageRecord(run_id=f"{name}:{i}", actor=name, purpose="answer", provider="p", requested_model="m")
            )
            ids["usage"].append(int(rec.id or 0))
            if i % 4 == 3:
                inputs = {"writer": name, "i": i}
                approval = Approval.grant("graph_cleanup", inputs, approved_by=name, reason="fleet test")
                require(approval, "graph_cleanup", inputs, audit=trail, session_id=f"{name}:{i}")
                (got,) = trail.records(session_id=f"{name}:{i}")
            else:
                (got,) = trail.append(AuditRecord(event="query", session_id=f"{name}:{i}", actor=name))
            ids["audit"].append(int(got.id or 0))
        ledger.dispose()
        trail.dispose()
        out.put((name, applied, ids, None))
    except Exception as exc:  # reported to the test, which fails on it
        out.put((name, [], {}, f"{type(exc).__name__}: {exc}"))


def _race(url: str, writers: int) -> list[tuple[str, list[str], dict[str, list[int]], str | None]]:
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(writers), ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(url, f"w{n}", barrier, out)) for n in range(writers)]
    for p in procs:
        p.start()
    results = [out.get(timeout=JOIN_SECONDS) for _ in procs]
    for p in procs:
        p.join(timeout=30)
        if p.is_alive():
            p.kill()
    return results


def _check(url: str, results: list[tuple[str, list[str], dict[str, list[int]], str | None]]) -> None:
    errors = [(name, err) for name, _, _, err in results if err]
    assert not errors, errors
    # each schema step applied by exactly one process, and listed once
    applied = Counter(step for _, steps, _, _ in results for step in steps)
    assert set(applied) == STEPS and set(applied.values()) == {1}, applied
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as conn:
            t = schema_migrations.c
            listed = [f"{c}:{v}" for c, v in conn.execute(sqlalchemy.select(t.component, t.version))]
    finally:
        engine.dispose()
    assert sorted(listed) == sorted(STEPS), listed
    # nothing lost, nothing twice
    ledger, trail = UsageLedger(url), AuditTrail(url)
    try:
        usage = ledger.records()
        audit = trail.records()
        assert len(usage) == WRITERS * RECORDS_EACH, len(usage)
        assert len({r.id for r in usage}) == len(usage)
        assert Counter(r.run_id for r in usage) == Counter(
            f"w{n}:{i}" for n in range(WRITERS) for i in range(RECORDS_EACH)
        )
        assert len(audit) == WRITERS * RECORDS_EACH, Counter(r.event for r in audit)
        assert len({r.id for r in audit}) == len(audit)
        assert Counter(r.event for r in audit) == {
            "query": WRITERS * RECORDS_EACH * 3 // 4,
            "approval_granted": WRITERS * RECORDS_EACH // 4,
        }
        reported = sorted(i for _, _, ids, _ in results for i in ids["usage"])
        assert reported == sorted(r.id for r in usage)  # the ids each writer was given are the stored ones
        reported = sorted(i for _, _, ids, _ in results for i in ids["audit"])
        assert reported == sorted(r.id for r in audit)
    finally:
        ledger.dispose()
        trail.dispose()


def test_writers_on_one_postgres_database_lose_nothing_and_migrate_once(fresh_pg_url):
    _check(fresh_pg_url, _race(fresh_pg_url, WRITERS))


def test_writers_on_one_sqlite_file_lose_nothing_and_migrate_once(tmp_path):
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    _check(url, _race(url, WRITERS))


def test_a_ledger_opens_while_another_writer_holds_a_fresh_sqlite_file(tmp_path):
    """The moment the SQLite race above can meet, made certain: another connection holds the write
    lock of a new (not yet WAL) file. Converting it to WAL then fails at once with "database is
    locked", whatever the busy timeout; the ledger retries it until the writer is done."""
    path = tmp_path / "ledger.sqlite"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("CREATE TABLE other (x)")
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("INSERT INTO other VALUES (1)")
    release = threading.Timer(0.3, lambda: holder.execute("COMMIT"))
    release.start()
    started = time.monotonic()
    ledger = UsageLedger(f"sqlite:///{path}")
    try:
        assert time.monotonic() - started >= 0.25  # it waited for the writer, it did not skip WAL
        ledger.record(UsageRecord(run_id="r", actor="a", purpose="answer", provider="p", requested_model="m"))
        assert len(ledger.records()) == 1
    finally:
        release.join()
        ledger.dispose()
        holder.close()
    check = sqlite3.connect(path)
    assert check.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    check.close()


def test_reopening_a_migrated_database_applies_nothing(fresh_pg_url):
    first = UsageLedger(fresh_pg_url)
    assert first.applied == ["ledger:1", "ledger:2"]
    first.dispose()
    again = UsageLedger(fresh_pg_url)
    assert again.applied == []
    again.dispose()
