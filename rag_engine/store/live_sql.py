"""Pooled, read-only connections to the live SQL sources packs declare (``packs[].live_sources``).

One SQLAlchemy engine per source, built on first use and held by the rag ``Engine``; the
session is read-only with a statement timeout set at connect time. What is queried over them is
the live retrieval leg's business (``rag_engine.retrieval.live_source``).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping

from sqlalchemy import Engine as SqlEngine
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from rag_engine.config import LiveSourceConfig

DRIVERS = ("psycopg2", "psycopg")
"""libpq drivers: they take the session options (read-only, statement timeout) at connect time."""


class SourceUnavailable(Exception):
    """Internal: one source cannot be used now; becomes a ``live_source_unavailable`` event."""

    def __init__(self, reason: str, error_type: str | None = None):
        super().__init__(reason)
        self.reason = reason
        self.error_type = error_type


class LiveSources:
    """One pooled SQLAlchemy engine per live source, built on first use (one set per rag Engine)."""

    def __init__(self, env: Mapping[str, str]):
        self.env = env
        self._engines: dict[tuple[str, str], SqlEngine] = {}
        self._lock = threading.Lock()

    def sql_engine(self, source: LiveSourceConfig) -> SqlEngine:
        raw = self.env.get(source.url_env)
        if not raw:
            raise SourceUnavailable("url_env_not_set")
        with self._lock:
            cached = self._engines.get((source.name, raw))
            if cached is not None:
                return cached
            try:
                url = make_url(raw)
                if url.get_backend_name() != "postgresql" or url.get_driver_name() not in DRIVERS:
                    raise SourceUnavailable("unsupported_url")
                sql_engine = create_engine(
                    url,
                    pool_pre_ping=True,  # a restarted server costs one reconnect, not an event
                    pool_size=2,
                    max_overflow=2,
                    connect_args={
                        "connect_timeout": max(2, math.ceil(source.timeout_ms / 1000)),
                        "options": f"-c default_transaction_read_only=on -c statement_timeout={source.timeout_ms}",
                        "application_name": f"rag-live-{source.name}",
                    },
                )
            except (ArgumentError, ImportError) as exc:
                raise SourceUnavailable("unsupported_url", type(exc).__name__) from None
            self._engines[(source.name, raw)] = sql_engine
            return sql_engine

    def dispose(self) -> None:
        with self._lock:
            for sql_engine in self._engines.values():
                sql_engine.dispose()
            self._engines.clear()
