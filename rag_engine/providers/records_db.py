"""What the usage ledger and the audit trail share: one records database at a URL.

A plain SQLite file (``sqlite_records.sqlite_file``) is appended to through ``sqlite3`` and opened
through SQLAlchemy (``records_sql``, which migrates it) only when it is first read, or when an
append finds its table or a column missing (a new file, an older schema): a process that only
appends, a one-off `rag query`, never imports SQLAlchemy. Any other URL (PostgreSQL, SQLite in
memory or with options) is opened and migrated at once, so an unreachable database is one typed
error at the start.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rag_engine.providers.sqlite_records import SqliteRecords, sqlite_file

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from rag_engine.providers.sql_migrations import Migration


class RecordsDatabase:
    """A records database: ``_append`` without SQLAlchemy where it can, ``_engine`` for the rest."""

    def __init__(self, url: str):
        self._url = url
        self._opened: tuple[Engine, list[str]] | None = None
        self._open_lock = threading.Lock()
        path = sqlite_file(url)
        self._sqlite = SqliteRecords(path) if path is not None else None
        if self._sqlite is None:
            self._engine  # noqa: B018 - opened (and migrated) now

    def _migrations(self) -> Sequence[Migration]:
        """The schema steps of this kind of record (``records_sql``)."""
        raise NotImplementedError

    def _open_failed(self, exc: Exception) -> None:
        """Called with a SQLAlchemy error of the open (migrating); raise a typed error here, or the
        error itself is raised."""

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
                    self._open_failed(exc)
                    raise
            return self._opened

    @property
    def _engine(self) -> Engine:
        return self._open()[0]

    @property
    def applied(self) -> list[str]:
        """The schema steps the SQLAlchemy open applied (``component:version``); empty when none was due."""
        return self._open()[1]

    def _append(self, table: str, rows: Sequence[Mapping[str, Any]]) -> list[int] | None:
        """The rows appended without SQLAlchemy, their ids; None (nothing written) when this is not a
        plain SQLite file or it lacks the table or a column: then append through ``_engine``."""
        return self._sqlite.insert(table, rows) if self._sqlite is not None else None

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
