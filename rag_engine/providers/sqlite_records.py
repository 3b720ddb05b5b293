"""Appending rows to the SQL records (usage ledger, audit trail) of a SQLite file with the standard
library alone.

The records are SQLAlchemy Core tables (``records_sql``): reads, PostgreSQL and the schema's
migrations go through SQLAlchemy. Importing it costs a fresh process 0.1-0.2 s, a fifth of a
one-off `rag query`, which only appends a usage record and an audit record (and, with a session,
reads the ids of its usage records). On a SQLite file those go through ``sqlite3`` here instead,
with the connection settings SQLAlchemy's connections get (``sqlite_wal.configure``) and each value
stored as SQLAlchemy stores it (``column_value``), so a row reads back the same whichever path
wrote it (tests/providers/test_sqlite_records.py).

Creating or migrating a table is not this module's: ``insert`` appends only when the file's
``schema_migrations`` lists every step the caller expects, and declines (returns None, nothing
written) otherwise, or on a table or column the file lacks whatever the list says; the caller
then opens the file through SQLAlchemy, which migrates it.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from decimal import Decimal
from typing import Any
from urllib.parse import quote, unquote

from rag_engine.errors import LedgerUnavailable
from rag_engine.providers.sqlite_wal import configure

SQLITE_BUSY_TIMEOUT_MS = 30_000
"""How long a write waits for another writer of the same file (every engine SQLite connection)."""

_PREFIX = "sqlite:///"
_MISSING = ("no such table", "has no column named")
"""SQLite's messages for a table or a column the file does not have (pinned by a test)."""


def sqlite_file(url: str) -> str | None:
    """The file of a plain SQLite URL (``sqlite:///relative`` or ``sqlite:////absolute``, no driver
    name, no query string), percent-escapes decoded as SQLAlchemy decodes them; else None: in
    memory, another database, or options only SQLAlchemy reads."""
    if not url.startswith(_PREFIX) or "?" in url:
        return None
    path = unquote(url[len(_PREFIX) :])
    return None if path in ("", ":memory:") else path


def sqlite_url(path: str) -> str:
    """The plain SQLite URL of ``path``, escaped as SQLAlchemy renders it (``sqlite_file`` and
    SQLAlchemy both read ``path`` back from it, a ``%`` or ``?`` in it included)."""
    return _PREFIX + quote(path, safe=" +/")


def column_value(value: Any) -> Any:
    """``value`` as SQLAlchemy's SQLite dialect stores it: a datetime as ``YYYY-MM-DD
    HH:MM:SS.ffffff`` of its own fields (callers give UTC; the offset is not stored, as there),
    a Decimal as plain decimal text (the ledger's exact cost column), a bool as 0 or 1."""
    if isinstance(value, datetime):
        return (
            f"{value.year:04d}-{value.month:02d}-{value.day:02d} "
            f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}.{value.microsecond:06d}"
        )
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, bool):
        return int(value)
    return value


class SqliteRecords:
    """One SQLite records file. Appends go through one connection shared by the process's threads,
    one at a time (SQLite takes one writer at a time anyway); it is opened at construction, so a
    file that cannot be used is an error at once, not at the first record. An append waits for the
    process's other appends and for other processes' writers together at most the busy timeout, as
    each pooled SQLAlchemy connection did (reopening after ``close`` may add one timeout of its own).
    Reads (``ids``) take a connection of their own."""

    def __init__(self, path: str):
        self.path = path
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = self._connect()

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(self.path, timeout=SQLITE_BUSY_TIMEOUT_MS / 1000, check_same_thread=False)
        except sqlite3.Error as exc:
            raise self._unavailable(exc) from None
        try:
            configure(conn, SQLITE_BUSY_TIMEOUT_MS)
        except sqlite3.Error as exc:  # "file is not a database", a lock outlasting the timeout
            conn.close()
            raise self._unavailable(exc) from None
        return conn

    def _unavailable(self, exc: sqlite3.Error) -> LedgerUnavailable:
        return LedgerUnavailable(
            f"the records file {self.path} cannot be used ({type(exc).__name__}: {exc}); storage.ledger "
            "names it (its url_env, else default_url)"
        )

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        """The connection, this thread's alone until the block ends, its busy timeout what is left of
        SQLITE_BUSY_TIMEOUT_MS after waiting for the process's other threads."""
        deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
        if not self._lock.acquire(timeout=SQLITE_BUSY_TIMEOUT_MS / 1000):
            raise sqlite3.OperationalError("database is locked (this process's other writers held it)")
        try:
            if self._conn is None:  # closed, used again
                self._conn = self._connect()
            left = max(1, round((deadline - time.monotonic()) * 1000))
            self._conn.execute(f"PRAGMA busy_timeout = {left}")
            yield self._conn
        finally:
            self._lock.release()

    def insert(
        self, table: str, rows: Sequence[Mapping[str, Any]], steps: Sequence[tuple[str, int]] = ()
    ) -> list[int] | None:
        """Append ``rows`` (column -> value) to ``table`` in one transaction; their ids, or None
        (nothing written) when the file's ``schema_migrations`` does not list every (component,
        version) of ``steps``, or the file lacks the table or one of the columns."""
        ids: list[int] = []
        try:
            with self._connection() as conn, conn:  # one transaction: committed, or rolled back on any error
                listed = set(conn.execute("SELECT component, version FROM schema_migrations")) if steps else set()
                if any(step not in listed for step in steps):
                    return None
                for row in rows:
                    cur = conn.execute(
                        f"INSERT INTO {table} ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                        [column_value(v) for v in row.values()],
                    )
                    assert cur.lastrowid is not None, "an INSERT into a rowid table reports its rowid"
                    ids.append(cur.lastrowid)
        except sqlite3.OperationalError as exc:
            if any(m in str(exc) for m in _MISSING):
                return None
            raise
        return ids

    def ids(self, table: str, equal: Mapping[str, Any], at_least: Mapping[str, Any]) -> list[int]:
        """Ids of ``table``'s rows whose columns equal ``equal`` and are at least ``at_least``
        (compared as stored, ``column_value``), in id order; none when the file has no such table.
        Read on a connection of its own, so it never waits behind this process's writers (a WAL
        reader does not wait for writers at all)."""
        where = [f"{c} = ?" for c in equal] + [f"{c} >= ?" for c in at_least]
        values = [column_value(v) for v in (*equal.values(), *at_least.values())]
        conn = sqlite3.connect(self.path, timeout=SQLITE_BUSY_TIMEOUT_MS / 1000)
        try:
            rows = conn.execute(f"SELECT id FROM {table} WHERE {' AND '.join(where) or '1'} ORDER BY id", values)
            return [int(r[0]) for r in rows]
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return []
            raise
        finally:
            conn.close()

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
