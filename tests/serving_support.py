"""What the service tests share: keys (sentinels), a config edit adding principals and limits, and
the app under uvicorn on a free loopback port."""

from __future__ import annotations

import hashlib
import os
import resource
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import uvicorn
import yaml

from tests.support.processes import stop

APP_KEY = "SENTINEL-app-key-4f1c2b9e7d0a4c3b8e6f5a2d1c0b9a87"
ANALYST_KEY = "SENTINEL-analyst-key-0a1b2c3d4e5f60718293a4b5c6d7e8f9"
OPERATOR_KEY = "SENTINEL-operator-key-77aa55cc33ee11ff00dd22bb44996688"
NEW_ANALYST_KEY = "SENTINEL-analyst-rotated-9f8e7d6c5b4a39281706f5e4d3c2b1a0"
APP_KEY_ENV = "RAG_TEST_APP_KEY_SHA256"
OPERATOR_KEY_ENV = "RAG_TEST_OPERATOR_KEY_SHA256"


PUBLIC_FAQ = """---
id: TCK-12
collection: kb_public
---
# Customer FAQ

## Lost laptop
A customer who lost a laptop bought from us reports it to support, who lock the device.
"""
"""A public document beside the variant's internal ones, so a public key finds something."""


def sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def questions_by_server(text: str) -> str:
    """The config with every question embedded by the embedding server (no model's ``in_process``):
    for tests that cut the server and model it as the question's only path; the in-process path,
    which a cut server cannot degrade, has its own tests (tests/test_question_embedder.py)."""
    from tests.support.serve_config import questions_to_the_server

    return yaml.safe_dump(questions_to_the_server(yaml.safe_load(text)), sort_keys=False)


def with_principals(key_file: Path, limits: dict[str, Any] | None = None):
    """A config edit: three principals (a public app by env var, an analyst by key file, an
    operator by env var) and, if given, service limits."""

    def edit(text: str) -> str:
        cfg = yaml.safe_load(text)
        cfg["serving"] = {
            "principals": [
                {"id": "public-app", "roles": ["public"], "key_sha256_env": APP_KEY_ENV},
                {"id": "analyst", "roles": ["employee", "public"], "key_sha256_file": str(key_file)},
                {"id": "ops", "roles": ["employee", "operator"], "key_sha256_env": OPERATOR_KEY_ENV},
            ]
        }
        if limits:
            cfg["serving"]["limits"] = limits
        return yaml.safe_dump(cfg, sort_keys=False)

    return edit


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def running(app, **config: Any) -> Iterator[str]:
    """The app under uvicorn on a free loopback port, in a thread; yields its base URL.
    ``config``: more uvicorn settings (default ``log_level="warning"``)."""
    port = free_port()
    settings = {"log_level": "warning", **config}
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, **settings))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@contextmanager
def service_over(
    variant,
    unique: str,
    tmp_path: Path,
    monkeypatch,
    limits: dict[str, Any] | None = None,
    *,
    by_server: bool = False,
):
    """The KB pack copy (two internal documents and a public FAQ) ingested without extraction and
    served with the three principals; yields
    (url, engine, analyst key file). ``by_server``: questions embedded by the server only."""
    from rag_engine.config import load_config
    from rag_engine.engine import Engine
    from rag_engine.ingest.pipeline import ingest_pack
    from rag_engine.serving.app import create_app
    from tests.conftest import ROOT

    key_file = tmp_path / "analyst.sha256"
    key_file.write_text(f"{sha(ANALYST_KEY)}  # issued to the analyst\n", encoding="utf-8")
    (tmp_path / "corpus" / "faq.md").write_text(PUBLIC_FAQ, encoding="utf-8")
    monkeypatch.setenv(APP_KEY_ENV, sha(APP_KEY))
    monkeypatch.setenv(OPERATOR_KEY_ENV, sha(OPERATOR_KEY))
    principals = with_principals(key_file, limits)
    edit = (lambda text: questions_by_server(principals(text))) if by_server else principals
    engine = Engine(load_config(variant("serving", edit=edit)), ROOT)
    ingest_pack(engine, engine.pack(unique), extract=False)
    try:
        with running(create_app(engine)) as url:
            yield url, engine, key_file
    finally:
        engine.close()


@contextmanager
def serve_process(
    tmp_path: Path,
    *,
    limits: dict[str, Any] | None = None,
    nofile: int | None = None,
    env: dict[str, str] | None = None,
) -> Iterator[tuple[str, subprocess.Popen[bytes], Path]]:
    """`rag serve` as its own process on a free loopback port, with the config and keys of
    ``tests.support.serve_config`` (``limits`` over its limits) on the test Neo4j; ``nofile``:
    its open-file limit. Yields (url, process, log path) once /v1/health answers; killed after."""
    from tests.conftest import ROOT, _embed_env, _neo4j_uri
    from tests.support import serve_config

    port = free_port()
    config = serve_config.write(tmp_path / "engine.yaml", limits)
    environ = {
        **os.environ,
        **serve_config.digest_env(),
        **_embed_env(),
        "NEO4J_URI": _neo4j_uri(),
        "RAG_LEDGER_URL": f"sqlite:///{tmp_path / 'ledger.sqlite'}",
        **(env or {}),
    }

    def limit_files() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    rag = Path(sys.executable).with_name("rag")
    log_path = tmp_path / "serve.log"
    cmd = [str(rag), "--config", str(config), "serve", "--host", "127.0.0.1", "--port", str(port)]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            cmd, env=environ, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, preexec_fn=limit_files
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, "rag serve did not answer /v1/health"
            try:
                if httpx.get(f"{url}/v1/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        yield url, proc, log_path
    finally:
        if proc.poll() is None:
            stop(proc, 30)
