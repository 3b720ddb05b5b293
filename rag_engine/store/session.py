"""Read transactions of the query path.

A question's reads (exact references, fulltext, vector, planner, traversal, expansion) all run in
one read transaction (``read_transaction``): one session, one connection, one commit, instead of
a session and a transaction per leg (Neo4j transactions are read-committed, not snapshots).
Sessions are opened in READ access mode, so over a ``neo4j://`` routing URI every read goes to
a reader of the cluster.

``read`` is the one-off form (reports, checks): one query in its own managed read transaction.

A store that stops answering (the driver's ``ServiceUnavailable`` or ``SessionExpired``) comes out of
both as the engine's typed ``StoreUnavailable``, the driver's error as its cause: a caller of the
engine's Python API sees the same error the CLI and ``rag serve`` map to exit code and 503.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import neo4j

from rag_engine.store.connection import UNREACHABLE, not_answering


class Reads:
    """The read transaction of one question, with what the store epochs told it
    (``epochs.store_state`` reads them once per transaction), how many statements it ran
    (``queries``) and the wall time they took (``store_ms``: from sending a statement to its
    last record received, less any work its caller did in between (``started``); turning the
    records into dicts is not counted)."""

    def __init__(
        self,
        tx: neo4j.Transaction | neo4j.ManagedTransaction,
        driver: neo4j.Driver,
        database: str,
        packs: Iterable[str],
    ):
        self.tx = tx
        self.driver = driver
        self.database = database
        self.packs: tuple[str, ...] = tuple(sorted(packs))
        """The enabled packs: every chunk the query path reads is of one of them (``reads.SERVED``)."""
        self.queries = 0
        self.store_ms = 0.0
        self.memo: dict[str, Any] = {}
        self.pending: Started | None = None
        """The statement ``started`` sent whose records are not received yet, if any."""

    def rows(self, query: str, **params: Any) -> list[dict[str, Any]]:
        return [r.data() for r in self.started(query, **params).records()]

    def values(self, query: str, **params: Any) -> list[dict[str, Any]]:
        """As ``rows``, the values as the driver gives them: for plain columns (strings, numbers,
        bytes). ``Record.data()`` walks every value, a byte array item by item: 30 kB of unit
        vectors per chunk made it the query path's slowest step."""
        return self.started(query, **params).values()

    def started(self, query: str, **params: Any) -> Started:
        """The statement sent, its records not yet received (``Started``). ``rows`` and ``values``
        receive them at once; a caller with work that does not need them does it first, while
        the store computes them. A statement still ``pending`` is received first (its wait
        counted under it): the driver reads one statement's records before the next runs."""
        if self.pending is not None:
            self.pending.records()
        self.queries += 1
        began = time.perf_counter()
        try:
            result = self.tx.run(query, **params)
        finally:
            self.store_ms += (time.perf_counter() - began) * 1000
        self.pending = Started(self, result)
        return self.pending


class Started:
    """A statement ``Reads.started`` sent. Its time in ``store_ms`` is the time its caller waited
    on it: sending it, then reading (``records``) what the driver had not read by then; a failed
    statement's too. ``records`` receives them once and gives the same list (or raises the same
    error) on every later call."""

    def __init__(self, reads: Reads, result: neo4j.Result):
        self._reads = reads
        self._result = result
        self._records: list[neo4j.Record] | None = None
        self._error: BaseException | None = None

    def records(self) -> list[neo4j.Record]:
        if self._records is None:
            if self._error is not None:
                raise self._error
            began = time.perf_counter()
            try:
                self._records = list(self._result)
            except BaseException as exc:
                self._error = exc
                raise
            finally:
                self._reads.store_ms += (time.perf_counter() - began) * 1000
                if self._reads.pending is self:
                    self._reads.pending = None
        return self._records

    def values(self) -> list[dict[str, Any]]:
        """The records as ``Reads.values`` gives them."""
        return [dict(zip(r.keys(), r.values(), strict=True)) for r in self.records()]


@contextmanager
def read_transaction(driver: neo4j.Driver, database: str, *, packs: Iterable[str]) -> Iterator[Reads]:
    """One explicit read transaction for a question's reads; nothing in it can write. ``packs``:
    the enabled packs (``engine.packs``); a chunk of any other pack is never read (``reads.SERVED``)."""
    try:
        with (
            driver.session(database=database, default_access_mode=neo4j.READ_ACCESS) as session,
            session.begin_transaction() as tx,
        ):
            yield Reads(tx, driver, database, packs)
            tx.commit()
    except UNREACHABLE as exc:
        raise not_answering(exc) from exc


def read(driver: neo4j.Driver, database: str, query: str, **params: Any) -> list[dict[str, Any]]:
    """One query in its own managed read transaction (retried on transient errors)."""

    def work(tx: neo4j.ManagedTransaction) -> list[dict[str, Any]]:
        return [r.data() for r in tx.run(query, **params)]

    try:
        with driver.session(database=database, default_access_mode=neo4j.READ_ACCESS) as session:
            return session.execute_read(work)
    except UNREACHABLE as exc:
        raise not_answering(exc) from exc
