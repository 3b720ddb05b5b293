"""The usage ledger on the real PostgreSQL: concurrent writers lose nothing, history is kept."""

from __future__ import annotations

import multiprocessing as mp
import uuid
from decimal import Decimal

import sqlalchemy

from rag_engine.providers.ledger import UsageLedger
from rag_engine.usage import UsageRecord


def _record(run_id: str, i: int, cost: Decimal | None) -> UsageRecord:
    return UsageRecord(
        run_id=run_id,
        purpose="test",
        provider="p",
        requested_model="m",
        reported_model="m-2024",
        input_tokens=10 + i,
        cached_input_tokens=None if i % 2 else 4,
        output_tokens=3,
        reasoning_tokens=None,
        latency_ms=1,
        status="ok",
        error_type=None,
        pricing_version="v1",
        cost=cost,
    )


def _writer(url: str, run_id: str, n: int) -> None:
    ledger = UsageLedger(url)
    for i in range(n):
        ledger.record(_record(run_id, i, Decimal("0.000123")))
    ledger.dispose()


def _ledger_url(postgres_url: str) -> str:
    return postgres_url.rsplit("/", 1)[0] + "/rag_ledger"


def test_postgres_ledger_concurrent_writers_and_unknown_cost(postgres_url):
    url = _ledger_url(postgres_url)
    run_id = f"pg-{uuid.uuid4().hex[:8]}"
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(url, run_id, 25)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    ledger = UsageLedger(url)
    ledger.record(_record(run_id, 99, None))
    records = ledger.records(run_id)
    assert len(records) == 101 and len({r.id for r in records}) == 101
    assert [r.cost for r in records].count(None) == 1
    assert {r.cached_input_tokens for r in records} == {None, 4}  # None stays distinct from a number
    assert sum(r.cost for r in records if r.cost is not None) == Decimal("0.000123") * 100
    rows = ledger.summary(run_id)
    assert sum(r["calls"] for r in rows) == 101 and sum(r["unknown_cost_calls"] for r in rows) == 1
    ledger.dispose()
    with sqlalchemy.create_engine(url).connect() as conn:
        assert (
            conn.execute(
                sqlalchemy.text("SELECT count(*) FROM usage_records WHERE run_id = :r"), {"r": run_id}
            ).scalar()
            == 101
        )
