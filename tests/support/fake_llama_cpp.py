"""A loopback server speaking llama.cpp's native wire format (``llama-server``'s ``POST
/completion`` and ``POST /rerank``, as its tools/server/README.md documents them): the request
bodies are recorded, the answers are set per test, and a delay makes it slow on purpose."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeLlamaCpp:
    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.content: Callable[[dict[str, Any]], str] = lambda body: '{"queries": ["other words"]}'
        self.scores: Callable[[dict[str, Any]], list[float]] = lambda body: [0.0 for _ in body["documents"]]
        self.delay_s = 0.0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                outer.requests.append((self.path, body))
                if outer.delay_s:
                    time.sleep(outer.delay_s)
                if self.path == "/completion":
                    content = outer.content(body)
                    answer: dict[str, Any] = {
                        "content": content,
                        "id_slot": 0,
                        "stop": True,
                        "model": "fake-llama",
                        "tokens_predicted": max(1, len(content) // 4),
                        "tokens_evaluated": max(1, len(body.get("prompt", "")) // 4),
                        "generation_settings": {"n_predict": body.get("n_predict", -1)},
                        "prompt": body.get("prompt", ""),
                        "has_new_line": False,
                        "truncated": False,
                        "stop_type": "eos",
                        "stopping_word": "",
                        "tokens_cached": 0,
                        "timings": {"prompt_n": 1, "predicted_n": 1},
                    }
                elif self.path in ("/rerank", "/reranking", "/v1/rerank", "/v1/reranking"):
                    scores = outer.scores(body)
                    answer = {
                        "model": body.get("model", "fake-reranker"),
                        "object": "list",
                        "usage": {"prompt_tokens": 7 * len(scores), "total_tokens": 7 * len(scores)},
                        "results": sorted(
                            ({"index": i, "relevance_score": s} for i, s in enumerate(scores)),
                            key=lambda r: -r["relevance_score"],
                        )[: body.get("top_n", len(scores))],
                    }
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                data = json.dumps(answer).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (its timeout)
                    pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> FakeLlamaCpp:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
