"""Appending rows to the SQL records (usage ledger, audit trail) of a SQLite file with the standard
library alone.

The records are SQLAlchemy Core tables (``records_sql``): reads, PostgreSQL and the schema's
migrations go through SQLAlchemy. Importing it costs a fresh process about 0.1 s, a tenth of a
one-off `rag query`, which only appends a usage record and an audit record. On a SQLite file
those appends go through ``sqlite3`` here instead, with the connection settings SQLAlchemy's
connections get (``sqlite_wal.configure``) and each value stored as SQLAlchemy stores it
(``column_value``), so a row reads back the same whichever path wrote it
(tests/providers/test_sqlite_records.py).

Creating or migrating a table is not this module's: a file without the table, or without a column
of the row (a new file, an older schema), makes ``insert`` return None, and the caller opens the
file through SQLAlchemy, which migrates it, and appends there.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from rag_engine.errors import LedgerUnavailable
from rag_engine.providers.sqlite_wal import configure

SQLITE_BUSY_TIMEOUT_MS = 30_000
"""How long a write waits for another writer of the same file (every engine SQLite connection)."""

_PREFIX = "sqlite:///"
_MISSING = ("no such table", "has no column named")


def sqlite_file(url: str) -> str | None:
    """The file of a plain SQLite URL (``sqlite:///relative`` or ``sqlite:////absolute``, no driver
    name, no query string), else None: in memory, another database, or options only SQLAlchemy
    reads."""
    if not url.startswith(_PREFIX) or "?" in url:
        return None
    path = url[len(_PREFIX) :]
    return None if path in ("", ":memory:") else path


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
    """Appends to one SQLite records file: one connection, opened at the first append and shared
    by the process's threads (one at a time)."""

    def __init__(self, path: str):
        self.path = path
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            try:
                conn = sqlite3.connect(self.path, timeout=SQLITE_BUSY_TIMEOUT_MS / 1000, check_same_thread=False)
                configure(conn, SQLITE_BUSY_TIMEOUT_MS)
            except sqlite3.Error as exc:
                where = str(Path(self.path).name)
                raise LedgerUnavailable(
                    f"the records file {where} cannot be opened ({type(exc).__name__}: {exc}); storage.ledger "
                    "names it (its url_env, else default_url)"
                ) from None
            self._conn = conn
        return self._conn

    def insert(self, table: str, rows: Sequence[Mapping[str, Any]]) -> list[int] | None:
        """Append ``rows`` (column -> value) to ``table`` in one transaction; their ids, or None
        (nothing written) when the file lacks the table or one of the columns."""
        with self._lock:
            conn = self._connection()
            ids: list[int] = []
            try:
                with conn:  # one transaction: committed, or rolled back on any error
                    for row in rows:
                        columns = ", ".join(row)
                        marks = ", ".join("?" * len(row))
                        cur = conn.execute(
                            f"INSERT INTO {table} ({columns}) VALUES ({marks})",
                            [column_value(v) for v in row.values()],
                        )
                        assert cur.lastrowid is not None, "an INSERT into a rowid table reports its rowid"
                        ids.append(cur.lastrowid)
            except sqlite3.OperationalError as exc:
                if any(m in str(exc) for m in _MISSING):
                    return None
                raise
            return ids

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
