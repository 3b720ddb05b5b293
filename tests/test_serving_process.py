"""The query service as the separate process `make test` starts (tools/serve-local, its URL in
RAG_SERVE_URL, its config and keys from tests/support/serve_config.py): health without a key,
401 without one, 200 with one and the key's role deciding what is read, a blocked collection, a
429 over a principal's rate; and, on a second `rag serve` process this test starts, SIGTERM while
a request is in flight: that request still completes 200, then the process exits.

Without RAG_SERVE_URL these tests fail (as the suite does without Neo4j): they are part of what
`make test` proves.
"""

from __future__ import annotations

import http.server
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from rag_engine.config import load_config
from rag_engine.engine import Engine
from rag_engine.ingest.pipeline import ingest_pack
from tests.conftest import ROOT, _embed_env, _neo4j_uri, with_artifacts
from tests.serving_support import bearer, free_port, serve_process
from tests.support import serve_config
from tests.support.packs import temp_pack

PUBLIC = """---
collection: kb_public
---
# Visitor badges

## Returning a badge
A zephyrine visitor badge is handed back at the front desk when the visit ends.
"""
INTERNAL = """---
collection: kb_internal
---
# Badge register

## Audits
Every zephyrine visitor badge is checked each quarter against the internal badge register.
"""
QUESTION = {"question": "Where is a zephyrine visitor badge handed back?"}


@pytest.fixture(scope="module")
def serve_url() -> str:
    url = os.environ.get("RAG_SERVE_URL")
    if not url:
        pytest.fail(
            "RAG_SERVE_URL is not set: these tests call the query service `make test` starts "
            "(tools/serve-local with tests/support/serve_config.py); run `make test`"
        )
    try:
        httpx.get(f"{url}/v1/health", timeout=10).raise_for_status()
    except httpx.HTTPError as exc:
        pytest.fail(f"the query service at RAG_SERVE_URL={url} does not answer /v1/health ({type(exc).__name__})")
    return url


@pytest.fixture(scope="module")
def pack(serve_url, tmp_path_factory, neo4j_driver) -> str:
    """A public and an internal document under a throwaway pack name, ingested into the store
    the service reads (removed at the end of the session with the other test packs)."""
    name = serve_config.SERVED_PACK  # a pack the service has enabled: only enabled packs are served
    base = tmp_path_factory.mktemp("served")
    env = {"NEO4J_URI": _neo4j_uri(), "RAG_LEDGER_URL": f"sqlite:///{base / 'ledger.sqlite'}", **_embed_env()}
    engine = Engine(with_artifacts(load_config(ROOT / "config" / "engine.yaml"), base / "artifacts"), ROOT, env)
    try:
        ingest_pack(engine, temp_pack(engine, name, base / "corpus", {"public.md": PUBLIC, "internal.md": INTERNAL}))
    finally:
        engine.close()
    return name


def ours(body: dict, pack: str) -> list[dict]:
    return [c for c in body["candidates"] if c["chunk_id"].startswith(pack)]


def test_health_needs_no_key_and_a_request_without_a_valid_key_is_401(serve_url):
    health = httpx.get(f"{serve_url}/v1/health", timeout=30).json()
    assert health["status"] == "ok" and health["store"] == "ok", health
    for headers in ({}, bearer("not-a-key")):
        r = httpx.post(f"{serve_url}/v1/retrieve", json=QUESTION, headers=headers, timeout=30)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer", r.text
        assert r.json()["error"] == "Unauthenticated" and "\n" not in r.json()["detail"]


def test_a_key_gets_200_and_its_principal_s_role_decides_what_is_read(serve_url, pack):
    r = httpx.post(
        f"{serve_url}/v1/retrieve",
        json={**QUESTION, "role": "employee"},
        headers=bearer(serve_config.ANALYST_KEY),
        timeout=60,
    )
    assert r.status_code == 200, r.text
    assert {"kb_public", "kb_internal"} <= {c["collection"] for c in ours(r.json(), pack)}, r.json()["candidates"]
    r = httpx.post(f"{serve_url}/v1/retrieve", json=QUESTION, headers=bearer(serve_config.APP_KEY), timeout=60)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["role"] == "public" and ours(body, pack)
    assert "kb_internal" not in {c["collection"] for c in body["candidates"]}  # public also reads legal_public
    # the public app may not claim a role its principal does not hold
    r = httpx.post(
        f"{serve_url}/v1/retrieve",
        json={**QUESTION, "role": "employee"},
        headers=bearer(serve_config.APP_KEY),
        timeout=60,
    )
    assert r.status_code == 403 and r.json()["error"] == "Forbidden", r.text


def test_a_collection_the_role_may_not_read_is_blocked_with_an_event(serve_url, pack):
    r = httpx.post(
        f"{serve_url}/v1/retrieve",
        json={**QUESTION, "collections": ["kb_internal"]},
        headers=bearer(serve_config.APP_KEY),
        timeout=60,
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert not any(c["collection"] == "kb_internal" for c in body["candidates"])
    assert any(e.get("event") == "collections_blocked" for e in body["events"]), body["events"]


def test_a_principal_over_its_rate_gets_429_with_retry_after(serve_url):
    """Ten requests at once from one principal whose burst is five: the rest are refused at the
    door (a passage lookup: cheap, and limited like every engine call)."""

    def one(_: int) -> httpx.Response:
        return httpx.post(
            f"{serve_url}/v1/passage",
            json={"chunk_id": "no-such-chunk"},
            headers=bearer(serve_config.THROTTLED_KEY),
            timeout=60,
        )

    with ThreadPoolExecutor(max_workers=10) as pool:
        responses = list(pool.map(one, range(10)))
    refused = [r for r in responses if r.status_code == 429]
    assert refused and {r.status_code for r in responses} <= {404, 429}, [r.status_code for r in responses]
    for r in refused:
        assert int(r.headers["retry-after"]) >= 1
        assert r.json()["error"] == "RateLimited" and "\n" not in r.json()["detail"], r.text
    assert any("requests per minute" in r.json()["detail"] for r in refused)


class SlowEmbedder(http.server.BaseHTTPRequestHandler):
    """An embedding endpoint that takes ``delay`` seconds, then fails: a question's embedding is
    in flight for that long (the service then answers from the other legs)."""

    delay = 3.0
    arrived = threading.Event()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        SlowEmbedder.arrived.set()
        time.sleep(self.delay)
        body = b'{"error": {"message": "busy"}}'
        self.send_response(503)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_sigterm_lets_the_request_in_flight_finish_then_the_process_exits(serve_url, pack, tmp_path):
    embedder = http.server.ThreadingHTTPServer(("127.0.0.1", 0), SlowEmbedder)
    threading.Thread(target=embedder.serve_forever, daemon=True).start()
    SlowEmbedder.arrived.clear()
    port = free_port()
    config = serve_config.write(tmp_path / "engine.yaml", by_server=True)  # the request waits on this embedder
    env = {
        **os.environ,
        **serve_config.digest_env(),
        "NEO4J_URI": _neo4j_uri(),
        "RAG_LEDGER_URL": f"sqlite:///{tmp_path / 'ledger.sqlite'}",
        "RAG_EMBED_ENDPOINT": f"http://127.0.0.1:{embedder.server_address[1]}/v1",
    }
    rag = Path(sys.executable).with_name("rag")
    log = (tmp_path / "serve.log").open("wb")
    cmd = [str(rag), "--config", str(config), "serve", "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            assert time.monotonic() < deadline, "rag serve did not answer /v1/health"
            try:
                if httpx.get(f"{url}/v1/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        answer: list[httpx.Response] = []
        inflight = threading.Thread(
            target=lambda: answer.append(
                httpx.post(f"{url}/v1/retrieve", json=QUESTION, headers=bearer(serve_config.APP_KEY), timeout=60)
            )
        )
        inflight.start()
        assert SlowEmbedder.arrived.wait(60), "the request never reached the embedder"
        proc.send_signal(signal.SIGTERM)
        inflight.join(timeout=60)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
        embedder.shutdown()
    output = (tmp_path / "serve.log").read_text()
    assert answer and answer[0].status_code == 200, (answer and answer[0].text, output[-2000:])
    body = answer[0].json()
    assert any(e.get("event") == "dense_degraded" for e in body["events"])  # it did wait on the embedder
    assert ours(body, pack)
    # the request finished after shutdown began; then the process ended by the signal it was sent
    # (uvicorn re-raises it once shut down, so a supervisor sees how it stopped), with no traceback
    assert output.index("Shutting down") < output.index('"POST /v1/retrieve HTTP/1.1" 200'), output[-2000:]
    assert "Finished server process" in output and "Traceback" not in output, output[-2000:]
    assert code in (0, -signal.SIGTERM), (code, output[-2000:])


def _response(sock: socket.socket) -> bytes:
    """What the server sends until it closes the connection (a reset raises)."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def _one_response(sock: socket.socket) -> bytes:
    """Exactly one response on a kept-alive connection: its head, then Content-Length bytes (a
    loaded machine may deliver the head and the body in separate reads)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    length = next(
        int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, data
        body += chunk
    return head + b"\r\n\r\n" + body


def test_a_request_on_an_idle_keep_alive_connection_as_sigterm_begins_is_503_not_a_reset(tmp_path):
    """Round three, L8: uvicorn closed idle keep-alive connections at once on SIGTERM, so a
    request a client had just sent on one met a closed socket (a reset, no response)."""
    with serve_process(tmp_path) as (url, proc, log_path):
        sock = socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=30)
        with sock:
            health = b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
            sock.sendall(health)
            first = _one_response(sock)  # the connection is now idle, kept alive
            assert first.startswith(b"HTTP/1.1 200"), first
            proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 30
            while "Shutting down" not in log_path.read_text():  # logged as the connections are told
                assert time.monotonic() < deadline, log_path.read_text()[-2000:]
                time.sleep(0.01)
            try:
                sock.sendall(health)
                answer = _response(sock)
            except OSError as exc:
                answer = f"{type(exc).__name__}: {exc}".encode()
        code = proc.wait(timeout=60)
    head = answer.split(b"\r\n\r\n", 1)[0].lower()
    assert answer.startswith(b"HTTP/1.1 503"), answer
    assert b"connection: close" in head and b"retry-after: 1" in head
    assert b'"error":"ShuttingDown"' in answer.replace(b" ", b"")
    assert code in (0, -signal.SIGTERM), log_path.read_text()[-2000:]
