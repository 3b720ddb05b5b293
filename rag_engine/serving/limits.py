"""What keeps the query service up under load: per-principal rate limits and concurrency caps,
one bounded pool of engine calls, a timeout per request, and a cap on request bodies.

Rate: a token bucket per principal (``requests_per_minute`` refilled continuously, ``burst`` at
most), so a client that keeps to its rate is never refused and one that bursts gets ``429`` with
``Retry-After`` saying when its next token is due. Concurrency: at most ``concurrent_per_principal``
of one principal's requests run at once (``429``, retry after a second), so one caller cannot take
the whole pool. Pool: at most ``workers`` engine calls run at once across all principals (each
holds a Neo4j session from the driver's pool and a worker thread); a request waiting for a worker
waits within its own timeout. Timeout: a request that has not finished within
``request_timeout_seconds`` is answered ``504``; its engine call finishes in its worker (a
blocking driver call cannot be cancelled) but keeps its pool slot until then, so timeouts never
grow the number of threads or sessions. The rate and concurrency limits are this process's own;
``serving.shared_limits`` shares them across replicas through Redis.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

from rag_engine.config import ServingLimitsConfig
from rag_engine.errors import RateLimited, RequestTimeout, StoreUnavailable
from rag_engine.serving.metrics import POOL_BUSY, POOL_WORKERS
from rag_engine.store.connection import store_gone

T = TypeVar("T")


@dataclass
class _Bucket:
    tokens: float
    stamp: float
    running: int = 0


@dataclass
class Limiter:
    """Per-principal token buckets and in-flight counts (thread-safe; the clock is injectable)."""

    limits: ServingLimitsConfig
    clock: Callable[[], float] = time.monotonic
    _buckets: dict[str, _Bucket] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _bucket(self, principal: str, now: float) -> _Bucket:
        bucket = self._buckets.get(principal)
        if bucket is None:
            bucket = self._buckets[principal] = _Bucket(tokens=float(self.limits.burst), stamp=now)
        rate = self.limits.requests_per_minute / 60.0
        bucket.tokens = min(float(self.limits.burst), bucket.tokens + (now - bucket.stamp) * rate)
        bucket.stamp = now
        return bucket

    @contextmanager
    def admit(self, principal: str) -> Iterator[None]:
        """Take one token and one of the principal's concurrency slots for the request's duration,
        or raise ``RateLimited`` (nothing taken)."""
        with self._lock:
            now = self.clock()
            bucket = self._bucket(principal, now)
            if bucket.running >= self.limits.concurrent_per_principal:
                raise RateLimited(
                    f"principal {principal} has {bucket.running} requests running "
                    f"(serving.limits.concurrent_per_principal: {self.limits.concurrent_per_principal})",
                    retry_after=1,
                )
            if bucket.tokens < 1.0:
                wait = (1.0 - bucket.tokens) / (self.limits.requests_per_minute / 60.0)
                raise RateLimited(
                    f"principal {principal} is over {self.limits.requests_per_minute} requests per minute "
                    f"(serving.limits.requests_per_minute)",
                    retry_after=max(1, math.ceil(wait)),
                )
            bucket.tokens -= 1.0
            bucket.running += 1
        try:
            yield
        finally:
            with self._lock:
                bucket.running -= 1


class EnginePool:
    """The bounded pool engine calls run in: ``workers`` threads, each call within the request
    timeout. A fixed executor, not the event loop's default pool, so a timed-out call keeps its
    thread until it finishes and the number of threads (and Neo4j sessions) never grows past
    ``workers``; a call still queued when its request times out is cancelled, never run."""

    def __init__(self, limits: ServingLimitsConfig):
        self.limits = limits
        self._executor = ThreadPoolExecutor(max_workers=limits.workers, thread_name_prefix="rag-engine")
        self._lock = threading.Lock()
        self.busy = 0
        POOL_WORKERS.set(limits.workers)

    def _counted(self, fn: Callable[[], T]) -> Callable[[], T]:
        context = contextvars.copy_context()

        def call() -> T:
            with self._lock:
                self.busy += 1
            POOL_BUSY.inc()
            try:
                return context.run(fn)
            finally:
                POOL_BUSY.dec()
                with self._lock:
                    self.busy -= 1

        return call

    async def run(self, fn: Callable[[], T]) -> T:
        """Run the blocking ``fn`` in a worker of the pool; ``RequestTimeout`` after
        ``request_timeout_seconds`` (waiting for a worker included). The store stopping mid-call
        comes out as ``StoreUnavailable``: a typed error every caller (route, stream, MCP tool)
        answers in one line, where an untyped one would reach the server as an unhandled exception
        (a traceback per request, and the client's keep-alive connection closed)."""
        timeout = self.limits.request_timeout_seconds
        future = self._executor.submit(self._counted(fn))
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout)
        except StoreUnavailable:
            raise
        except TimeoutError:
            future.cancel()  # still queued: never runs; running: finishes in its worker
            raise RequestTimeout(
                f"the request did not finish within {timeout:g} s (serving.limits.request_timeout_seconds)"
            ) from None
        except Exception as exc:
            gone = store_gone(exc)
            if gone is None:
                raise
            raise gone from None

    def shutdown(self) -> None:
        """Wait for the calls in flight; called when the service stops."""
        self._executor.shutdown(wait=True, cancel_futures=True)


async def bounded(limiter: Limiter, pool: EnginePool, principal: str, fn: Callable[[], T]) -> T:
    """One engine call of ``principal`` under every limit: rate, concurrency, pool, timeout."""
    with limiter.admit(principal):
        return await pool.run(fn)
