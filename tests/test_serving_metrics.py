"""The query service's ``GET /metrics`` (``serving.metrics``): who may read it, what it counts, and
a real Prometheus (Debian's ``prometheus``, installed by .ci/run) scraping the test service
`make test` starts on loopback, then answering a PromQL query over its HTTP API.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.serving_support import APP_KEY, OPERATOR_KEY, bearer, free_port, service_over
from tests.support.debian import debian_binary
from tests.support.processes import stop
from tests.support.serve_config import APP_KEY as SERVE_APP_KEY
from tests.support.serve_config import SCRAPER_KEY
from tests.support.tcp_proxy import TcpProxy

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(text: str) -> Samples:
    """Every sample of the exposition: (name, labels) -> value."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(found: Samples, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` whose labels include ``labels`` (0 when none)."""
    want = set(labels.items())
    return sum(v for (n, ls), v in found.items() if n == name and want <= ls)


def scrape(url: str, key: str) -> Samples:
    r = httpx.get(f"{url}/metrics", headers=bearer(key), timeout=30)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain"), r.headers
    assert "SENTINEL" not in r.text  # a key never becomes a label
    return samples(r.text)


@pytest.fixture(scope="module")
def serve_url() -> str:
    url = os.environ.get("RAG_SERVE_URL")
    if not url:
        pytest.fail("RAG_SERVE_URL is not set: these tests call the query service `make test` starts")
    httpx.get(f"{url}/v1/health", timeout=10).raise_for_status()
    return url


def test_metrics_need_an_operator_key_and_count_requests_by_route_status_and_principal(serve_url):
    assert httpx.get(f"{serve_url}/metrics", timeout=10).status_code == 401
    before = scrape(serve_url, SCRAPER_KEY)
    refused = httpx.get(f"{serve_url}/metrics", headers=bearer(SERVE_APP_KEY), timeout=10)
    assert refused.status_code == 403 and refused.json()["error"] == "Forbidden", refused.text
    for _ in range(3):
        assert httpx.get(f"{serve_url}/v1/collections", headers=bearer(SERVE_APP_KEY), timeout=10).status_code == 200
    assert httpx.get(f"{serve_url}/v1/collections", headers=bearer("not-a-key"), timeout=10).status_code == 401
    after = scrape(serve_url, SCRAPER_KEY)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    ok = {"route": "/v1/collections", "method": "GET", "status": "200", "principal": "svc-app"}
    assert delta("rag_http_requests_total", **ok) == 3
    assert delta("rag_http_requests_total", route="/v1/collections", status="401", principal="-") == 1
    assert delta("rag_http_requests_total", route="/metrics", status="403", principal="svc-app") == 1
    assert delta("rag_http_request_duration_seconds_count", route="/v1/collections") == 4
    assert value(after, "rag_http_requests_in_flight") >= 1  # the scrape itself is in flight
    assert value(after, "rag_engine_pool_workers") >= 1
    assert value(after, "process_resident_memory_bytes") > 0


def test_429_degraded_legs_and_model_calls_are_counted_in_process(variant, unique, tmp_path, monkeypatch):
    """A principal over its burst is ``status="429"`` under its name; with the embedder cut, each
    query's ``dense_degraded`` is counted, and the question's embedding calls by model and status."""
    embed = os.environ.get("RAG_EMBED_ENDPOINT")
    if not embed:
        pytest.fail("RAG_EMBED_ENDPOINT is not set: this test needs the embedding server `make test` starts")
    endpoint = urlparse(embed)
    limits = {"requests_per_minute": 60, "burst": 3}
    with TcpProxy(endpoint.hostname or "127.0.0.1", endpoint.port or 80) as proxy:
        monkeypatch.setenv("RAG_EMBED_ENDPOINT", f"http://127.0.0.1:{proxy.port}{endpoint.path}")
        with service_over(variant, unique, tmp_path, monkeypatch, limits, by_server=True) as (url, _engine, _):
            before = scrape(url, OPERATOR_KEY)
            question = {"question": "Who locks a lost laptop?"}
            first = httpx.post(f"{url}/v1/retrieve", json=question, headers=bearer(APP_KEY), timeout=60)
            assert first.status_code == 200, first.text
            proxy.cut()
            cut = httpx.post(f"{url}/v1/retrieve", json=question, headers=bearer(APP_KEY), timeout=60)
            assert cut.status_code == 200, cut.text
            assert any(e.get("event") == "dense_degraded" for e in cut.json()["events"]), cut.json()["events"]
            statuses = [
                httpx.post(f"{url}/v1/retrieve", json=question, headers=bearer(APP_KEY), timeout=60).status_code
                for _ in range(3)
            ]
            after = scrape(url, OPERATOR_KEY)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert 429 in statuses, statuses
    assert delta(
        "rag_http_requests_total", route="/v1/retrieve", status="429", principal="public-app"
    ) == statuses.count(429)
    assert delta("rag_query_events_total", event="dense_degraded") >= 1
    assert delta("rag_model_calls_total", status="ok") >= 1  # the first question's embedding
    assert delta("rag_model_calls_total", status="error") >= 1  # the cut embedder's
    priced_or_not = delta("rag_model_cost_usd_total") + delta("rag_model_unpriced_calls_total")
    assert priced_or_not >= 0 and {dict(ls).get("model") for n, ls in after if n == "rag_model_calls_total"} - {""}


def _prometheus() -> str:
    return debian_binary("prometheus")


def test_a_real_prometheus_scrapes_the_service_and_answers_a_promql_query(serve_url, tmp_path):
    binary = _prometheus()
    target = urlparse(serve_url)
    key_file = tmp_path / "scrape.key"
    key_file.write_text(SCRAPER_KEY, encoding="utf-8")
    key_file.chmod(0o600)
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [
            {
                "job_name": "rag-serve",
                "metrics_path": "/metrics",
                "authorization": {"type": "Bearer", "credentials_file": str(key_file)},
                "static_configs": [{"targets": [f"{target.hostname}:{target.port}"]}],
            }
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    for _ in range(2):
        assert httpx.get(f"{serve_url}/v1/collections", headers=bearer(SERVE_APP_KEY), timeout=10).status_code == 200
    port = free_port()
    log = (tmp_path / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    promql = 'sum(rag_http_requests_total{route="/v1/collections",status="200",principal="svc-app"})'
    result: list = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not result:
            time.sleep(1)
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/api/v1/query", params={"query": promql}, timeout=5)
            except httpx.TransportError:
                continue  # not listening yet
            if r.status_code == 200:
                result = r.json()["data"]["result"]
        targets = httpx.get(f"http://127.0.0.1:{port}/api/v1/targets", timeout=5).json()["data"]["activeTargets"]
    finally:
        stop(process, 20)
        log.close()
    shown = Path(tmp_path / "prometheus.log").read_text(errors="replace")[-2000:]
    assert result, f"no sample for {promql} within 60 s; targets: {targets}; log: {shown}"
    assert float(result[0]["value"][1]) >= 2, result
    assert [t["health"] for t in targets] == ["up"], targets
    assert SCRAPER_KEY not in shown
