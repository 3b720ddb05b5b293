"""Audit trail and the one approval path: on SQLite, on the real PostgreSQL, through the query
path and graph cleanup on the real Neo4j, and through `rag audit`."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy

from rag_engine.engine import Engine
from rag_engine.errors import ApprovalMismatch, ApprovalRequired, AuditError
from rag_engine.governance.approvals import (
    DELETE_AUDIT_RECORDS,
    GRAPH_CLEANUP,
    Approval,
    canonical,
    inputs_hash,
    require,
)
from rag_engine.governance.audit import AuditRecord, AuditTrail, audit_trail, parse_since
from tests.conftest import ROOT, SENTINEL, with_artifacts
from tests.support.packs import POLICY, RUNBOOK, temp_pack

PUBLIC_FAQ = """---
id: TCK-5
collection: kb_public
---
# Visitor FAQ

## Parking
Visitors park in the north garage and register at reception with a photo identity card.
"""


# -- approvals ------------------------------------------------------------------------------


def test_inputs_hash_is_canonical():
    assert inputs_hash({"b": [1, 2], "a": {"y": 1, "x": 2}}) == inputs_hash({"a": {"x": 2, "y": 1}, "b": (1, 2)})
    assert canonical({"b": 1, "a": 2}) == '{"a":2,"b":1}'
    assert inputs_hash({"a": 1}) != inputs_hash({"a": 2})


def test_require_refuses_missing_other_action_and_other_inputs(tmp_path):
    trail = AuditTrail(f"sqlite:///{tmp_path / 'l.sqlite'}")
    inputs = {"plan": {"orphans": 3}}
    ok = Approval.grant(GRAPH_CLEANUP, inputs, approved_by="jane", reason="superseded versions")
    require(ok, GRAPH_CLEANUP, inputs, audit=trail)
    with pytest.raises(ApprovalRequired):
        require(None, GRAPH_CLEANUP, inputs, audit=trail)
    with pytest.raises(ApprovalMismatch, match="not 'delete_audit_records'"):
        require(ok, DELETE_AUDIT_RECORDS, inputs, audit=trail)
    with pytest.raises(ApprovalMismatch, match="binds inputs"):
        require(ok, GRAPH_CLEANUP, {"plan": {"orphans": 4}}, audit=trail)
    events = [r.event for r in trail.records()]
    assert events == ["approval_granted", "approval_refused", "approval_refused", "approval_refused"]
    granted = trail.records(event="approval_granted")[0]
    assert granted.actor == "jane" and granted.payload["inputs_hash"] == inputs_hash(inputs)
    with pytest.raises(ValueError, match="must not be blank"):
        Approval(approved_by=" ", reason="x", action=GRAPH_CLEANUP, inputs_hash="0" * 64)


# -- the trail on both backends ---------------------------------------------------------------


def _deletion_round(trail: AuditTrail) -> None:
    """Old records are deleted only with an approval bound to the exact plan; refusals change nothing."""
    session = "s-" + uuid.uuid4().hex[:8]
    old = datetime.now(UTC) - timedelta(days=400)
    trail.append(
        *[
            AuditRecord(
                created_at=old, event="query", session_id=session, role="public", payload={"question": f"old {i}"}
            )
            for i in range(3)
        ]
    )
    trail.append(AuditRecord(event="query", session_id=session, role="public", payload={"question": "new"}))
    plan = trail.deletion_plan(365)
    assert plan["records"] >= 3
    before = trail.count()
    with pytest.raises(ApprovalRequired):
        trail.delete_expired(365, None)
    assert trail.count() == before + 1  # only the refusal was appended
    wrong = Approval(approved_by="jane", reason="retention", action=DELETE_AUDIT_RECORDS, inputs_hash="ab" * 32)
    with pytest.raises(ApprovalMismatch):
        trail.delete_expired(365, wrong)
    assert trail.count() == before + 2
    assert len(trail.records(session_id=session)) == 4
    right = Approval.grant(DELETE_AUDIT_RECORDS, trail.deletion_plan(365), approved_by="jane", reason="retention")
    done = trail.delete_expired(365, right)
    assert done["deleted"] == plan["records"]
    assert [r.payload["question"] for r in trail.records(session_id=session)] == ["new"]
    assert trail.records(event="audit_records_deleted")[-1].actor == "jane"
    assert [r.event for r in trail.records(since=datetime.now(UTC) - timedelta(minutes=5))][-4:] == [
        "approval_refused",
        "approval_refused",
        "approval_granted",
        "audit_records_deleted",
    ]


def test_audit_trail_sqlite(tmp_path):
    trail = AuditTrail(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    _deletion_round(trail)
    assert trail.dialect == "sqlite"


@pytest.mark.postgres
def test_audit_trail_postgres(postgres_url):
    admin = sqlalchemy.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        if not conn.execute(sqlalchemy.text("SELECT 1 FROM pg_database WHERE datname = 'rag_audit_test'")).scalar():
            conn.execute(sqlalchemy.text("CREATE DATABASE rag_audit_test"))
    admin.dispose()
    trail = AuditTrail(postgres_url.rsplit("/", 1)[0] + "/rag_audit_test")
    assert trail.dialect == "postgresql"
    _deletion_round(trail)
    trail.dispose()


def test_parse_since():
    now = datetime(2025, 6, 10, 12, tzinfo=UTC)
    assert parse_since("2d", now) == now - timedelta(days=2)
    assert parse_since("2025-06-01", now) == datetime(2025, 6, 1, tzinfo=UTC)
    with pytest.raises(AuditError):
        parse_since("yesterday", now)


# -- the query path --------------------------------------------------------------------------


@pytest.fixture
def kb_engine(base_config, tmp_path, unique, neo4j_driver):
    """A throwaway KB pack (four chunks), its own ledger: the query path end to end."""
    from rag_engine.ingest.pipeline import ingest_pack
    from tests.conftest import _embed_env, _neo4j_uri

    cfg = with_artifacts(base_config, tmp_path / "artifacts")
    env = {
        "NEO4J_URI": _neo4j_uri(),
        "RAG_LEDGER_URL": f"sqlite:///{tmp_path / 'ledger.sqlite'}",
        "OPENAI_API_KEY": SENTINEL,
        **_embed_env(),
    }
    pack = temp_pack(
        Engine(cfg, ROOT, env, packs=[]),
        unique,
        tmp_path / "corpus",
        {"policy.md": POLICY, "runbook.md": RUNBOOK, "faq.md": PUBLIC_FAQ},
    )
    eng = Engine(cfg, ROOT, env, packs=[pack])
    ingest_pack(eng, pack, extract=False)
    yield eng
    eng.close()


def test_query_session_blocked_collection_and_fallback_are_audited(kb_engine):
    from rag_engine.retrieval.query import run_query

    session = "sess-" + uuid.uuid4().hex[:6]
    out = run_query(
        kb_engine,
        "Report a lost laptop within what time?",
        "employee",
        session_id=session,
        collections=["kb_internal", "adgm_public"],
        local_inference=False,
    )
    run_query(kb_engine, "Where do visitors park?", "public", session_id=session, local_inference=False)
    trail = audit_trail(kb_engine)
    records = trail.records(session_id=session)
    events = [r.event for r in records]
    assert events.count("query") == 2 and "collections_blocked" in events and "generation_fallback" in events
    first = records[0].payload
    assert records[0].role == "employee" and first["collections_blocked"] == ["adgm_public"]
    assert first["collections_permitted"] == ["kb_internal"]
    assert first["question"] is None and first["question_redacted"]  # kb_internal is sensitive in config
    assert [c["chunk_id"] for c in first["candidates"]] == [c.chunk_id for c in out.retrieval.candidates]
    assert out.retrieval.candidates and all(  # the candidates themselves carry the session and the time
        c.session_id == session and c.retrieved_at is not None for c in out.retrieval.candidates
    )
    assert all(c["sources"] for c in first["candidates"]) and first["retrieved_at"]
    assert first["cited"] == list(out.answer.citations) and first["answer"]["method"] == "extractive"
    assert first["run_id"] == f"session:{session}" and isinstance(first["model_calls"], list)
    public = next(r for r in records if r.event == "query" and r.role == "public").payload
    assert public["question"] == "Where do visitors park?"
    assert {r.query_id for r in records if r.role == "employee"} == {records[0].query_id}
    blob = json.dumps([r.model_dump(mode="json") for r in trail.records()])
    assert "Report a lost laptop" not in blob and SENTINEL not in blob
    assert [r.role for r in trail.records(role="public", event="query")] == ["public"]


def test_graph_cleanup_refuses_missing_and_mismatched_approval_before_any_change(kb_engine, unique):
    from rag_engine.graph.cleanup import CleanupNotApproved, cleanup_inputs, run_cleanup

    eng = kb_engine
    eng.driver.execute_query(
        "UNWIND range(1, 3) AS i CREATE (:Entity {entity_id: $p + '-orphan-' + i, pack: $p})", p=unique
    )

    def nodes() -> int:
        rows, _, _ = eng.driver.execute_query("MATCH (n {pack: $p}) RETURN count(n) AS n", p=unique)
        return rows[0]["n"]

    trail = audit_trail(eng)
    before, plan = nodes(), cleanup_inputs(eng.driver, eng.database, [unique])
    assert plan["plan"]["orphan_entities"] == 3
    with pytest.raises(CleanupNotApproved):
        run_cleanup(eng.driver, eng.database, [unique], None, run_id="t", audit=trail)
    stale = Approval(
        approved_by="jane",
        reason="orphans",
        action=GRAPH_CLEANUP,
        inputs_hash=inputs_hash({**plan, "plan": {**plan["plan"], "orphan_entities": 2}}),
    )
    with pytest.raises(ApprovalMismatch):
        run_cleanup(eng.driver, eng.database, [unique], stale, run_id="t", audit=trail)
    assert nodes() == before
    ok = Approval.grant(GRAPH_CLEANUP, plan, approved_by="jane", reason="orphans")
    done = run_cleanup(eng.driver, eng.database, [unique], ok, run_id="t", audit=trail)
    assert done["removed"]["orphan_entities"] == 3 and nodes() == before - 3
    assert done["inputs_hash"] == inputs_hash(plan)
    assert [r.event for r in trail.records() if r.event.startswith("approval")] == [
        "approval_refused",
        "approval_refused",
        "approval_granted",
    ]


def test_cli_audit_lists_and_filters(kb_engine, monkeypatch, tmp_path):
    from rag_engine.retrieval.query import run_query
    from tests.support.cli import rag

    session = "cli-" + uuid.uuid4().hex[:6]
    run_query(kb_engine, "Where do visitors park?", "public", session_id=session, local_inference=False)
    env = {"RAG_LEDGER_URL": kb_engine.env["RAG_LEDGER_URL"]}
    res = rag("audit", "--session", session, "--event", "query", "--json", env=env)
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["count"] == 1 and data["records"][0]["payload"]["question"] == "Where do visitors park?"
    res = rag("audit", "--session", session, env=env)
    assert res.exit_code == 0 and "query" in res.stdout and session in res.stdout
    res = rag("audit", "--since", "nonsense", "--json", env=env)
    assert res.exit_code == 2 and json.loads(res.stdout)["error"]["type"] == "AuditError"
    res = rag("audit", "purge", "--dry-run", "--json", env=env)
    assert res.exit_code == 0 and len(json.loads(res.stdout)["inputs_hash"]) == 64
    res = rag(
        "audit",
        "purge",
        "--approved-by",
        "jane",
        "--reason",
        "retention",
        "--inputs-hash",
        "cd" * 32,
        "--json",
        env=env,
    )
    assert res.exit_code == 2 and json.loads(res.stdout)["error"]["type"] == "ApprovalMismatch"
