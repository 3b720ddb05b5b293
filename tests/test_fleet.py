"""The query service as a fleet on this machine: Debian's HAProxy in front of two `rag serve`
replicas on loopback, one Neo4j (the test store), the shared Redis limiter and one PostgreSQL
records database, with a real Prometheus scraping both replicas. One bounded run (`make test-fleet`):

1. **Rate across replicas**: one principal's sequential requests through the balancer (alternating
   replicas) are admitted up to its burst plus what its rate refills, once for the fleet, not twice.
2. **Concurrency across replicas**: a principal's simultaneous requests, spread over both replicas,
   run at most ``concurrent_per_principal`` at once fleet-wide; the others are 429 saying so.
3. **Throughput** with two replicas, then a replica killed (SIGKILL) mid-run: callers in flight on it
   fail cleanly (HAProxy's 502, or the connection closed before any response byte; never a hang),
   its health check fails and HAProxy drains it, and the rest is served by one replica: throughput
   with one replica, the load average beside each figure.
4. **Audit against responses**: every 2xx retrieve has its ``query`` audit record in PostgreSQL, every
   429 its ``request_refused`` record; records without a response only for calls lost with the replica.
5. A PromQL query over both replicas' ``rag_http_requests_total`` (the killed one's last scrape kept
   by ``max_over_time``).

The figures are printed and, with ``$RAG_FLEET_REPORT`` set, written there as JSON (docs/deployment.md).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from rag_engine.governance.audit import AuditTrail
from tests.serving_support import bearer, free_port
from tests.support import serve_config
from tests.support.fleet import Load, Outcome, fleet_config, haproxy, replicas, run_load
from tests.test_serving_metrics import _prometheus
from tests.test_serving_shared_limits import redis_url  # noqa: F401 - a fixture

LIMITS = {"requests_per_minute": 60, "burst": 5, "concurrent_per_principal": 2, "shutdown_grace_seconds": 5}
CLIENTS = 4
THROUGHPUT_SECONDS = 8.0
KILL_SECONDS = 14.0
KILL_AT = 3.0


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def _rate_phase(url: str, key: str) -> dict[str, Any]:
    """Sequential cheap calls (a passage lookup: 404 when admitted) by one principal, as fast as
    they come back, until 16 are answered."""
    began, statuses, details = time.monotonic(), [], []
    with httpx.Client(timeout=30) as http:
        for _ in range(16):
            r = http.post(f"{url}/v1/passage", json={"chunk_id": "none"}, headers=bearer(key))
            statuses.append(r.status_code)
            if r.status_code == 429:
                details.append(r.json()["detail"])
    elapsed = time.monotonic() - began
    admitted = statuses.count(404)
    allowed = LIMITS["burst"] + math.ceil(elapsed * LIMITS["requests_per_minute"] / 60) + 1
    assert admitted + statuses.count(429) == 16, statuses
    assert statuses.count(429) >= 1 and admitted <= allowed, (statuses, elapsed)
    assert all("across the service's replicas" in d for d in details), details
    return {
        "requests": 16,
        "admitted": admitted,
        "429": statuses.count(429),
        "seconds": round(elapsed, 2),
        "fleet_allows": allowed,
        "two_unshared_buckets_allow": 2 * allowed - 1,
        "load": _load(),
    }


def _concurrency_phase(url: str, keys: list[str]) -> dict[str, Any]:
    """Rounds of six simultaneous retrieves by one principal (a fresh one per round, so its rate
    bucket holds five): at most ``concurrent_per_principal`` run at once across the replicas."""
    cap, rounds = LIMITS["concurrent_per_principal"], []
    refusals: list[str] = []
    for key in keys:
        barrier, got = threading.Barrier(6), []

        def call(key: str = key, barrier: threading.Barrier = barrier, got: list = got) -> None:
            barrier.wait(timeout=30)
            r = httpx.post(
                f"{url}/v1/retrieve",
                json={"question": "Who locks a lost laptop?", "k": 3},
                headers=bearer(key),
                timeout=30,
            )
            got.append((r.status_code, r.json().get("detail", "") if r.status_code == 429 else ""))

        threads = [threading.Thread(target=call) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        rounds.append(Counter(s for s, _ in got))
        refusals += [d for s, d in got if s == 429 and "running" in d]
    assert refusals, rounds
    # each concurrency refusal counted the principal's requests running on every replica: the cap
    assert all(f"has {cap} requests running across the service's replicas" in d for d in refusals), refusals
    return {
        "rounds": len(rounds),
        "simultaneous": 6,
        "cap": cap,
        "2xx": sum(c[200] for c in rounds),
        "429_concurrency": len(refusals),
        "429": sum(c[429] for c in rounds),
        "load": _load(),
    }


def clean_failure(o: Outcome) -> bool:
    return o.status in (502, 503) or (o.status == 0 and o.detail == "RemoteProtocolError")


def _summary(outcomes: list[Outcome], seconds: float) -> dict[str, Any]:
    ok = sorted(o.ended - o.started for o in outcomes if o.status == 200)
    pct = lambda q: round(ok[min(len(ok) - 1, int(q * len(ok)))] * 1000) if ok else None  # noqa: E731
    return {
        "requests": len(outcomes),
        "2xx": len(ok),
        "per_second": round(len(ok) / seconds, 2) if seconds else 0,
        "p50_ms": pct(0.5),
        "p95_ms": pct(0.95),
        "by_status": dict(sorted(Counter(str(o.status) for o in outcomes).items())),
    }


def _prometheus_over(tmp_path: Path, targets: list[str]) -> subprocess.Popen[bytes] | None:
    try:
        binary = _prometheus()
    except pytest.skip.Exception:
        return None
    key_file = tmp_path / "scrape.key"
    key_file.write_text(serve_config.SCRAPER_KEY, encoding="utf-8")
    key_file.chmod(0o600)
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [
            {
                "job_name": "rag-fleet",
                "metrics_path": "/metrics",
                "authorization": {"type": "Bearer", "credentials_file": str(key_file)},
                "static_configs": [{"targets": targets}],
            }
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    port = free_port()
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'prom-data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=(tmp_path / "prometheus.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    proc.port = port  # type: ignore[attr-defined]
    return proc


PROMQL = 'sum by (instance, status) (max_over_time(rag_http_requests_total{route="/v1/retrieve"}[10m]))'


def _promql(proc: subprocess.Popen[bytes]) -> list[dict[str, Any]]:
    port = proc.port  # type: ignore[attr-defined]
    time.sleep(2)  # one more scrape of the live replica
    r = httpx.get(f"http://127.0.0.1:{port}/api/v1/query", params={"query": PROMQL}, timeout=10)
    r.raise_for_status()
    return [{**row["metric"], "value": float(row["value"][1])} for row in r.json()["data"]["result"]]


def test_a_fleet_behind_haproxy_holds_limits_survives_a_killed_replica_and_loses_no_audit_record(
    tmp_path,
    fresh_pg_url: str,
    redis_url,  # noqa: F811 - the imported fixture
):
    fleet = fleet_config(tmp_path / "engine.yaml", LIMITS)
    env = {"RAG_LEDGER_URL": fresh_pg_url, "RAG_LIMITS_REDIS_URL": redis_url}
    report: dict[str, Any] = {"limits": LIMITS, "clients": CLIENTS, "cpus": os.cpu_count()}
    started = time.monotonic()
    prom = None
    with replicas(tmp_path, fleet, env, 2) as (first, second), haproxy(tmp_path, [first, second]) as lb:
        report["startup_seconds"] = round(time.monotonic() - started, 1)
        prom = _prometheus_over(tmp_path, [f"127.0.0.1:{first.port}", f"127.0.0.1:{second.port}"])
        try:
            names = list(fleet.keys)
            report["rate"] = _rate_phase(lb.url, serve_config.THROTTLED_KEY)
            report["concurrency"] = _concurrency_phase(lb.url, [fleet.keys[n] for n in names[-3:]])
            keys = {n: fleet.keys[n] for n in names[:-3]}  # rotated: no principal near its rate
            # warm both replicas' embedding caches and pools, then two replicas under load
            warm = run_load(lb.url, keys, clients=CLIENTS, seconds=2)
            two = run_load(lb.url, keys, clients=CLIENTS, seconds=THROUGHPUT_SECONDS)
            report["two_replicas"] = {**_summary(two.outcomes, THROUGHPUT_SECONDS), "load": _load()}
            # a replica killed mid-run: when HAProxy takes it out, and what callers saw
            marks: dict[str, float] = {}

            def kill_and_watch(elapsed: float) -> None:
                if "killed" not in marks and elapsed >= KILL_AT:
                    second.proc.send_signal(signal.SIGKILL)
                    marks["killed"] = time.monotonic()
                elif "killed" in marks and "down" not in marks and lb.states().get(second.name) == "DOWN":
                    marks["down"] = time.monotonic()

            killed = run_load(lb.url, keys, clients=CLIENTS, seconds=KILL_SECONDS, during=kill_and_watch)
            assert "down" in marks, f"HAProxy never took the killed replica out: {lb.states()}"
            after_down = killed.between(marks["down"] + 0.5, math.inf)
            window = max(o.ended for o in after_down) - (marks["down"] + 0.5)
            failed = [o for o in killed.outcomes if o.status not in (200, 429)]
            report["kill"] = {
                "signal": "SIGKILL",
                "drained_after_seconds": round(marks["down"] - marks["killed"], 2),
                **_summary(killed.outcomes, KILL_SECONDS),
                "failed": [{"status": o.status, "detail": o.detail[:80]} for o in failed],
                "load": _load(),
            }
            report["one_replica"] = {**_summary(after_down, window), "load": _load()}
            # callers in flight on the killed replica failed cleanly (HAProxy's 502, or the connection
            # closed before any byte of a response: a caller retries either), nothing else failed
            assert all(clean_failure(o) and o.started < marks["down"] for o in failed), failed
            assert len(failed) <= CLIENTS, failed
            assert not [o for o in after_down if o.status != 200], Counter(o.status for o in after_down)
            assert lb.states()[first.name] == "UP"
            if prom is not None:
                report["promql"] = {"query": PROMQL, "result": _promql(prom)}
        finally:
            if prom is not None:
                prom.terminate()
                prom.wait(timeout=20)
    report["audit"] = _audit_against_responses(fresh_pg_url, fleet.keys, [warm, two, killed], report)
    report["seconds"] = round(time.monotonic() - started, 1)
    print(json.dumps(report, indent=1))
    if os.environ.get("RAG_FLEET_REPORT"):
        Path(os.environ["RAG_FLEET_REPORT"]).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    if prom is not None:
        rows = report["promql"]["result"]
        assert len({r["instance"] for r in rows}) == 2, rows  # the killed replica's series included
        seen_ok = sum(r["value"] for r in rows if r["status"] == "200")
        assert 0 < seen_ok <= report["audit"]["query_records"], (rows, report["audit"])


def _audit_against_responses(
    url: str, keys: dict[str, str], loads: list[Load], report: dict[str, Any]
) -> dict[str, Any]:
    """Every 2xx retrieve of the fleet principals has its ``query`` record; every 429 its refusal."""
    trail = AuditTrail(url)
    try:
        records = [r for r in trail.records() if r.actor in keys]
    finally:
        trail.dispose()
    queries = sum(1 for r in records if r.event == "query")
    refusals = sum(1 for r in records if r.event == "request_refused" and r.payload.get("status") == 429)
    ok = report["concurrency"]["2xx"] + sum(1 for load in loads for o in load.outcomes if o.status == 200)
    too_many = report["concurrency"]["429"] + sum(1 for load in loads for o in load.outcomes if o.status == 429)
    lost = len(report["kill"]["failed"])
    counts = {"2xx": ok, "query_records": queries, "429": too_many, "refusal_records": refusals, "lost_in_flight": lost}
    # none missing; a record without its response only for a call lost with the killed replica
    assert ok <= queries <= ok + lost and too_many <= refusals <= too_many + lost, counts
    return counts
