"""What bounds a connection before the app sees it: how many are open (per client address and in
total) and how long one may take to send a request head.

uvicorn bounds an idle keep-alive connection (``timeout_keep_alive``) but neither the time a
client takes to send its headers nor the number of connections it holds; a client trickling
bytes could hold every file descriptor of the process. ``guarded_protocol`` wraps uvicorn's HTTP
protocol class (httptools or h11, whichever uvicorn picks) so that:

- a connection over ``connections_per_address`` from its address, or over the total (the
  smaller of ``max_connections`` and the open-file limit less a reserve for the store, the ledger
  and the log), is closed as soon as it is accepted, so the process never runs out of descriptors
  and a health check from elsewhere is still accepted;
- a connection that has not sent a whole request head within ``header_timeout_seconds`` of
  opening (or of its last response) is closed;
- at shutdown (SIGTERM) a request that arrives on a connection already open is answered 503
  ``ShuttingDown`` with ``Connection: close``, and an idle keep-alive connection stays open for
  ``DRAIN_SECONDS`` (at most the shutdown grace) before it is closed: uvicorn closed idle
  connections at once, so a request the client had just sent on one was reset. The race is only
  moved, not gone: a request sent on an idle connection at the very moment it is closed (after
  the drain) still meets a closed socket; HTTP/1.1 cannot close an idle connection without that
  race, and a client should retry a request whose connection closed before any response.

The body's own deadline is the ASGI door's (``serving.door``): by then the request has a path
and a key to check. Closures are logged as one warning line per kind at most every 10 s, with
their counts (never an address's traffic, never a header).
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rag_engine.config import ServingLimitsConfig

log = logging.getLogger(__name__)

RESERVED_FDS = 64
"""Descriptors kept free of client connections: the store's and ledger's pools, logs, imports."""
LOG_EVERY_SECONDS = 10.0
DRAIN_SECONDS = 2.0
"""At shutdown, how long an idle keep-alive connection stays open to answer 503 to a request
already on its way (longer than a round trip; it delays the exit only while such a connection
is open)."""
SHUTTING_DOWN = json.dumps(
    {"error": "ShuttingDown", "detail": "the service is shutting down; retry on a new connection"}
).encode()


async def shutting_down(scope: Any, receive: Any, send: Any) -> None:
    """The ASGI answer to a request that arrives once shutdown has begun."""
    await send(
        {
            "type": "http.response.start",
            "status": 503,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(SHUTTING_DOWN)).encode()),
                (b"retry-after", b"1"),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": SHUTTING_DOWN})


def descriptor_budget(limits: ServingLimitsConfig) -> int:
    """Client connections the process may hold: ``max_connections``, at most the soft open-file
    limit less ``RESERVED_FDS`` and two per engine worker."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return limits.max_connections
    return max(8, min(limits.max_connections, soft - RESERVED_FDS - 2 * limits.workers))


@dataclass
class ConnectionGuard:
    """Open connections per client address and in total (the event loop's thread only)."""

    per_address: int
    total: int
    open: Counter[str] = field(default_factory=Counter)
    count: int = 0
    _closed: Counter[str] = field(default_factory=Counter)
    _logged_at: float = 0.0

    def admit(self, address: str) -> bool:
        if self.count >= self.total:
            self.closed("over the total connection cap (serving.limits.max_connections)")
            return False
        if self.open[address] >= self.per_address:
            self.closed("over the per-address connection cap (serving.limits.connections_per_address)")
            return False
        self.open[address] += 1
        self.count += 1
        return True

    def release(self, address: str) -> None:
        self.count -= 1
        self.open[address] -= 1
        if self.open[address] <= 0:
            del self.open[address]

    def closed(self, why: str) -> None:
        """Count one closure; log the counts at most every ``LOG_EVERY_SECONDS``."""
        self._closed[why] += 1
        now = time.monotonic()
        if now - self._logged_at >= LOG_EVERY_SECONDS:
            self._logged_at = now
            for reason, n in sorted(self._closed.items()):
                log.warning("closed %d connection(s): %s", n, reason)
            self._closed.clear()


def guarded_protocol(
    base: type[asyncio.Protocol], guard: ConnectionGuard, header_timeout: float, drain: float = DRAIN_SECONDS
) -> type[Any]:
    """``base`` (a uvicorn HTTP protocol class) under ``guard``, a request-head deadline and the
    shutdown drain (``drain`` seconds)."""

    class Guarded(base):  # type: ignore[valid-type,misc]
        _address: str | None = None
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            peer = transport.get_extra_info("peername")
            address = str(peer[0]) if isinstance(peer, tuple) and peer else "unknown"
            if not guard.admit(address):
                transport.abort()
                return
            self._address = address
            super().connection_made(transport)
            self._arm_head_deadline()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._address is None:  # refused at the door: uvicorn never saw it
                return
            guard.release(self._address)
            self._address = None
            if self._head_timer is not None:
                self._head_timer.cancel()
            super().connection_lost(exc)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm_head_deadline()

        def shutdown(self) -> None:
            """uvicorn's graceful shutdown: from now on every request is answered 503 (and its
            connection closed); an idle connection is closed after the drain, not at once."""
            self.app = shutting_down
            if self.cycle is None or self.cycle.response_complete:
                self.loop.call_later(drain, self._drained)
            else:
                super().shutdown()  # in flight: answered, then closed

        def _drained(self) -> None:
            if not self.transport.is_closing() and (self.cycle is None or self.cycle.response_complete):
                super().shutdown()

        def _arm_head_deadline(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
            self._head_timer = self.loop.call_later(header_timeout, self._head_expired, self.cycle)

        def _head_expired(self, armed: Any) -> None:
            self._head_timer = None
            waiting = self.cycle is armed and (armed is None or armed.response_complete)
            if waiting and not self.transport.is_closing():
                guard.closed(f"no request head within {header_timeout:g} s (serving.limits.header_timeout_seconds)")
                self.transport.close()

    Guarded.__name__ = f"Guarded{base.__name__}"
    return Guarded
