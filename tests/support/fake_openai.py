"""A loopback OpenAI-compatible HTTP server with a programmable fault queue.

The provider layer is tested through the real ``openai`` SDK over real HTTP, so what is
exercised is what production runs: headers, status codes, timeouts, broken bodies. Each test
queues the replies it wants; when the queue is empty the server answers normally. Every
request is kept (path, headers, JSON body) so tests can assert how many calls were made and
that the Authorization header really carried the key the engine must never log.

Binds 127.0.0.1 on a free port only.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Reply:
    """One programmed answer. ``body`` is sent as-is when bytes, JSON-encoded otherwise."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    model: str | None = None
    usage: dict[str, Any] | None = None
    content: str | None = None
    fill: float | None = None
    """Embeddings only: every vector of the answer holds this one value (NaN, 0.0, ...)."""


@dataclass(frozen=True)
class SeenRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


# -- reply builders: one per fault the provider layer must survive ---------------------------


def ok(content: str | None = None, *, model: str | None = None, usage: dict[str, Any] | None = None) -> Reply:
    """A normal answer; ``content``/``model``/``usage`` override the defaults."""
    return Reply(content=content, model=model, usage=usage)


def usage(prompt: int, completion: int, *, cached: int | None = None, reasoning: int | None = None) -> dict[str, Any]:
    """An OpenAI ``usage`` object; cached/reasoning details are left out when None (not reported)."""
    out: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if cached is not None:
        out["prompt_tokens_details"] = {"cached_tokens": cached}
    if reasoning is not None:
        out["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return out


def rate_limited(*, retry_after_s: float | None = None, retry_after_ms: int | None = None) -> Reply:
    headers = {}
    if retry_after_s is not None:
        headers["retry-after"] = str(retry_after_s)
    if retry_after_ms is not None:
        headers["retry-after-ms"] = str(retry_after_ms)
    body = {"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}
    return Reply(status=429, body=body, headers=headers)


def server_error(status: int = 500, *, headers: dict[str, str] | None = None) -> Reply:
    return Reply(
        status=status, body={"error": {"message": "internal error", "type": "server_error"}}, headers=headers or {}
    )


def slow(delay_s: float) -> Reply:
    """Answer normally but only after ``delay_s``: longer than the client timeout means a timeout."""
    return Reply(delay_s=delay_s)


def truncated() -> Reply:
    """HTTP 200 whose JSON body is cut in the middle (Content-Length matches what is sent)."""
    return Reply(body=b'{"id": "chatcmpl-1", "object": "chat.completion", "choices": [{"index": 0, "mess')


def invalid_json() -> Reply:
    return Reply(body=b"<html>upstream proxy error</html>")


def wrong_shape() -> Reply:
    """Valid JSON that is not a completion (no choices)."""
    return Reply(body={"object": "chat.completion", "unexpected": True})


def bad_vectors(fill: float) -> Reply:
    """An embeddings answer of the right shape whose every vector holds ``fill``: NaN, or 0.0 (an
    all-zero vector, which a cosine vector index leaves out)."""
    return Reply(fill=fill)


def forward_embeddings(upstream: str) -> Any:
    """A ``responder`` answering embeddings requests with what ``upstream`` (a real
    OpenAI-compatible server, e.g. the local embedding server) answers to the same body, so the
    vectors written are the real model's whenever no fault is queued."""
    import httpx

    def respond(body: Any) -> Reply:
        response = httpx.post(f"{upstream.rstrip('/')}/embeddings", json=body, timeout=120)
        return Reply(status=response.status_code, body=response.content)

    return respond


def echo_auth_error() -> Reply:
    """401 whose body repeats the presented key, as some providers do (partially masked or not)."""
    return Reply(status=401, body="__ECHO_AUTH__")


# -- the server -------------------------------------------------------------------------------


class FakeOpenAI:
    """Context manager running the server in a daemon thread."""

    def __init__(self, *, default_model: str = "fake-model-0001", dimension: int = 8):
        self.default_model = default_model
        self.dimension = dimension
        self.requests: list[SeenRequest] = []
        self._queue: deque[Reply] = deque()
        self.responder: Any = None  # optional fn(request body) -> Reply, used when the queue is empty
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._httpd.block_on_close = False
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-openai", daemon=True
        )

    # lifecycle
    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    # programming
    def enqueue(self, *replies: Reply) -> None:
        with self._lock:
            self._queue.extend(replies)

    def _next(self, body: Any = None) -> Reply:
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        return self.responder(body) if self.responder is not None else Reply()

    def _seen(self, req: SeenRequest) -> None:
        with self._lock:
            self.requests.append(req)

    def calls(self, path_suffix: str = "") -> list[SeenRequest]:
        with self._lock:
            return [r for r in self.requests if r.path.endswith(path_suffix)]

    # default answers
    def _completion(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        messages = body.get("messages") or []
        last = messages[-1].get("content", "") if messages else ""
        content = reply.content if reply.content is not None else f"echo: {last}"
        return {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": reply.model or self.default_model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": reply.usage or usage(10, 5),
        }

    def _embeddings(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        texts = body.get("input")
        texts = [texts] if isinstance(texts, str) else list(texts or [])
        data = []
        for i, text in enumerate(texts):
            digest = hashlib.sha256(str(text).encode()).digest()
            if reply.fill is not None:
                vec = [reply.fill] * self.dimension
            else:
                vec = [round(b / 255.0, 6) for b in (digest * (1 + self.dimension // len(digest)))[: self.dimension]]
            data.append({"object": "embedding", "index": i, "embedding": vec})
        tokens = sum(max(1, len(str(t).split())) for t in texts)
        return {
            "object": "list",
            "model": reply.model or self.default_model,
            "data": data,
            "usage": reply.usage or {"prompt_tokens": tokens, "total_tokens": tokens},
        }

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = None
                server._seen(SeenRequest("POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                reply = server._next(body)
                if reply.delay_s and server._closing.wait(reply.delay_s):
                    return
                if reply.body == "__ECHO_AUTH__":
                    payload: Any = {
                        "error": {"message": f"Incorrect API key provided: {self.headers.get('authorization')}"}
                    }
                elif reply.body is not None:
                    payload = reply.body
                elif self.path.endswith("/chat/completions"):
                    payload = server._completion(body or {}, reply)
                elif self.path.endswith("/embeddings"):
                    payload = server._embeddings(body or {}, reply)
                else:
                    reply, payload = Reply(status=404), {"error": {"message": "not found"}}
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    for key, value in reply.headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test): nothing to answer

        return Handler
