"""What the fleet test (tests/test_fleet.py) runs: `rag serve` replicas on free loopback ports,
Debian's HAProxy in front of them with a health check on ``/v1/health``, and a bounded load
generator (a few client threads for a few seconds, loopback only, stopping by itself).

The replicas share the test Neo4j, one PostgreSQL records database and one Redis limiter. Their
config is the test service's (``tests.support.serve_config``) plus ``FLEET_PRINCIPALS`` principals
of the fleet's own, whose keys are made per run and reach the replicas only as SHA-256 digests.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.serving_support import free_port
from tests.support import serve_config
from tests.support.debian import debian_binary
from tests.support.processes import stop

FLEET_PRINCIPALS = 400
"""Principals the throughput and kill phases rotate through, so the limiter (one principal's rate)
is not what bounds the fleet's throughput: at 60 a minute with a burst of 5, 397 of them admit
about 397 x (5 + 24) = 11,500 requests over the 24 s of load, more than 2 cores serve (24 were
enough at load 25, 16 requests/s; on an idle machine the fleet outran them and got 429s)."""


def haproxy_binary() -> str:
    return debian_binary("haproxy")


@dataclass
class Fleet:
    """The replicas' config and the fleet principals' keys (id -> key)."""

    config: Path
    keys: dict[str, str]
    env: dict[str, str]


def fleet_config(out: Path, limits: dict[str, Any]) -> Fleet:
    """The test service's config with ``limits`` and FLEET_PRINCIPALS more principals (role public)."""
    serve_config.write(out, limits)
    cfg = yaml.safe_load(out.read_text(encoding="utf-8"))
    keys, env = {}, dict(serve_config.digest_env())
    for n in range(FLEET_PRINCIPALS):
        pid, var = f"fleet-{n:02d}", f"RAG_TEST_FLEET_{n:02d}_KEY_SHA256"
        keys[pid] = "SENTINEL-fleet-" + secrets.token_hex(16)
        env[var] = hashlib.sha256(keys[pid].encode()).hexdigest()
        cfg["serving"]["principals"].append({"id": pid, "roles": ["public"], "key_sha256_env": var})
    out.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    return Fleet(out, keys, env)


@dataclass
class Replica:
    name: str
    port: int
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextmanager
def replicas(tmp_path: Path, fleet: Fleet, env: dict[str, str], count: int) -> Iterator[list[Replica]]:
    """``count`` `rag serve` processes started together; yields them once each answers /v1/health."""
    from tests.conftest import ROOT, _embed_env, _neo4j_uri

    rag = Path(sys.executable).with_name("rag")
    started: list[Replica] = []
    try:
        for n in range(count):
            port = free_port()
            log = tmp_path / f"replica{n}.log"
            environ = {**os.environ, **fleet.env, **_embed_env(), "NEO4J_URI": _neo4j_uri(), **env}
            cmd = [str(rag), "--config", str(fleet.config), "serve", "--host", "127.0.0.1", "--port", str(port)]
            with log.open("wb") as out:
                proc = subprocess.Popen(cmd, env=environ, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
            started.append(Replica(f"r{n}", port, proc, log))
        deadline = time.monotonic() + 180
        waiting = list(started)
        while waiting:
            for r in list(waiting):
                assert r.proc.poll() is None, r.log.read_text()[-3000:]
                try:
                    if httpx.get(f"{r.url}/v1/health", timeout=2).status_code == 200:
                        waiting.remove(r)
                except httpx.HTTPError:
                    pass
            assert time.monotonic() < deadline, f"replicas {[r.name for r in waiting]} did not answer /v1/health"
            time.sleep(0.3)
        yield started
    finally:
        for r in started:
            if r.proc.poll() is None:
                r.proc.send_signal(signal.SIGTERM)
        for r in started:
            try:
                r.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                r.proc.kill()
                r.proc.wait()


HAPROXY_CFG = """
global
    maxconn 256
defaults
    mode http
    timeout connect 2s
    timeout client 40s
    timeout server 40s
    retries 2
    option redispatch
frontend fleet
    bind 127.0.0.1:{port}
    default_backend replicas
frontend stats
    bind 127.0.0.1:{stats_port}
    stats enable
    stats uri /stats
backend replicas
    balance roundrobin
    option httpchk GET /v1/health
    http-check expect status 200
    default-server inter 500ms fall 2 rise 2
{servers}
"""


@dataclass
class Balancer:
    url: str
    stats_url: str

    def states(self) -> dict[str, str]:
        """Each backend server's status as HAProxy sees it (UP, DOWN, ...)."""
        text = httpx.get(f"{self.stats_url};csv", timeout=5).text
        header, *rows = [line.split(",") for line in text.splitlines() if line]
        cols = {name.lstrip("# "): i for i, name in enumerate(header)}
        return {
            row[cols["svname"]]: row[cols["status"]]
            for row in rows
            if row[cols["pxname"]] == "replicas" and row[cols["svname"]] not in ("FRONTEND", "BACKEND")
        }


@contextmanager
def haproxy(tmp_path: Path, servers: list[Replica]) -> Iterator[Balancer]:
    """HAProxy on a free loopback port, round robin over ``servers``, checking /v1/health every 500 ms
    (two failures take a server out); yields once every server is UP."""
    port, stats_port = free_port(), free_port()
    lines = "\n".join(f"    server {r.name} 127.0.0.1:{r.port} check" for r in servers)
    cfg = tmp_path / "haproxy.cfg"
    cfg.write_text(HAPROXY_CFG.format(port=port, stats_port=stats_port, servers=lines), encoding="utf-8")
    log = (tmp_path / "haproxy.log").open("wb")
    proc = subprocess.Popen([haproxy_binary(), "-db", "-f", str(cfg)], stdout=log, stderr=subprocess.STDOUT)
    balancer = Balancer(f"http://127.0.0.1:{port}", f"http://127.0.0.1:{stats_port}/stats")
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, (tmp_path / "haproxy.log").read_text()
            try:
                if set(balancer.states().values()) == {"UP"}:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "HAProxy did not see every replica UP"
            time.sleep(0.2)
        yield balancer
    finally:
        stop(proc, 10)
        log.close()


@dataclass(frozen=True)
class Outcome:
    started: float
    ended: float
    status: int
    """The HTTP status, or 0 when the call failed without one (a transport error)."""
    principal: str
    detail: str = ""


@dataclass
class Load:
    """A bounded load run's outcomes (thread-safe append)."""

    outcomes: list[Outcome] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def between(self, start: float, end: float) -> list[Outcome]:
        return [o for o in self.outcomes if start <= o.ended < end]


QUESTIONS = (
    "Who locks a lost laptop?",
    "Where is a visitor badge handed back?",
    "How are expenses approved?",
    "What does support do for a customer?",
)


def run_load(
    url: str,
    keys: dict[str, str],
    *,
    clients: int,
    seconds: float,
    max_requests: int = 5000,
    during: Callable[[float], None] | None = None,
) -> Load:
    """``clients`` threads POST /v1/retrieve through ``url`` for ``seconds`` (at most ``max_requests``
    in all), each request under the next principal of ``keys``; ``during(elapsed)`` is called about
    every 50 ms from the calling thread while they run (e.g. to kill a replica)."""
    load, names = Load(), list(keys)
    counter = iter(range(max_requests))
    stop = time.monotonic() + seconds

    def client() -> None:
        with httpx.Client(timeout=30) as http:
            while time.monotonic() < stop:
                with load.lock:
                    n = next(counter, None)
                if n is None:
                    return
                who = names[n % len(names)]
                body = {"question": QUESTIONS[n % len(QUESTIONS)], "k": 3}
                began = time.monotonic()
                try:
                    r = http.post(f"{url}/v1/retrieve", json=body, headers={"Authorization": f"Bearer {keys[who]}"})
                    status, detail = r.status_code, ("" if r.status_code < 300 else r.text[:200])
                except httpx.HTTPError as exc:
                    status, detail = 0, type(exc).__name__
                with load.lock:
                    load.outcomes.append(Outcome(began, time.monotonic(), status, who, detail))

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    began = time.monotonic()
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        if during is not None:
            during(time.monotonic() - began)
        time.sleep(0.05)
    for t in threads:
        t.join(timeout=60)
    return load
