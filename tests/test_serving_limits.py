"""The service's limits on loopback: 429 with Retry-After over a principal's rate, 413 for a body
over the limit before it is parsed, one-line 422 for a malformed request, 504 past the timeout
with the pool freed afterwards; the token bucket and the concurrency cap by an injected clock."""

from __future__ import annotations

import time

import httpx
import pytest

from rag_engine.config import ServingLimitsConfig
from rag_engine.errors import RateLimited
from rag_engine.serving.limits import Limiter
from tests.serving_support import ANALYST_KEY, APP_KEY, bearer, service_over

QUESTION = {"question": "How fast must a lost laptop be reported?"}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_principal_gets_its_burst_then_waits_for_its_rate_and_others_are_not_held_back():
    clock = Clock()
    limiter = Limiter(ServingLimitsConfig(requests_per_minute=30, burst=2), clock=clock)
    for _ in range(2):
        with limiter.admit("a"):
            pass
    with pytest.raises(RateLimited) as refused, limiter.admit("a"):
        pass
    assert refused.value.retry_after == 2  # 30 per minute: one token every 2 s
    with limiter.admit("b"):  # another principal has its own bucket
        pass
    clock.now += 2.0
    with limiter.admit("a"):
        pass


def test_a_principal_over_its_concurrency_cap_is_refused_until_one_finishes():
    limiter = Limiter(ServingLimitsConfig(concurrent_per_principal=1), clock=Clock())
    with limiter.admit("a"):
        with pytest.raises(RateLimited, match="1 requests running") as refused, limiter.admit("a"):
            pass
        assert refused.value.retry_after == 1
        with limiter.admit("b"):
            pass
    with limiter.admit("a"):
        pass


@pytest.fixture
def limited(variant, unique, tmp_path, monkeypatch):
    limits = {"requests_per_minute": 6, "burst": 2, "max_body_bytes": 1024}
    with service_over(variant, unique, tmp_path, monkeypatch, limits) as served:
        yield served


def test_over_the_rate_is_429_with_retry_after_and_a_body_over_the_limit_is_413(limited):
    url, _, _ = limited
    codes = [
        httpx.post(f"{url}/v1/retrieve", json=QUESTION, headers=bearer(APP_KEY), timeout=60).status_code
        for _ in range(3)
    ]
    assert codes == [200, 200, 429]
    r = httpx.post(f"{url}/v1/retrieve", json=QUESTION, headers=bearer(APP_KEY), timeout=60)
    assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
    assert r.json()["error"] == "RateLimited" and "\n" not in r.json()["detail"]
    # the analyst's own bucket is untouched
    assert httpx.post(f"{url}/v1/retrieve", json=QUESTION, headers=bearer(ANALYST_KEY), timeout=60).is_success
    big = {"question": "x" * 2000}
    r = httpx.post(f"{url}/v1/retrieve", json=big, headers=bearer(ANALYST_KEY), timeout=60)
    assert r.status_code == 413 and r.json()["error"] == "RequestTooLarge", r.text
    # a chunked body (no Content-Length) is counted as it streams in
    r = httpx.post(
        f"{url}/v1/retrieve",
        content=iter([b'{"question": "', b"y" * 2000, b'"}']),
        headers={**bearer(ANALYST_KEY), "Content-Type": "application/json"},
        timeout=60,
    )
    assert r.status_code == 413, r.text


def test_a_malformed_request_is_one_line_422_and_bad_input_one_line_400(variant, unique, tmp_path, monkeypatch):
    with service_over(variant, unique, tmp_path, monkeypatch) as (url, _, _):
        r = httpx.post(f"{url}/v1/retrieve", json={"question": "q", "k": 0}, headers=bearer(APP_KEY), timeout=60)
        assert r.status_code == 422, r.text
        assert r.json() == {"error": "InvalidRequest", "detail": "k: Input should be greater than or equal to 1"}
        r = httpx.post(f"{url}/v1/retrieve", json={"question": "q", "colour": 1}, headers=bearer(APP_KEY), timeout=60)
        assert r.status_code == 422 and "colour" in r.json()["detail"]
        r = httpx.post(f"{url}/v1/retrieve", json={"question": "q", "k": 10_000}, headers=bearer(APP_KEY), timeout=60)
        assert r.status_code == 400 and r.json()["error"] == "QueryInputError", r.text


def test_a_request_past_its_timeout_is_504_and_its_worker_is_freed(variant, unique, tmp_path, monkeypatch):
    limits = {"request_timeout_seconds": 0.001, "workers": 2}
    with service_over(variant, unique, tmp_path, monkeypatch, limits) as (url, _, _):
        r = httpx.post(f"{url}/v1/retrieve", json=QUESTION, headers=bearer(APP_KEY), timeout=60)
        assert r.status_code == 504 and r.json()["error"] == "RequestTimeout", r.text
        deadline = time.monotonic() + 30
        while httpx.get(f"{url}/v1/health", timeout=30).json()["workers_busy"]:
            assert time.monotonic() < deadline, "the timed-out call never gave its worker back"
            time.sleep(0.1)


def test_unparseable_bodies_and_loose_types_get_the_one_line_error_shape(variant, unique, tmp_path, monkeypatch):
    """Invalid UTF-8 and JSON nested 5,000 deep: ``{"error", "detail"}`` like every other refusal,
    never FastAPI's ``{"detail"}``; ``"k": true`` and ``"k": "5"`` are refused, not read as 1 and 5."""
    headers = {**bearer(APP_KEY), "Content-Type": "application/json"}
    with service_over(variant, unique, tmp_path, monkeypatch) as (url, _, _):
        bodies = [b'{"question": "\xff\xfe"}', b'{"question": "q", "k": ' + b"[" * 5000 + b"]" * 5000 + b"}"]
        for content in bodies:
            r = httpx.post(f"{url}/v1/retrieve", content=content, headers=headers, timeout=60)
            assert 400 <= r.status_code < 500 and set(r.json()) == {"error", "detail"}, r.text
            assert "\n" not in r.json()["detail"]
        for loose in (True, "5", 2.0):
            r = httpx.post(
                f"{url}/v1/retrieve", json={"question": "q", "k": loose}, headers=bearer(APP_KEY), timeout=60
            )
            assert r.status_code == 422 and r.json()["error"] == "InvalidRequest", (loose, r.text)
        r = httpx.post(f"{url}/v1/query", json={"question": "q", "generate": "no"}, headers=bearer(APP_KEY), timeout=60)
        assert r.status_code == 422, r.text
        r = httpx.get(f"{url}/v1/no-such-route", headers=bearer(APP_KEY), timeout=60)
        assert r.status_code == 404 and set(r.json()) == {"error", "detail"}, r.text
