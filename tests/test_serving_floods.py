"""The query service under hostile connections, as its own `rag serve` process at an open-file
limit of 256, loopback only, bounded (a few hundred sockets for a few seconds):

- a slow-body flood: 300 connections from another loopback address (127.0.0.2) announce a
  1,000-byte body and trickle a byte every 0.3 s, half without a key, half with one; and 40 more
  trickle their request head. Meanwhile ``/v1/health`` from 127.0.0.1 answers 200 every time,
  the keyless ones are refused with 401 at once, the others are closed (408, or the head
  deadline), and the closures are logged.
- ``GET /mcp`` (a stream that, stateless, would carry nothing) is 405 at once, never held.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import httpx

from tests.serving_support import serve_process
from tests.support import serve_config

ATTACKER = "127.0.0.2"
FLOOD_SECONDS = 6.0
TIMEOUTS = {"header_timeout_seconds": 2, "body_timeout_seconds": 2, "idle_timeout_seconds": 2}


def _connect(port: int) -> socket.socket | None:
    s = socket.socket()
    s.settimeout(2)
    try:
        s.bind((ATTACKER, 0))
        s.connect(("127.0.0.1", port))
    except OSError:
        s.close()
        return None
    s.setblocking(False)
    return s


def _head(key: str | None) -> bytes:
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    return (
        f"POST /v1/retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n{auth}"
        "Content-Length: 1000\r\n\r\n"
    ).encode()


def _closed_by_server(s: socket.socket) -> bool:
    """The server answered and closed, or reset: what it sent, if anything, is read away."""
    try:
        while True:
            data = s.recv(65536)
            if not data:
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_a_slow_body_flood_at_a_low_file_limit_leaves_health_answering(tmp_path):
    with serve_process(tmp_path, limits=TIMEOUTS, nofile=256) as (url, proc, log_path):
        port = int(url.rsplit(":", 1)[1])
        health: list[int | str] = []
        waits: list[float] = []
        stop = threading.Event()

        def probe() -> None:
            while not stop.is_set():
                started = time.monotonic()
                try:
                    health.append(httpx.get(f"{url}/v1/health", timeout=3).status_code)
                except httpx.HTTPError as exc:
                    health.append(type(exc).__name__)
                waits.append(time.monotonic() - started)
                time.sleep(0.25)

        prober = threading.Thread(target=probe)
        prober.start()
        bodies: list[socket.socket] = []
        heads: list[socket.socket] = []
        opened = refused_at_once = 0
        try:
            for i in range(300):
                s = _connect(port)
                if s is None:
                    continue
                opened += 1
                try:
                    s.sendall(_head(None if i % 2 else serve_config.APP_KEY))
                except OSError:
                    refused_at_once += 1
                    s.close()
                    continue
                bodies.append(s)
            for _ in range(40):
                s = _connect(port)
                if s is not None:
                    opened += 1
                    heads.append(s)
            started = time.monotonic()
            while time.monotonic() - started < FLOOD_SECONDS:
                for s in bodies + heads:
                    with contextlib.suppress(OSError):
                        s.send(b" " if s in bodies else b"X")
                time.sleep(0.3)
            held = [s for s in bodies + heads if not _closed_by_server(s)]
        finally:
            stop.set()
            prober.join(timeout=30)
            for s in bodies + heads:
                s.close()
        assert proc.poll() is None, log_path.read_text()[-3000:]
        assert health and all(code == 200 for code in health), (health, log_path.read_text()[-3000:])
        assert len(health) >= FLOOD_SECONDS * 2, health  # it kept answering, not once at the end
        print(
            f"\nflood at ulimit -n 256: {opened} connections opened, {len(health)} health checks all 200 "
            f"(max {max(waits):.3f}s), none held after {FLOOD_SECONDS:g}s"
        )
        # the deadlines closed every trickling connection the caps had let in (2 s, flood 6 s)
        assert not held, f"{len(held)} of {opened} connections still held after {FLOOD_SECONDS:g} s"
        log = log_path.read_text()
        assert "closed" in log and "connection" in log, log[-3000:]
        assert "Too many open files" not in log and "Traceback" not in log, log[-3000:]
        # and the service still serves a keyed request
        r = httpx.get(f"{url}/v1/collections", headers={"Authorization": f"Bearer {serve_config.APP_KEY}"}, timeout=10)
        assert r.status_code == 200, r.text


def test_get_mcp_is_405_at_once_and_never_holds_a_stream(tmp_path):
    with serve_process(tmp_path, limits=TIMEOUTS) as (url, _, _):
        headers = {"Authorization": f"Bearer {serve_config.APP_KEY}", "Accept": "text/event-stream"}
        started = time.monotonic()
        r = httpx.get(f"{url}/mcp", headers=headers, timeout=5)
        assert r.status_code == 405 and r.json()["error"] == "MethodNotAllowed", r.text
        assert "POST" in r.headers["allow"] and time.monotonic() - started < 5
        # POST still works
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        }
        r = httpx.post(f"{url}/mcp", json=init, headers={**headers, "Accept": "application/json, text/event-stream"})
        assert r.status_code == 200, r.text
