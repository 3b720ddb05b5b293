"""Item 2: two ingests starting together on a fresh database both succeed.

The probe: 2 of 2 concurrent ingests on a fresh database crashed one run in ``ensure_schema``
with ``TransientError: DeadlockDetected`` (plain schema statements, never retried). A fresh
database is a throwaway Neo4j started for this module (tools/neo4j-local on a free port), so
no other test's data or schema is touched.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading

import neo4j
import pytest

from rag_engine.engine import Engine
from rag_engine.ingest.pipeline import ingest_pack
from tests.conftest import ROOT, with_artifacts
from tests.faults.conftest import pick_embedder
from tests.support.packs import POLICY, RUNBOOK, temp_pack

TOOLS = ROOT / "tools" / "neo4j-local"
INGESTS = 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def fresh_neo4j(tmp_path_factory) -> str:
    state = tmp_path_factory.mktemp("fresh-neo4j")
    env = {
        **os.environ,
        "NEO4J_LOCAL_PORT": str(_free_port()),
        "NEO4J_LOCAL_DIR": str(state),
        "NEO4J_LOCAL_HEAP": "512m",
        "NEO4J_LOCAL_START_TIMEOUT": "240",
    }
    started = subprocess.run([str(TOOLS / "start.sh")], env=env, capture_output=True, text=True, timeout=600)
    if started.returncode != 0:
        pytest.fail(f"could not start a throwaway Neo4j: {started.stderr[-2000:]}")
    uri = f"bolt://127.0.0.1:{env['NEO4J_LOCAL_PORT']}"
    try:
        yield uri
    finally:
        subprocess.run([str(TOOLS / "stop.sh")], env=env, capture_output=True, timeout=120)


def _schema_objects(uri: str) -> tuple[int, int]:
    with neo4j.GraphDatabase.driver(uri, auth=None) as driver:
        constraints, _, _ = driver.execute_query("SHOW CONSTRAINTS YIELD name RETURN count(*) AS n")
        indexes, _, _ = driver.execute_query("SHOW INDEXES YIELD name RETURN count(*) AS n")
    return constraints[0]["n"], indexes[0]["n"]


def test_concurrent_ingests_on_a_fresh_database_all_succeed(fresh_neo4j, base_config, tmp_path):
    assert _schema_objects(fresh_neo4j)[0] == 0  # really fresh: no constraint yet
    engines, packs = [], []
    for i in range(INGESTS):
        base = tmp_path / f"ingest{i}"
        cfg = pick_embedder(with_artifacts(base_config, base / "artifacts"))
        env = {"NEO4J_URI": fresh_neo4j, "RAG_LEDGER_URL": f"sqlite:///{base / 'ledger.sqlite'}"}
        if os.environ.get("RAG_EMBED_ENDPOINT"):
            env["RAG_EMBED_ENDPOINT"] = os.environ["RAG_EMBED_ENDPOINT"]
        engine = Engine(cfg, ROOT, env)  # one engine (one driver) per ingest, as two processes would have
        engines.append(engine)
        packs.append(temp_pack(engine, f"fresh{i}", base / "corpus", {"policy.md": POLICY, "runbook.md": RUNBOOK}))

    barrier = threading.Barrier(INGESTS)
    outcomes: dict[int, object] = {}

    def run(i: int) -> None:
        barrier.wait()
        try:
            outcomes[i] = ingest_pack(engines[i], packs[i], extract=False)
        except Exception as exc:
            outcomes[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(INGESTS)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=600)
        for i in range(INGESTS):
            outcome = outcomes.get(i)
            assert isinstance(outcome, dict), f"ingest {i} crashed: {type(outcome).__name__}: {outcome}"
            for step, report in outcome.items():
                assert not report.failed and not report.rejected, (i, step, report.failed, report.rejected)
            assert len(outcome["graph_writes"].done) == 2
        constraints, indexes = _schema_objects(fresh_neo4j)
        assert constraints >= 7 and indexes >= 7
    finally:
        for engine in engines:
            engine.close()
