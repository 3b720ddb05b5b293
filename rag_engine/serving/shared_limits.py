"""Per-principal limits every replica of the query service shares, in Redis.

Behind a load balancer, N replicas with the in-process ``Limiter`` give a principal N times its
rate and N times its concurrency cap. With ``$RAG_LIMITS_REDIS_URL`` set (the variable named by
``serving.limits.shared_url_env``), each replica admits a request through one Lua script run
atomically by Redis: the principal's token bucket (``requests_per_minute``, ``burst``, refilled on
Redis' own clock, so replicas' clocks never disagree) and its running requests (a sorted set of
leases, each expiring ``request_timeout_seconds`` plus a minute after it began, so the slots of a
replica killed mid-request come back by themselves). The answers are the in-process limiter's:
429 with ``Retry-After``.

Why Redis and not PostgreSQL: an admission is one round trip on every request, a few hundred
microseconds on a local network, with no row locks or vacuum under a hot principal; Redis' single
threaded scripts make the check-and-take atomic without a transaction.

When Redis cannot be reached (a stated policy: the service stays up, limits stay finite): the
replica falls back to its in-process limiter, so each principal still meets its limits on every
replica (at most N times them across the fleet, never unlimited), logs one warning, counts
``rag_limiter_fallbacks_total`` and tries Redis again after ``RETRY_SECONDS``. A replica never
blocks its event loop on a dead Redis for longer than ``TIMEOUT_SECONDS``.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from prometheus_client import Counter

from rag_engine.config import ServingLimitsConfig
from rag_engine.errors import RateLimited
from rag_engine.serving.limits import Limiter
from rag_engine.serving.metrics import REGISTRY

log = logging.getLogger(__name__)

TIMEOUT_SECONDS = 0.25
RETRY_SECONDS = 5.0
LEASE_SLACK_SECONDS = 60
PREFIX = "rag:limits:"

FALLBACKS = Counter(
    "rag_limiter_fallbacks",
    "Admissions decided by the replica's own limiter because the shared store did not answer",
    registry=REGISTRY,
)

ADMIT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local rate, burst, cap = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local lease, token = tonumber(ARGV[4]), ARGV[5]
local b = redis.call('HMGET', KEYS[1], 'tokens', 'stamp')
local tokens = tonumber(b[1]) or burst
local stamp = tonumber(b[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - stamp) * rate)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local running = redis.call('ZCARD', KEYS[2])
local verdict, detail = 0, '0'
if running >= cap then
  verdict, detail = 1, tostring(running)
elseif tokens < 1 then
  verdict, detail = 2, tostring((1 - tokens) / rate)
else
  tokens = tokens - 1
  redis.call('ZADD', KEYS[2], now + lease, token)
  redis.call('EXPIRE', KEYS[2], math.ceil(lease) + 1)
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'stamp', tostring(now))
redis.call('EXPIRE', KEYS[1], math.ceil(burst / rate) + 60)
return {verdict, detail}
"""


class SharedLimiter(Limiter):
    """``Limiter``'s contract over Redis; the inherited in-process buckets are the fallback."""

    def __init__(self, limits: ServingLimitsConfig, url: str):
        super().__init__(limits)
        import redis

        self._redis: Any = redis.Redis.from_url(
            url, socket_timeout=TIMEOUT_SECONDS, socket_connect_timeout=TIMEOUT_SECONDS, decode_responses=True
        )
        self._script = self._redis.register_script(ADMIT)
        self._errors: tuple[type[BaseException], ...] = (redis.RedisError, OSError)
        self._down_until = 0.0
        self._state = threading.Lock()

    def _shared(self, principal: str, token: str) -> tuple[int, str] | None:
        """Redis' verdict (0 admitted, 1 over concurrency, 2 over rate) or None: not reachable."""
        with self._state:
            if time.monotonic() < self._down_until:
                return None
        lease = self.limits.request_timeout_seconds + LEASE_SLACK_SECONDS
        args = (self.limits.requests_per_minute / 60.0, self.limits.burst, self.limits.concurrent_per_principal)
        try:
            verdict, detail = self._script(
                keys=[f"{PREFIX}bucket:{principal}", f"{PREFIX}running:{principal}"], args=[*args, lease, token]
            )
        except self._errors as exc:
            with self._state:
                self._down_until = time.monotonic() + RETRY_SECONDS
            log.warning(
                "shared limits store not answering (%s): this replica's own limits apply for %g s",
                type(exc).__name__,
                RETRY_SECONDS,
            )
            return None
        return int(verdict), str(detail)

    def _release(self, principal: str, token: str) -> None:
        try:
            self._redis.zrem(f"{PREFIX}running:{principal}", token)
        except self._errors as exc:  # the lease expires by itself
            log.warning("could not release a shared concurrency slot (%s)", type(exc).__name__)

    @contextmanager
    def admit(self, principal: str) -> Iterator[None]:
        token = uuid.uuid4().hex
        found = self._shared(principal, token)
        if found is None:
            FALLBACKS.inc()
            with super().admit(principal):
                yield
            return
        verdict, detail = found
        if verdict == 1:
            raise RateLimited(
                f"principal {principal} has {detail} requests running across the service's replicas "
                f"(serving.limits.concurrent_per_principal: {self.limits.concurrent_per_principal})",
                retry_after=1,
            )
        if verdict == 2:
            raise RateLimited(
                f"principal {principal} is over {self.limits.requests_per_minute} requests per minute "
                f"across the service's replicas (serving.limits.requests_per_minute)",
                retry_after=max(1, math.ceil(float(detail))),
            )
        try:
            yield
        finally:
            self._release(principal, token)


def limiter_for(limits: ServingLimitsConfig, env: Mapping[str, str]) -> Limiter:
    """The shared limiter when ``$<serving.limits.shared_url_env>`` names a Redis, else the in-process one."""
    url = env.get(limits.shared_url_env) if limits.shared_url_env else None
    return SharedLimiter(limits, url) if url else Limiter(limits)
