"""Round two, M2: Neo4j stopped during `rag ingest` (133 documents): ~40 s of driver retries per
partition with a traceback each; 25 of 133 failed after 17 min, projecting ~3 h.

The store is stopped mid-run by cutting a loopback proxy in front of the shared Neo4j (the
shared server keeps running for the other tests): the run must stop at the first partition that
cannot reach it, with one typed error, and keep what it finished.
"""

from __future__ import annotations

import logging
import time
from urllib.parse import urlparse

import pytest

from rag_engine.engine import Engine
from rag_engine.errors import StoreUnavailable
from rag_engine.ingest.pipeline import IngestObserver, ingest_pack
from tests.conftest import ROOT, _neo4j_uri, with_artifacts
from tests.faults.conftest import engine_env, pick_embedder
from tests.support.packs import temp_pack
from tests.support.tcp_proxy import TcpProxy


def _doc(i: int) -> str:
    return f"---\ncollection: kb_public\n---\n# Note {i}\n\n## Body\nNote {i} says laptops are encrypted.\n"


class CutAfter(IngestObserver):
    def __init__(self, proxy: TcpProxy, step: str, after: int):
        self.proxy, self.step, self.after, self.seen = proxy, step, after, 0

    def partition_done(self, pack: str, step: str, key: str, outcome: str) -> None:
        if step == self.step:
            self.seen += 1
            if self.seen == self.after:
                self.proxy.cut()


def test_a_store_that_stops_mid_ingest_stops_the_run_at_once_with_one_error(
    base_config, unique, tmp_path, neo4j_driver, caplog
):
    target = urlparse(_neo4j_uri())
    with TcpProxy(target.hostname or "127.0.0.1", target.port or 7687) as proxy:
        env = {**engine_env(tmp_path), "NEO4J_URI": f"bolt://127.0.0.1:{proxy.port}"}
        cfg = pick_embedder(with_artifacts(base_config, tmp_path / "artifacts"))
        cfg = cfg.model_copy(
            update={
                "storage": cfg.storage.model_copy(
                    update={"neo4j": cfg.storage.neo4j.model_copy(update={"write_batch_size": 1})}
                )
            }
        )  # one partition per write transaction: the cut falls between two partitions' writes
        engine = Engine(cfg, ROOT, env)
        try:
            pack = temp_pack(engine, unique, tmp_path / "corpus", {f"note{i}.md": _doc(i) for i in range(12)})
            started = time.perf_counter()
            with caplog.at_level(logging.ERROR), pytest.raises(StoreUnavailable) as raised:
                ingest_pack(engine, pack, extract=False, observer=CutAfter(proxy, "chunks", 2))
            elapsed = time.perf_counter() - started
        finally:
            engine.close()
    message = str(raised.value)
    assert "Neo4j stopped answering during chunks" in message and "the run stopped there" in message
    assert "\n" not in message
    assert elapsed < 75, elapsed  # one partition's driver retries, not one per remaining partition
    assert len([r for r in caplog.records if r.exc_info]) == 0  # no traceback per partition
    # what finished before the cut is in the store
    rows, _, _ = neo4j_driver.execute_query("MATCH (d:Document {pack: $p}) RETURN count(d) AS n", p=unique)
    assert rows[0]["n"] >= 1


def test_a_step_error_caused_by_the_store_going_away_stops_the_run_at_that_partition():
    """A step that wraps the driver's error (a writer raising its own error from it) still stops
    the run at once: every later partition would wait out the same retries."""
    import neo4j

    from rag_engine.ingest.runner import run_step

    tried = []

    def step(key: str) -> dict:
        tried.append(key)
        try:
            raise neo4j.exceptions.ServiceUnavailable("Couldn't connect to 127.0.0.1:1")
        except neo4j.exceptions.ServiceUnavailable as exc:
            raise RuntimeError("write_graph_many failed") from exc

    with pytest.raises(
        StoreUnavailable, match=r"Neo4j stopped answering during graph_writes \(a--1: ServiceUnavailable\)"
    ):
        run_step("graph_writes", ["a--1", "b--1", "c--1"], step)
    assert tried == ["a--1"]


def test_dagster_run_with_the_store_stopped_fails_at_once_in_one_line(variant, unique, monkeypatch):
    """Neo4j stops between two runs: the next run's first step fails within the connect timeout,
    with one line naming the store and the cause, and the typed error as metadata (not the
    driver's retries for half a minute, then sixty lines of traceback)."""
    import dagster as dg

    from rag_assets.definitions import build_definitions
    from rag_engine.ingest.documents import discover

    target = urlparse(_neo4j_uri())
    with TcpProxy(target.hostname or "127.0.0.1", target.port or 7687) as proxy:
        monkeypatch.setenv("NEO4J_URI", f"bolt://127.0.0.1:{proxy.port}")
        defs = build_definitions(variant("outage"))
        engine = defs.resources["rag"].engine()
        instance = dg.DagsterInstance.ephemeral()
        parts = [r.partition_key for r in discover(engine.pack(unique), include_rejected=True)]
        instance.add_dynamic_partitions(f"{unique}__document_versions", parts)
        tags = {"dagster/asset_partition_range_start": parts[0], "dagster/asset_partition_range_end": parts[-1]}
        graph = defs.resolve_implicit_global_asset_job_def()
        first = graph.get_subset(asset_selection={dg.AssetKey([unique, s]) for s in ("source_documents", "chunks")})
        assert first.execute_in_process(instance=instance, tags=tags, raise_on_error=False).success
        proxy.cut()
        rest = graph.get_subset(asset_selection={dg.AssetKey([unique, s]) for s in ("references", "chunk_index")})
        started = time.perf_counter()
        run = rest.execute_in_process(instance=instance, tags=tags, raise_on_error=False)
        elapsed = time.perf_counter() - started
    assert not run.success
    failures = [e.event_specific_data.user_failure_data for e in run.get_step_failure_events()]
    assert failures and all(f is not None for f in failures), failures
    for failure in failures:
        assert failure.description.split(": ")[1] == "the store is unavailable", failure.description
        assert f"Neo4j is not reachable at bolt://127.0.0.1:{proxy.port}" in failure.description
        assert "\n" not in failure.description
        assert failure.metadata["error_type"].value == "StoreUnavailable"
    assert elapsed < 30, elapsed  # the connect timeout, not the driver's retries per partition
    engine.close()


def test_a_question_asked_through_the_python_api_while_the_store_is_gone_is_one_typed_error(
    base_config, unique, tmp_path, neo4j_driver
):
    """Below the CLI and `rag serve` (a notebook, a Dagster asset): a question whose store stopped
    answering raises the engine's StoreUnavailable, the driver's error as its cause, not the
    driver's own exception."""
    import neo4j

    from rag_engine.retrieval.query import run_query

    target = urlparse(_neo4j_uri())
    with TcpProxy(target.hostname or "127.0.0.1", target.port or 7687) as proxy:
        env = {**engine_env(tmp_path), "NEO4J_URI": f"bolt://127.0.0.1:{proxy.port}"}
        cfg = pick_embedder(with_artifacts(base_config, tmp_path / "artifacts"))
        packless = Engine(cfg, ROOT, env)
        try:
            pack = temp_pack(packless, unique, tmp_path / "corpus", {"note1.md": _doc(1)})
        finally:
            packless.close()
        engine = Engine(cfg, ROOT, env, packs=[pack])
        try:
            ingest_pack(engine, pack, extract=False)
            asked = run_query(engine, "Are laptops encrypted?", "employee", generate=False, local_inference=False)
            assert asked.retrieval.candidates
            proxy.cut()
            with pytest.raises(StoreUnavailable, match=r"^Neo4j is not answering \(\w+\); retry later$") as raised:
                run_query(engine, "Are laptops encrypted?", "employee", generate=False, local_inference=False)
        finally:
            engine.close()
    assert isinstance(raised.value.__cause__, (neo4j.exceptions.ServiceUnavailable, neo4j.exceptions.SessionExpired))
