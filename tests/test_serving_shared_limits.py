"""Per-principal limits shared by the service's replicas (``serving.shared_limits``) on a real
Redis (Debian's ``redis-server``, installed by .ci/run, on a free loopback port): a principal's
rate and concurrency held across two replicas instead of twice over, and the stated policy when
Redis stops (each replica falls back to its own limits, quickly, never unlimited).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import pytest

from rag_engine.config import ServingLimitsConfig
from rag_engine.errors import RateLimited
from rag_engine.serving.app import create_app
from rag_engine.serving.limits import Limiter
from rag_engine.serving.metrics import REGISTRY
from rag_engine.serving.shared_limits import SharedLimiter, limiter_for
from tests.serving_support import APP_KEY, bearer, free_port, running, service_over
from tests.support.debian import debian_binary


def _redis_server() -> str:
    return debian_binary("redis-server")


@pytest.fixture
def redis_url(tmp_path) -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen(
        [_redis_server(), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    import redis

    client = redis.Redis(port=port, socket_timeout=1)
    deadline = time.monotonic() + 20
    while True:
        try:
            client.ping()
            break
        except redis.RedisError:
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.1)
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        client.close()
        process.terminate()
        process.wait(timeout=20)


def fallbacks() -> float:
    return REGISTRY.get_sample_value("rag_limiter_fallbacks_total") or 0.0


def admitted(limiter: Limiter, principal: str) -> bool:
    try:
        with limiter.admit(principal):
            return True
    except RateLimited:
        return False


def test_two_replicas_share_one_principal_s_rate_and_concurrency(redis_url):
    limits = ServingLimitsConfig(requests_per_minute=6, burst=3, concurrent_per_principal=2)
    replicas = [limiter_for(limits, {"RAG_LIMITS_REDIS_URL": redis_url}) for _ in range(2)]
    assert all(isinstance(r, SharedLimiter) for r in replicas)
    # rate: the burst of 3 is the fleet's, not each replica's (in-process limiters admit 6)
    shared = [admitted(replicas[i % 2], "p-rate") for i in range(6)]
    local = [Limiter(limits), Limiter(limits)]
    alone = [admitted(local[i % 2], "p-rate") for i in range(6)]
    assert shared.count(True) == 3 and shared[:3] == [True] * 3, shared
    assert alone.count(True) == 6, alone
    with pytest.raises(RateLimited, match="across the service's replicas") as over:
        replicas[1].admit("p-rate").__enter__()
    assert over.value.retry_after >= 1
    # concurrency: two running on replica A and B, a third on either is 429; one ends, one more runs
    roomy = ServingLimitsConfig(requests_per_minute=6000, burst=100, concurrent_per_principal=2)
    a, b = (SharedLimiter(roomy, redis_url) for _ in range(2))
    with ExitStack() as running_now:
        running_now.enter_context(a.admit("p-conc"))
        second = running_now.enter_context(ExitStack())
        second.enter_context(b.admit("p-conc"))
        assert not admitted(a, "p-conc") and not admitted(b, "p-conc")
        second.close()
        assert admitted(b, "p-conc")
    assert admitted(a, "p-conc") and admitted(b, "p-conc")


def test_a_replica_that_loses_redis_falls_back_to_its_own_limits_quickly(redis_url):
    limits = ServingLimitsConfig(requests_per_minute=6, burst=2, concurrent_per_principal=2)
    replica = SharedLimiter(limits, redis_url)
    assert admitted(replica, "p-down")
    import redis

    redis.Redis.from_url(redis_url).shutdown(nosave=True)
    before = fallbacks()
    started = time.monotonic()
    outcomes = [admitted(replica, "p-down") for _ in range(4)]
    taken = time.monotonic() - started
    assert outcomes == [True, True, False, False], outcomes  # its own bucket: burst 2, then 429
    assert fallbacks() - before == 4
    assert taken < 1.0, taken  # one timed-out try at most, then its own limits until the retry


def test_two_service_replicas_answer_429_for_the_fleet_s_burst_not_twice_over(
    variant, unique, tmp_path, monkeypatch, redis_url
):
    monkeypatch.setenv("RAG_LIMITS_REDIS_URL", redis_url)
    limits = {"requests_per_minute": 1, "burst": 4}  # no token comes back during the run
    with ExitStack() as stack:
        first, engine, _ = stack.enter_context(service_over(variant, unique, tmp_path, monkeypatch, limits))
        second = stack.enter_context(running(create_app(engine)))  # a second replica, the same store
        statuses = [
            httpx.post(
                f"{(first, second)[i % 2]}/v1/passage",
                json={"chunk_id": "none"},
                headers=bearer(APP_KEY),
                timeout=30,
            ).status_code
            for i in range(8)
        ]
    assert statuses.count(404) == 4 and statuses.count(429) == 4, statuses
