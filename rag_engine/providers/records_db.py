"""What the usage ledger and the audit trail share: one records database at a URL.

A plain SQLite file (``sqlite_records.sqlite_file``) is appended to through ``sqlite3`` once its
``schema_migrations`` lists every step of the kind of record (``records_steps``), and the usage
ids a query's audit record names are read the same way; it is opened through SQLAlchemy
(``records_sql``, which migrates it) only for any other read, or when an append finds a step, a
table or a column missing (a new file, an older schema): a process that only appends, a one-off
`rag query`, never imports SQLAlchemy. Its sqlite3 connection is opened at
construction, so a file that cannot be used is one typed error before any model call. Any other
URL (PostgreSQL, SQLite in memory or with options) is opened and migrated at construction.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rag_engine.providers.records_steps import Step
from rag_engine.providers.sqlite_records import SqliteRecords, sqlite_file

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from rag_engine.providers.sql_migrations import Migration


class RecordsDatabase:
    """A records database: ``_insert`` and ``_ids`` without SQLAlchemy where they can, ``_engine``
    for the rest. A subclass names its ``_STEPS`` and ``_migrations``."""

    _STEPS: tuple[Step, ...] = ()

    def __init__(self, url: str):
        self._url = url
        self._opened: tuple[Engine, list[str]] | None = None
        self._open_lock = threading.Lock()
        self._listed = False  # the file lists every step of _STEPS (checked at the first append)
        path = sqlite_file(url)
        self._sqlite = SqliteRecords(path) if path is not None else None
        if self._sqlite is None:
            self._engine  # noqa: B018 - opened (and migrated) now

    def _migrations(self) -> Sequence[Migration]:
        """The schema steps of this kind of record with what applies them (``records_sql``)."""
        raise NotImplementedError

    def _failed(self, doing: str, exc: Exception) -> None:
        """Called with a database error while ``doing`` ("open", "write", "read"); raise a typed error
        here, or the error itself is raised."""

    def _open(self) -> tuple[Engine, list[str]]:
        """The SQLAlchemy engine and the schema steps its open applied, opened once (threads wait)."""
        with self._open_lock:
            if self._opened is None:
                from sqlalchemy.exc import SQLAlchemyError

                from rag_engine.providers.records_sql import make_engine
                from rag_engine.providers.sql_migrations import run_migrations

                engine = make_engine(self._url)
                try:
                    self._opened = engine, run_migrations(engine, self._migrations())
                except SQLAlchemyError as exc:
                    engine.dispose()
                    self._failed("open", exc)
                    raise
            return self._opened

    @property
    def _engine(self) -> Engine:
        return self._open()[0]

    @property
    def applied(self) -> list[str]:
        """The schema steps the SQLAlchemy open applied (``component:version``); empty when none was
        due. Reading it opens the database through SQLAlchemy."""
        return self._open()[1]

    def _insert(self, table: str, rows: Sequence[Mapping[str, Any]]) -> list[int]:
        """Append ``rows`` to ``table`` in one transaction; their ids. Through sqlite3 when the file
        is plain SQLite and holds the schema, else through SQLAlchemy (migrating first)."""
        sqlite = self._sqlite
        try:
            if sqlite is not None:
                steps = () if self._listed else [(c, v) for c, v, _ in self._STEPS]
                ids = sqlite.insert(table, rows, steps)
                if ids is not None:
                    self._listed = True  # every step is listed: no need to read them again
                    return ids
        except sqlite3.Error as exc:
            self._failed("write", exc)
            raise
        from sqlalchemy.exc import SQLAlchemyError

        from rag_engine.providers.records_sql import TABLES

        out = []
        try:
            with self._engine.begin() as conn:
                for row in rows:
                    key = conn.execute(TABLES[table].insert().values(**row)).inserted_primary_key
                    assert key is not None, "a single-row INSERT always reports its primary key"
                    out.append(int(key[0]))
        except SQLAlchemyError as exc:
            self._failed("write", exc)
            raise
        return out

    def _ids(self, table: str, equal: Mapping[str, Any], at_least: Mapping[str, Any]) -> list[int] | None:
        """``SqliteRecords.ids`` on a plain SQLite file (none without the table: nothing was written
        to it); None elsewhere (then read through ``_engine``)."""
        if self._sqlite is None:
            return None
        try:
            return self._sqlite.ids(table, equal, at_least)
        except sqlite3.Error as exc:
            self._failed("read", exc)
            raise

    def __repr__(self) -> str:
        if self._sqlite is not None:  # a file path: no password to mask
            return f"{type(self).__name__}({self._url!r})"
        return f"{type(self).__name__}({self._engine.url.render_as_string(hide_password=True)!r})"

    @property
    def dialect(self) -> str:
        return "sqlite" if self._sqlite is not None else self._engine.dialect.name

    def dispose(self) -> None:
        if self._sqlite is not None:
            self._sqlite.close()
        if self._opened is not None:
            self._opened[0].dispose()
