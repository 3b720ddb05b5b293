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
