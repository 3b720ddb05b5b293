"""Embedder faults: a bad vector, a hung embedder or a broken cache file must cost one
document or one leg, never the corpus or every question.

The probes: one NaN answer was cached before the Neo4j write failed, so every rerun made no
request and failed the same documents; all-zero vectors were cached and went live, the cosine
index left them out and ``rag status`` still said ``ok``; a NaN question vector reached Neo4j
(``ClientError``, exit 1); a hung embedder held every question for the indexing timeout
(600 s, 2 retries); a cache file of garbage bytes failed every new document.

The suite's embedder (e5 on the local embedding server) is served through the loopback server
(``forward_embeddings``), so the identity and the vectors are the shared index's own; a fault
is one queued reply or a responder for the question side. Nothing of the engine is patched.
"""

from __future__ import annotations

import logging
import math
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rag_engine.config import EngineConfig
from rag_engine.engine import Engine
from rag_engine.graph import writer
from rag_engine.ingest.pipeline import ingest_pack
from rag_engine.ops.status import collect_status
from rag_engine.retrieval.query import run_query
from rag_engine.store import schema
from tests.conftest import ROOT, with_artifacts
from tests.faults.conftest import engine_env
from tests.support.fake_openai import FakeOpenAI, Reply, bad_vectors, forward_embeddings, slow
from tests.support.packs import POLICY, RUNBOOK, temp_pack

QUESTION = "How fast must a lost laptop be reported?"
DIMENSION = 384


@pytest.fixture
def upstream(base_config: EngineConfig, neo4j_driver) -> str:
    url = os.environ.get("RAG_EMBED_ENDPOINT")
    if not url:
        pytest.skip("needs the embedding server (RAG_EMBED_ENDPOINT): the suite's embedder is served through it")
    spec = base_config.model(base_config.defaults.embedding_model)
    assert spec is not None and spec.dimension == DIMENSION
    return url


@contextmanager
def served(upstream: str, question_side: Callable[[], Reply] | None = None) -> Iterator[FakeOpenAI]:
    """The loopback server forwarding to the real embedder; ``question_side`` answers the
    question embeddings (input_type "query") instead, when given."""
    forward = forward_embeddings(upstream)
    with FakeOpenAI(dimension=DIMENSION) as fake:

        def respond(body: Any) -> Reply:
            if question_side is not None and isinstance(body, dict) and body.get("input_type") == "query":
                return question_side()
            return forward(body)

        fake.responder = respond
        yield fake


def embed_engine(cfg: EngineConfig, tmp_path: Path, fake: FakeOpenAI, packs: list | None = None) -> Engine:
    """The shipped config (provider timeout and retries included) with the embedding server
    behind ``fake`` and this test's own embedding cache."""
    cfg = with_artifacts(cfg, tmp_path / "artifacts")
    storage = cfg.storage.model_copy(update={"embedding_cache": str(tmp_path / "embedding_cache.sqlite")})
    cfg = cfg.model_copy(update={"storage": storage})
    env = {**engine_env(tmp_path), "RAG_EMBED_ENDPOINT": fake.base_url}
    engine = Engine(cfg, ROOT, env, packs=packs)
    active = schema.current_embedder(engine.driver, engine.database)
    if active is not None and active["identity"] != engine.embedder_identity:
        pytest.skip(f"the test database is indexed with {active['identity']!r}, not the suite's embedder")
    return engine


def cached_vectors(path: Path) -> list[np.ndarray]:
    with closing(sqlite3.connect(path)) as db:
        return [np.frombuffer(blob, dtype=np.float32) for (blob,) in db.execute("SELECT vector FROM embeddings")]


def _requests(report) -> int:
    """The embedding requests a chunk_index report counts: passages and their sentence units."""
    return report.total("embed_requests") + report.total("unit_embed_requests")


def _pack(engine: Engine, unique: str, tmp_path: Path):
    return temp_pack(engine, unique, tmp_path / "corpus", {"policy.md": POLICY, "runbook.md": RUNBOOK})


# -- M1: one bad answer must not poison the cache ---------------------------------------------------


def test_nan_vectors_are_refused_before_the_cache_and_a_rerun_embeds_again(base_config, tmp_path, unique, upstream):
    with served(upstream) as fake:
        engine = embed_engine(base_config, tmp_path, fake)
        pack = _pack(engine, unique, tmp_path)
        fake.enqueue(bad_vectors(math.nan))  # the first document's only batch
        first = ingest_pack(engine, pack, run_id=f"run-{unique}-1", extract=False)["chunk_index"]
        assert len(first.done) == 1 and len(first.failed) == 1, (first.done, first.failed)
        (why,) = first.failed.values()
        assert why.startswith("EmbeddingInvalid") and "not finite" in why, why
        stored = cached_vectors(tmp_path / "embedding_cache.sqlite")
        assert stored and all(np.isfinite(v).all() and v.any() for v in stored)

        requests = len(fake.calls("/embeddings"))
        second = ingest_pack(engine, pack, run_id=f"run-{unique}-2", extract=False)["chunk_index"]
        assert second.failed == {}
        assert sorted(second.done) == sorted([*first.done, *first.failed])
        # the failed document only (its passages, then its sentence units): the rest is cached
        (ok,) = first.done
        assert second.done[ok]["embed_requests"] == second.done[ok]["unit_embed_requests"] == 0, second.done[ok]
        (failed,) = first.failed
        assert second.done[failed]["embed_requests"] >= 1 and second.done[failed]["embed_cache_hits"] == 0
        assert len(fake.calls("/embeddings")) == requests + _requests(second)
        coverage = schema.index_coverage(engine.driver, engine.database, [pack.name])
        assert coverage is not None and coverage["complete"] and coverage["active_chunks"] > 0
        engine.close()


def test_zero_vectors_are_refused_and_never_go_live(base_config, tmp_path, unique, upstream):
    with served(upstream) as fake:
        engine = embed_engine(base_config, tmp_path, fake)
        pack = _pack(engine, unique, tmp_path)
        fake.enqueue(bad_vectors(0.0))
        report = ingest_pack(engine, pack, run_id=f"run-{unique}", extract=False)["chunk_index"]
        (key, why), *more = report.failed.items()
        assert not more and why.startswith("EmbeddingInvalid") and "all zeros" in why, report.failed
        rows, _, _ = engine.driver.execute_query(
            "MATCH (c:Chunk {pack: $pack, doc_id: $doc}) "
            "RETURN count(c) AS n, sum(CASE WHEN c.active THEN 1 ELSE 0 END) AS live",
            pack=pack.name,
            doc=key.split("--")[0],
            database_=engine.database,
        )
        assert rows[0]["n"] > 0 and rows[0]["live"] == 0  # written by chunks, never activated
        assert all(v.any() for v in cached_vectors(tmp_path / "embedding_cache.sqlite"))
        engine.close()


def test_status_counts_what_the_vector_index_holds(base_config, tmp_path, unique, upstream):
    """A current chunk whose stored vector the index leaves out (all zeros, as the unchecked
    embedder wrote them) is not counted as indexed, and the state is not ok."""
    with served(upstream) as fake:
        engine = embed_engine(base_config, tmp_path, fake)
        pack = _pack(engine, unique, tmp_path)
        engine.close()
        engine = embed_engine(base_config, tmp_path, fake, packs=[pack])  # status over this pack only
        ingest_pack(engine, pack, run_id=f"run-{unique}", extract=False)
        before = collect_status(engine, env={})
        (row,) = before["packs"]
        assert row["chunks"] > 1 and row["embedded"] == row["chunks"]
        assert before["embedder"]["state"] == "ok"

        meta = schema.current_embedder(engine.driver, engine.database)
        assert meta is not None
        rows, _, _ = engine.driver.execute_query(
            "MATCH (c:Chunk {pack: $pack, active: true}) RETURN c.chunk_id AS id ORDER BY id LIMIT 1",
            pack=pack.name,
            database_=engine.database,
        )
        try:
            writer.write_embeddings(  # what an unchecked embedder wrote: a zero vector, live
                engine.driver,
                engine.database,
                identity=engine.embedder_identity,
                rows=[{"chunk_id": rows[0]["id"], "embedding": [0.0] * DIMENSION}],
                property=meta["property"],
            )
            after = collect_status(engine, env={})
            (row,) = after["packs"]
            assert row["embedded"] == row["chunks"] - 1
            assert after["embedder"]["unindexable"] == 1
            assert after["embedder"]["state"].startswith("1 current chunk(s) not in the vector index"), after[
                "embedder"
            ]
            # and that is what the index itself answers: the zero vector is not among its entries
            total, _, _ = engine.driver.execute_query(
                "MATCH (c:Chunk) WHERE c[$prop] IS NOT NULL RETURN count(c) AS n", prop=meta["property"]
            )
            found, _, _ = engine.driver.execute_query(
                "MATCH (c:Chunk {pack: $pack, active: true}) WHERE c.chunk_id <> $zero WITH c LIMIT 1 "
                "CALL db.index.vector.queryNodes($index, $k, c[$prop]) YIELD node "
                "WITH node WHERE node.pack = $pack AND node.active RETURN count(node) AS n",
                pack=pack.name,
                zero=rows[0]["id"],
                index=meta["index"],
                prop=meta["property"],
                k=total[0]["n"],
            )
            assert found[0]["n"] == row["embedded"]
        finally:  # the shared database gets the real vector back (a live zero vector fails cosine reads)
            ingest_pack(engine, pack, run_id=f"run-{unique}-restore", extract=False)
        engine.close()


def test_a_poisoned_cache_entry_is_a_miss_and_is_embedded_again(base_config, tmp_path, unique, upstream):
    """A cache written before the boundary check may hold NaN or zero vectors: they are misses."""
    with served(upstream) as fake:
        engine = embed_engine(base_config, tmp_path, fake)
        pack = _pack(engine, unique, tmp_path)
        ingest_pack(engine, pack, run_id=f"run-{unique}-1", extract=False)
        path = tmp_path / "embedding_cache.sqlite"
        zeros, nans = (np.full(DIMENSION, x, np.float32).tobytes() for x in (0.0, np.nan))
        with closing(sqlite3.connect(path)) as db, db:  # as the unchecked code stored them: zeros, NaN
            db.execute("UPDATE embeddings SET vector = ?", [zeros])
            db.execute("UPDATE embeddings SET vector = ? WHERE text_sha256 < '8'", [nans])
        requests = len(fake.calls("/embeddings"))
        report = ingest_pack(engine, pack, run_id=f"run-{unique}-2", extract=False)["chunk_index"]
        assert report.failed == {} and report.total("embed_cache_hits") == 0, (report.failed, report.done)
        assert len(fake.calls("/embeddings")) == requests + _requests(report) >= requests + 2  # both embedded again
        assert all(np.isfinite(v).all() and v.any() for v in cached_vectors(path))  # and replaced
        coverage = schema.index_coverage(engine.driver, engine.database, [pack.name])
        assert coverage is not None and coverage["complete"]
        engine.close()


# -- L4: a corrupt cache file is moved aside, ingest goes on ------------------------------------------


def test_a_corrupt_cache_file_is_moved_aside_and_ingest_goes_on(base_config, tmp_path, unique, upstream, caplog):
    cache = tmp_path / "embedding_cache.sqlite"
    cache.write_bytes(b"\x00garbage, not a database\xff" * 512)
    with served(upstream) as fake, caplog.at_level(logging.WARNING, logger="rag_engine.providers.embedding_cache"):
        engine = embed_engine(base_config, tmp_path, fake)
        pack = _pack(engine, unique, tmp_path)
        report = ingest_pack(engine, pack, run_id=f"run-{unique}", extract=False)["chunk_index"]
        assert report.failed == {} and len(report.done) == 2
        (aside,) = tmp_path.glob("embedding_cache.sqlite.corrupt-*")
        assert aside.read_bytes().startswith(b"\x00garbage")
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and str(cache) in warnings[0] and "not a database" in warnings[0], warnings
        assert len(cached_vectors(cache)) > 0  # the new cache serves the next run
        engine.close()


# -- M3 / L3: the question side degrades to the other legs --------------------------------------------


def _degraded_query(engine: Engine, pack: Any) -> tuple[Any, float]:
    """The question, asked of an engine serving the test's pack (only enabled packs are served)."""
    served = Engine(engine.cfg, engine.root, engine.env, packs=[pack])
    try:
        started = time.perf_counter()
        outcome = run_query(served, QUESTION, "employee", generate=False, local_inference=False)
        return outcome, time.perf_counter() - started
    finally:
        served.close()


def test_a_hung_query_embedder_degrades_to_the_other_legs_within_the_deadline(base_config, tmp_path, unique, upstream):
    deadline = base_config.retrieval.query_embed_timeout_s  # the shipped setting, not a test value
    assert deadline <= 10
    with served(upstream, question_side=lambda: slow(60.0)) as fake:
        engine = embed_engine(base_config, tmp_path, fake)
        assert engine.cfg.providers[0].timeout_s >= 600  # the indexing side keeps its long timeout
        pack = _pack(engine, unique, tmp_path)
        ingest_pack(engine, pack, run_id=f"run-{unique}", extract=False)
        outcome, seconds = _degraded_query(engine, pack)
        ours = [c for c in outcome.retrieval.candidates if c.chunk_id.startswith(f"{unique}:policy")]
        assert seconds < deadline + 5, seconds
        dense = next(s for s in outcome.retrieval.trace if s["step"] == "dense")
        assert dense["degraded"] == "ProviderTimeout" and dense["hits"] == 0
        events = [e for e in outcome.events if e["event"] == "dense_degraded"]
        assert len(events) == 1 and events[0]["error_type"] == "ProviderTimeout"
        assert ours and all("dense" not in c.sources for c in ours)
        assert "lexical" in ours[0].sources  # answered by the fulltext leg
        assert len(fake.calls("/embeddings")) >= 1
        engine.close()


def test_a_nan_query_embedding_degrades_instead_of_failing_in_neo4j(base_config, tmp_path, unique, upstream):
    with served(upstream, question_side=lambda: bad_vectors(math.nan)) as fake:
        engine = embed_engine(base_config, tmp_path, fake)
        pack = _pack(engine, unique, tmp_path)
        ingest_pack(engine, pack, run_id=f"run-{unique}", extract=False)
        outcome, _ = _degraded_query(engine, pack)
        ours = [c for c in outcome.retrieval.candidates if c.chunk_id.startswith(f"{unique}:policy")]
        dense = next(s for s in outcome.retrieval.trace if s["step"] == "dense")
        assert dense["degraded"] == "EmbeddingInvalid"
        assert [e["error_type"] for e in outcome.events if e["event"] == "dense_degraded"] == ["EmbeddingInvalid"]
        assert ours and "lexical" in ours[0].sources
        engine.close()
