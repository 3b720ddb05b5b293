"""Blue/green re-index against the real Neo4j: queries keep answering while a second index is
built, a crash before the switch leaves the old index serving, a rerun continues and switches.

The chunk index is one per database, so this test moves the whole test database to another
embedder and back (the way back reuses the kept index: only what changed since is embedded),
restoring it in ``finally`` whatever happens. A = the suite's embedder (e5 on the local server
under ``make test``), B = the built-in hash embedder (another dimension when A is already it).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from evals.runner import reindex_info
from rag_engine.config import EngineConfig, ModelConfig
from rag_engine.engine import Engine
from rag_engine.errors import ApprovalMismatch, ApprovalRequired, EmbedderMismatch
from rag_engine.governance.approvals import REINDEX_CUTOVER, Approval
from rag_engine.governance.audit import audit_trail
from rag_engine.ingest.pipeline import ingest_pack
from rag_engine.ingest.reindex import ReindexProgress, cutover_plan, render_text, run_reindex
from rag_engine.retrieval.retriever import retrieve
from rag_engine.store import schema
from tests.conftest import ROOT, _embed_env, _neo4j_uri, with_artifacts
from tests.support.packs import POLICY, RUNBOOK, temp_pack

QUESTION = "How fast must a lost laptop be reported?"


def _engine(cfg: EngineConfig, tmp_path: Path, embedder: str) -> Engine:
    cfg = with_artifacts(cfg, tmp_path / "artifacts")
    storage = cfg.storage.model_copy(
        update={
            "artifacts_dir": str(tmp_path / "artifacts"),
            "embedding_cache": str(tmp_path / "embedding_cache.sqlite"),
        }
    )
    models = (
        *cfg.models,
        ModelConfig(
            name="hash-embed-256",
            provider="local_hash",
            role="embedding",
            served_model="feature-hash-v1",
            dimension=256,
            context_limit=100000,
            capabilities=("embeddings",),
            batch_size=2,
        ),
    )
    cfg = cfg.model_copy(
        update={
            "storage": storage,
            # only this test's gate results count (not the project's var/eval from `make eval-gate`)
            "evals": cfg.evals.model_copy(update={"reports_dir": str(tmp_path / "reports"), "gate_dirs": ()}),
            "models": models,
            "defaults": cfg.defaults.model_copy(update={"embedding_model": embedder}),
        }
    )
    env = {"NEO4J_URI": _neo4j_uri(), "RAG_LEDGER_URL": f"sqlite:///{tmp_path / 'ledger.sqlite'}", **_embed_env()}
    return Engine(cfg, ROOT, env)


def _dense_step(engine: Engine) -> dict:
    result = retrieve(engine, QUESTION, "employee", weights={"dense": 1.0})  # whatever the embedder's default weight
    return next(s for s in result.trace if s["step"] == "dense")


def _dense_hits(engine: Engine) -> int:
    return _dense_step(engine)["hits"]


def engines_a_b(base_config: EngineConfig, tmp_path: Path) -> tuple[Engine, Engine]:
    """A (the suite's embedder, the one the test database is indexed with) and B (another one);
    skips when the database is indexed with something else."""
    a_name = base_config.defaults.embedding_model if _embed_env() else "hash-embed-384"
    b_name = "hash-embed-384" if a_name != "hash-embed-384" else "hash-embed-256"
    a = _engine(base_config, tmp_path / "a", a_name)
    b = _engine(base_config, tmp_path / "b", b_name)
    active = schema.current_embedder(a.driver, a.database)
    if active is not None and active["identity"] != a.embedder_identity:
        a.close()
        b.close()
        pytest.skip(f"the test database is indexed with {active['identity']!r}, not the suite's embedder")
    return a, b


def test_blue_green_reindex_serves_throughout_and_resumes(base_config, tmp_path, neo4j_driver, unique):
    a, b = engines_a_b(base_config, tmp_path)
    pack = temp_pack(a, unique, tmp_path / "corpus", {"policy.md": POLICY, "runbook.md": RUNBOOK})
    ingest_pack(a, pack, extract=False)
    a_meta = schema.current_embedder(a.driver, a.database)
    assert a_meta["identity"] == a.embedder_identity
    assert _dense_hits(a) > 0
    assert _dense_step(a)["index_cached"] is True  # the active index is cached per process and epoch
    try:
        # a crash mid-way: one page written, no switch; the old index keeps serving A's queries
        crashed = run_reindex(b, stop_after=1, page_size=2)
        assert crashed.status == "interrupted" and crashed.embedded_chunks > 0
        assert schema.current_embedder(a.driver, a.database)["identity"] == a.embedder_identity
        assert _dense_hits(a) > 0
        with pytest.raises(EmbedderMismatch):  # B may not query before the switch
            _dense_hits(b)

        # the rerun continues while a thread keeps querying through the old index
        answers: list[int] = []
        errors: list[BaseException] = []
        stop = threading.Event()

        def serve() -> None:
            while not stop.is_set():
                try:
                    answers.append(_dense_hits(a))
                except BaseException as exc:
                    errors.append(exc)
                    return

        server = threading.Thread(target=serve)
        phases: list[ReindexProgress] = []

        def progress(p: ReindexProgress) -> None:
            phases.append(p)
            if p.phase == "switch":  # processes on the old config stop before the switch
                stop.set()
                server.join(timeout=60)

        # the cut-over is an approved action (no gate passed for B): one bound to other inputs is
        # refused before anything changes
        plan = cutover_plan(b)
        assert plan == {"action": REINDEX_CUTOVER, "from": a.embedder_identity, "to": b.embedder_identity, "gate": None}
        stale = Approval(approved_by="jane", reason="new embedder", action=REINDEX_CUTOVER, inputs_hash="ab" * 32)
        with pytest.raises(ApprovalMismatch):
            run_reindex(b, approval=stale, page_size=2)
        approval = Approval.grant(REINDEX_CUTOVER, plan, approved_by="jane", reason="new embedder")

        server.start()
        done = run_reindex(b, progress=progress, drop_old=False, page_size=2, approval=approval)
        stop.set()
        server.join(timeout=60)
        assert not errors, errors
        assert answers and all(n > 0 for n in answers), answers
        assert done.status == "switched" and done.resumed and done.cutover == "approved"
        assert done.already_present == crashed.embedded_chunks  # the refused run wrote nothing
        # every current chunk carries the new vector once switched (counts alone can move: other
        # tests' throwaway packs share this database)
        from rag_engine.store.schema import index_coverage

        coverage = index_coverage(b.driver, b.database)
        assert coverage is not None and coverage["complete"], coverage
        assert {p.phase for p in phases} >= {"prepare", "switch", "done"}
        assert "SWITCHED" in render_text(done)

        # B is served from its own index; A's config is refused until restarted with B's
        meta = schema.current_embedder(b.driver, b.database)
        assert (meta["identity"], meta["index"], meta["property"]) == (b.embedder_identity, done.index, done.property)
        # the switch gave the index a new epoch: each process's cached active index expired with it
        # (B's process had cached A's index when its early query was refused)
        first = _dense_step(b)
        assert first["hits"] > 0 and first["index_cached"] is False
        assert _dense_step(b)["index_cached"] is True
        with pytest.raises(EmbedderMismatch):  # A's process cached its own index: refused all the same
            _dense_hits(a)
        assert reindex_info(b) == {"embedder_identity": b.embedder_identity, "complete": True}
        assert done.retired_kept == (a_meta["index"],)
        granted = audit_trail(b).records(event="approval_granted")
        assert [(r.actor, r.payload["action"]) for r in granted] == [("jane", REINDEX_CUTOVER)]

        # without an approval or a passed gate the way back is built but not switched
        with pytest.raises(ApprovalRequired, match="is built and complete, queries still read"):
            run_reindex(a)
        assert schema.current_embedder(a.driver, a.database)["identity"] == b.embedder_identity
        # a gate that passed for A (e.g. a staging run) clears the cut-over without an approval
        gates = tmp_path / "a" / "reports"
        gates.mkdir(parents=True, exist_ok=True)
        gate = {"schema": "rag-eval-gate/2", "status": "pass", "audit": {"candidate_embedder": a.embedder_identity}}
        (gates / "gate.json").write_text(json.dumps(gate))
    finally:
        # back to A: its kept index only lacks what was activated meanwhile (nothing); B's is dropped.
        # The approval is a fallback so the shared database is restored even if the gate file is absent.
        plan_back = cutover_plan(a)
        fallback = Approval.grant(REINDEX_CUTOVER, plan_back or {}, approved_by="test", reason="restore")
        back = run_reindex(a, drop_old=True, approval=fallback)
    assert back.cutover == "gate_passed" and plan_back is not None and plan_back["gate"]["status"] == "pass"
    # the kept index is reused: only chunks it lacks are embedded (in a shared test database,
    # another test's chunk may have been activated in between)
    assert back.status == "switched" and back.resumed and back.already_present > 0, render_text(back)
    assert back.embedded_chunks <= back.active_chunks - back.already_present, render_text(back)
    assert back.dropped == (done.index,)
    assert schema.current_embedder(a.driver, a.database)["identity"] == a.embedder_identity
    step = _dense_step(a)
    assert step["hits"] > 0 and step["index_cached"] is False  # the way back is a new epoch too
    assert reindex_info(a) == {"embedder_identity": a.embedder_identity, "complete": True}
    left = neo4j_driver.execute_query(
        f"MATCH (c:Chunk) WHERE c.{done.property} IS NOT NULL RETURN count(c) AS n", database_=a.database
    ).records[0]["n"]
    assert left == 0
    assert run_reindex(a).status == "already_active"
    a.close()
    b.close()
