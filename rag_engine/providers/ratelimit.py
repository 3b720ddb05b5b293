"""Client-side rate limiting: token buckets for requests/min and tokens/min.

Waiting before a call is cheaper than collecting 429s and backing off: the provider's limits
are known from config, so we stay under them instead of discovering them. Buckets are per
provider and shared by every client of that provider in the process; the clock and the sleep
are injectable so tests run in virtual time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from rag_engine.config import ProviderConfig, RateLimitConfig
from rag_engine.text.token_count import estimated_tokens

Clock = Callable[[], float]
Sleep = Callable[[float], None]


class TokenBucket:
    """``capacity`` units, refilled continuously at ``capacity`` per ``period_s``."""

    def __init__(self, capacity: int, period_s: float = 60.0, *, clock: Clock = time.monotonic):
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.capacity = float(capacity)
        self.rate = capacity / period_s
        self._clock = clock
        self._level = float(capacity)
        self._stamp = clock()

    def _refill(self) -> None:
        now = self._clock()
        self._level = min(self.capacity, self._level + (now - self._stamp) * self.rate)
        self._stamp = now

    def wait_time(self, amount: float) -> float:
        """Seconds until ``amount`` can be taken (0 if now). Caller holds the limiter lock."""
        self._refill()
        amount = min(amount, self.capacity)  # a request larger than the bucket waits for a full bucket
        return 0.0 if self._level >= amount else (amount - self._level) / self.rate

    def take(self, amount: float) -> None:
        self._refill()
        self._level -= min(amount, self.capacity)

    def adjust(self, delta: float) -> None:
        """Correct an estimate after the fact; the level may go negative (debt is paid by waiting)."""
        self._refill()
        self._level = min(self.capacity, self._level - delta)

    @property
    def level(self) -> float:
        self._refill()
        return self._level


class RateLimiter:
    """Requests-per-minute and tokens-per-minute buckets; either may be absent (unlimited)."""

    def __init__(
        self,
        requests_per_minute: int | None = None,
        tokens_per_minute: int | None = None,
        *,
        clock: Clock = time.monotonic,
        sleep: Sleep = time.sleep,
    ):
        self._lock = threading.Lock()
        self._sleep = sleep
        self.requests = TokenBucket(requests_per_minute, clock=clock) if requests_per_minute else None
        self.tokens = TokenBucket(tokens_per_minute, clock=clock) if tokens_per_minute else None

    @classmethod
    def from_config(cls, cfg: RateLimitConfig, **kwargs: object) -> RateLimiter:
        return cls(cfg.requests_per_minute, cfg.tokens_per_minute, **kwargs)  # type: ignore[arg-type]

    @property
    def unlimited(self) -> bool:
        return self.requests is None and self.tokens is None

    def acquire(self, tokens: int = 0) -> float:
        """Block until one request and ``tokens`` tokens are available; returns seconds waited."""
        if self.unlimited:
            return 0.0
        waited = 0.0
        while True:
            with self._lock:
                wait = max(
                    self.requests.wait_time(1) if self.requests else 0.0,
                    self.tokens.wait_time(tokens) if self.tokens and tokens else 0.0,
                )
                if wait <= 0:
                    if self.requests:
                        self.requests.take(1)
                    if self.tokens and tokens:
                        self.tokens.take(tokens)
                    return waited
            # Sleep outside the lock so other threads can re-check; loop because they may win.
            self._sleep(wait)
            waited += wait

    def settle(self, estimated_tokens: int, actual_tokens: int) -> None:
        """After a call, charge the difference between the estimate and what the provider reported."""
        if self.tokens is not None and actual_tokens != estimated_tokens:
            with self._lock:
                self.tokens.adjust(actual_tokens - estimated_tokens)


def estimate_tokens(texts: list[str], max_output_tokens: int | None = None) -> int:
    """Rough pre-call estimate (``text.token_count``: characters / 4, rounded up) plus the output
    the call may produce."""
    return estimated_tokens(sum(len(t) for t in texts)) + (max_output_tokens or 0)


_shared: dict[tuple[str, int | None, int | None], RateLimiter] = {}
_shared_lock = threading.Lock()


def limiter_for(provider: ProviderConfig) -> RateLimiter:
    """The process-wide limiter of one provider: limits apply to the account, not to one client."""
    key = (provider.name, provider.rate_limit.requests_per_minute, provider.rate_limit.tokens_per_minute)
    with _shared_lock:
        if key not in _shared:
            _shared[key] = RateLimiter.from_config(provider.rate_limit)
        return _shared[key]
