"""Client-side token buckets, in virtual time (the clock is injected, not patched)."""

from __future__ import annotations

import threading

import pytest

from rag_engine.providers.ratelimit import RateLimiter, TokenBucket, estimate_tokens, limiter_for
from tests.support.fake_openai import FakeOpenAI


class VirtualClock:
    """Time that only moves when someone sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self.now

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.sleeps.append(seconds)
            self.now += seconds


def test_requests_per_minute_blocks_the_request_over_the_limit() -> None:
    clock = VirtualClock()
    limiter = RateLimiter(requests_per_minute=60, clock=clock, sleep=clock.sleep)
    for _ in range(60):
        assert limiter.acquire() == 0.0
    assert clock.sleeps == []
    waited = limiter.acquire()
    assert waited == pytest.approx(1.0)  # 60/min refills one request per second
    assert sum(clock.sleeps) == pytest.approx(1.0)


def test_tokens_per_minute_waits_for_enough_tokens() -> None:
    clock = VirtualClock()
    limiter = RateLimiter(tokens_per_minute=6000, clock=clock, sleep=clock.sleep)
    limiter.acquire(6000)
    waited = limiter.acquire(1000)  # 100 tokens/s
    assert waited == pytest.approx(10.0)


def test_request_larger_than_the_bucket_waits_for_a_full_bucket_instead_of_forever() -> None:
    clock = VirtualClock()
    limiter = RateLimiter(tokens_per_minute=600, clock=clock, sleep=clock.sleep)
    limiter.acquire(100)
    assert limiter.acquire(10_000) == pytest.approx(10.0)  # refills the 100 taken at 10/s


def test_settle_charges_what_the_provider_reported() -> None:
    clock = VirtualClock()
    limiter = RateLimiter(tokens_per_minute=600, clock=clock, sleep=clock.sleep)
    limiter.acquire(100)
    limiter.settle(estimated_tokens=100, actual_tokens=700)  # 600 more than estimated: bucket in debt
    assert limiter.tokens.level == pytest.approx(-100)  # 600 - 100 - 600
    assert limiter.acquire(1) == pytest.approx(10.1)  # 101 tokens at 10/s


def test_unlimited_never_waits() -> None:
    clock = VirtualClock()
    limiter = RateLimiter(clock=clock, sleep=clock.sleep)
    for _ in range(10_000):
        limiter.acquire(1_000_000)
    assert clock.sleeps == []


def test_bucket_is_thread_safe() -> None:
    clock = VirtualClock()
    limiter = RateLimiter(requests_per_minute=800, clock=clock, sleep=clock.sleep)
    barrier = threading.Barrier(8)

    def worker() -> None:
        barrier.wait()
        for _ in range(100):
            limiter.acquire()

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert clock.sleeps == []  # exactly the capacity was taken, never more
    assert limiter.requests.level == pytest.approx(0.0)
    limiter.acquire()
    assert clock.sleeps and sum(clock.sleeps) == pytest.approx(60 / 800)


def test_bucket_rejects_empty_capacity() -> None:
    with pytest.raises(ValueError, match="capacity must be >= 1"):
        TokenBucket(0)


def test_estimate_counts_text_and_expected_output() -> None:
    assert estimate_tokens(["abcd" * 10], 50) == 60


def test_limiter_is_shared_per_provider(make_spec) -> None:
    a = make_spec(endpoint="http://127.0.0.1:1/v1", rate_limit={"requests_per_minute": 10})
    b = make_spec(endpoint="http://127.0.0.1:2/v1", rate_limit={"requests_per_minute": 10})
    assert limiter_for(a.provider) is limiter_for(b.provider)


def test_client_waits_on_its_limiter_before_calling(make_client, server: FakeOpenAI) -> None:
    clock = VirtualClock()
    client = make_client(limiter=RateLimiter(requests_per_minute=2, clock=clock, sleep=clock.sleep))
    for _ in range(3):
        client.generate([{"role": "user", "content": "hi"}], purpose="t")
    assert len(server.calls("/chat/completions")) == 3
    assert sum(clock.sleeps) == pytest.approx(30.0)  # third request waited for a refill (2/min)
