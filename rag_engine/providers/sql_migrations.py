"""Versioned schema migrations for the engine's SQL records (usage ledger, audit trail), run once.

Several processes open the same records database at once: the query service's replicas, Dagster
run pods, the CLI. Each opens its tables through ``run_migrations``, which applies the steps a
``schema_migrations`` table (one row per component and version) does not list yet, and lists them,
in one transaction:

- **PostgreSQL**: the transaction first takes a transaction-level advisory lock
  (``pg_advisory_xact_lock``, released at commit or rollback), so two processes starting together
  apply each step once: the second waits for the first to commit, then finds every step listed.
  PostgreSQL's DDL is transactional, so a step that fails leaves neither its tables nor its row.
- **SQLite** (one machine): the transaction starts with ``BEGIN IMMEDIATE``, the database's write
  lock, which the busy timeout waits for; same outcome.

An open that finds every step listed (the usual case) only reads the table: no lock, no write.

Steps are written to be idempotent too (``CREATE ... IF NOT EXISTS``, a column added only when
missing), so a database created before this table existed is brought under it as it is: its steps
are listed without changing a row. Nothing is ever dropped or rewritten.
"""

from __future__ import annotations

import os
import socket
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Column, Connection, DateTime, Engine, Integer, MetaData, String, Table, inspect, select, text

ADVISORY_LOCK_KEY = zlib.crc32(b"rag_engine.schema_migrations")
"""The PostgreSQL advisory lock every engine process takes while it migrates (one per database)."""

schema_migrations = Table(
    "schema_migrations",
    MetaData(),
    Column("component", String(64), primary_key=True),
    Column("version", Integer, primary_key=True, autoincrement=False),
    Column("name", String(200), nullable=False),
    Column("applied_at", DateTime(timezone=True), nullable=False),
    Column("applied_by", String(200), nullable=False),
)


@dataclass(frozen=True)
class Migration:
    """One step of one component's schema (``ledger``, ``audit``), applied on a connection inside
    the migration transaction."""

    component: str
    version: int
    name: str
    apply: Callable[[Connection], object]


def _lock(conn: Connection) -> None:
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": ADVISORY_LOCK_KEY})
    elif conn.dialect.name == "sqlite":
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def _all_listed(engine: Engine, migrations: Sequence[Migration]) -> bool:
    """Whether every step is listed already (read without a lock or a write, so a read-only
    database that is up to date opens)."""
    t = schema_migrations.c
    with engine.connect() as conn:
        if not inspect(conn).has_table(schema_migrations.name):
            return False
        listed = {(c, v) for c, v in conn.execute(select(t.component, t.version))}
    return all((m.component, m.version) in listed for m in migrations)


def run_migrations(engine: Engine, migrations: Sequence[Migration]) -> list[str]:
    """Apply the steps of ``migrations`` the database does not list yet, in order, in one locked
    transaction; returns ``component:version`` for each step this call applied (empty when another
    process, or an earlier open, had applied them all)."""
    if _all_listed(engine, migrations):  # the usual open: nothing to lock, nothing written
        return []
    applied: list[str] = []
    who = f"{socket.gethostname()}:{os.getpid()}"
    with engine.begin() as conn:
        _lock(conn)
        schema_migrations.create(conn, checkfirst=True)
        t = schema_migrations.c
        components = sorted({m.component for m in migrations})
        done = {(c, v) for c, v in conn.execute(select(t.component, t.version).where(t.component.in_(components)))}
        for step in sorted(migrations, key=lambda m: (m.component, m.version)):
            if (step.component, step.version) in done:
                continue
            step.apply(conn)
            conn.execute(
                schema_migrations.insert().values(
                    component=step.component,
                    version=step.version,
                    name=step.name,
                    applied_at=datetime.now(UTC),
                    applied_by=who,
                )
            )
            applied.append(f"{step.component}:{step.version}")
    return applied
