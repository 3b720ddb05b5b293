"""The usage ledger: exact round trips, append-only, no lost records under concurrent writers."""

from __future__ import annotations

import multiprocessing
import sqlite3
from decimal import Decimal
from pathlib import Path

import pytest
from pydantic import ValidationError

from rag_engine.config import (
    DefaultsConfig,
    EngineConfig,
    LedgerConfig,
    ModelConfig,
    ProviderConfig,
    StorageConfig,
)
from rag_engine.providers.ledger import SUMMARY_COLUMNS, UsageLedger, ledger_url
from rag_engine.usage import UsageRecord


def _rec(**overrides) -> UsageRecord:
    fields = {"purpose": "test", "provider": "p", "requested_model": "m", "input_tokens": 10, "output_tokens": 5}
    fields.update(overrides)
    return UsageRecord(**fields)


def test_round_trip_keeps_none_distinct_from_zero_and_decimal_exact(ledger: UsageLedger) -> None:
    a = ledger.record(_rec(cached_input_tokens=None, reasoning_tokens=None, cost=Decimal("0.000000075")))
    b = ledger.record(_rec(cached_input_tokens=0, reasoning_tokens=0, cost=None, run_id="r1"))
    stored = ledger.records()
    assert [r.id for r in stored] == [a.id, b.id] and a.id != b.id
    assert stored[0].cached_input_tokens is None and stored[0].reasoning_tokens is None
    assert stored[1].cached_input_tokens == 0 and stored[1].reasoning_tokens == 0
    assert stored[0].cost == Decimal("0.000000075")  # no float round trip
    assert stored[1].cost is None
    assert stored[0].created_at.tzinfo is not None
    assert [r.id for r in ledger.records(run_id="r1")] == [b.id]
    assert ledger.count() == 2 and ledger.count(run_id="r1") == 1 and ledger.count(status="error") == 0


def test_ledger_api_has_no_way_to_change_history(ledger: UsageLedger) -> None:
    public = {name for name in dir(ledger) if not name.startswith("_")}
    assert not public & {"update", "delete", "remove", "clear", "truncate", "upsert", "replace"}
    rec = ledger.record(_rec())
    with pytest.raises(ValidationError):
        rec.input_tokens = 0  # records are frozen  # type: ignore[misc]
    assert ledger.records()[0].input_tokens == 10


def test_sqlite_ledger_uses_wal(ledger: UsageLedger, ledger_path: Path) -> None:
    ledger.record(_rec())
    with sqlite3.connect(ledger_path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal"


def test_summary_keeps_unknown_costs_visible(ledger: UsageLedger) -> None:
    ledger.record(_rec(run_id="r1", cost=Decimal("0.001"), cached_input_tokens=4, reported_model="m-2024"))
    ledger.record(_rec(run_id="r1", cost=Decimal("0.002"), cached_input_tokens=None))
    ledger.record(_rec(run_id="r1", cost=None))
    ledger.record(
        _rec(
            run_id="r1", status="error", error_type="ProviderTimeout", input_tokens=0, output_tokens=0, cost=Decimal(0)
        )
    )
    ledger.record(_rec(run_id="r2", provider="local", requested_model="llama", cost=None))
    rows = ledger.summary()
    assert sorted(r["run_id"] for r in rows) == ["r1", "r2"]
    r1 = next(r for r in rows if r["run_id"] == "r1")
    assert r1["calls"] == 4 and r1["errors"] == 1
    assert r1["input_tokens"] == 30 and r1["output_tokens"] == 15
    assert r1["cached_input_tokens"] == 4
    assert r1["cost"] == Decimal("0.003")
    assert r1["unknown_cost_calls"] == 1
    assert r1["reported_models"] == "m-2024"
    assert r1["reasoning_tokens"] is None  # no call reported one: unknown, not 0
    r2 = next(r for r in rows if r["run_id"] == "r2")
    assert r2["cost"] is None and r2["unknown_cost_calls"] == 1
    assert [r["run_id"] for r in ledger.summary(run_id="r2")] == ["r2"]


def test_summary_rows_hold_the_summary_columns_in_order(ledger: UsageLedger) -> None:
    assert ledger.summary() == []
    ledger.record(_rec(run_id="r1", cost=Decimal("0.001")))
    assert list(ledger.summary()[0]) == SUMMARY_COLUMNS
    assert list(ledger.summary(by="actor")[0]) == [c if c != "run_id" else "actor" for c in SUMMARY_COLUMNS]


def _cfg() -> EngineConfig:
    return EngineConfig(
        storage=StorageConfig(
            ledger=LedgerConfig(url_env="RAG_TEST_LEDGER_URL", default_url="sqlite:///var/x/l.sqlite")
        ),
        providers=(ProviderConfig(name="h", kind="local_hash"),),
        models=(
            ModelConfig(name="e", provider="h", role="embedding", served_model="e", dimension=8),
            ModelConfig(name="g", provider="h", role="generation", served_model="g"),
        ),
        defaults=DefaultsConfig(generation_model="g", embedding_model="e"),
    )


def test_ledger_url_default_is_resolved_against_the_project_root(tmp_path: Path) -> None:
    url = ledger_url(_cfg(), {}, tmp_path)
    assert url == f"sqlite:///{tmp_path / 'var' / 'x' / 'l.sqlite'}"
    assert (tmp_path / "var" / "x").is_dir()
    UsageLedger(url).record(_rec())
    assert (tmp_path / "var" / "x" / "l.sqlite").is_file()


def test_ledger_url_env_var_wins(tmp_path: Path) -> None:
    pg = "postgresql+psycopg2://u:secret@127.0.0.1:5432/ledger"
    assert ledger_url(_cfg(), {"RAG_TEST_LEDGER_URL": pg}, tmp_path) == pg
    assert ledger_url(_cfg(), {"RAG_TEST_LEDGER_URL": "sqlite:///rel/a.sqlite"}, tmp_path) == (
        f"sqlite:///{tmp_path / 'rel' / 'a.sqlite'}"
    )


# -- concurrency ----------------------------------------------------------------------


def _write_many(url: str, worker: int, count: int, start) -> None:  # runs in a child process
    led = UsageLedger(url)
    start.wait(timeout=30)
    for i in range(count):
        led.record(_rec(run_id=f"w{worker}", purpose=f"{worker}:{i}"))
    led.dispose()


def test_concurrent_writers_in_several_processes_lose_nothing(tmp_path: Path) -> None:
    # No process creates the table beforehand: the writers also race to create it.
    url = f"sqlite:///{tmp_path / 'shared.sqlite'}"
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    workers, per_worker = 4, 50
    procs = [ctx.Process(target=_write_many, args=(url, w, per_worker, start)) for w in range(workers)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0] * workers

    led = UsageLedger(url)
    records = led.records()
    assert led.count() == workers * per_worker == len(records)
    assert len({r.id for r in records}) == workers * per_worker
    assert {r.purpose for r in records} == {f"{w}:{i}" for w in range(workers) for i in range(per_worker)}
    for w in range(workers):  # each writer's own records are in its order
        mine = [int(r.purpose.split(":")[1]) for r in records if r.run_id == f"w{w}"]
        assert mine == list(range(per_worker))
    led.dispose()
