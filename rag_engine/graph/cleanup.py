"""Stale-path cleanup: remove what the quality report calls dangling, orphaned or stale.

Deleting graph data is an action a person answers for, so it requires an approval
(``rag_engine.governance.approvals``: who, why, and the sha256 of the cleanup plan it approves); without
one, or with one bound to another plan, nothing is deleted. ``plan_cleanup`` counts what would go (a dry run). Current
data is never touched: only edges whose evidence is not current, entities no current chunk
mentions, and the chunk nodes of superseded versions (the DocumentVersion node stays, with its
superseded status, as the record).
"""

from __future__ import annotations

from typing import Any

import neo4j
from pydantic import BaseModel, ConfigDict, field_validator

from rag_engine.errors import ApprovalMismatch, ApprovalRequired
from rag_engine.governance import approvals
from rag_engine.store.connection import single_record
from rag_engine.store.session import read


class CleanupNotApproved(ApprovalRequired):
    """A cleanup was requested without an approval naming who and why."""


class CleanupApproval(BaseModel):
    """Legacy approval (who, why) not bound to a plan: ``run_cleanup`` binds it to the plan it
    reads itself. Prefer ``rag_engine.governance.approvals.Approval`` bound with ``cleanup_inputs``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    approved_by: str
    reason: str

    @field_validator("approved_by", "reason")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v or not v.strip():
            raise ValueError("must not be blank")
        return v.strip()


Approval = CleanupApproval  # the old name, still imported by callers that predate rag_engine.governance.approvals


# What counts as stale, once: each entry selects the stale records as `x` and says how to remove
# them. Cleanup counts and deletes with these; the quality report counts with the same ones.
STALE: dict[str, tuple[str, str]] = {
    "dangling_inferred_edges": (
        "MATCH (:Entity)-[x:RELATED]->(:Entity) WHERE x.pack IN $packs "
        "AND NOT EXISTS { MATCH (c:Chunk {chunk_id: x.chunk_id}) WHERE c.active }",
        "DELETE x",
    ),
    "stale_mentions": (
        "MATCH (:Entity)-[x:MENTIONED_IN]->(c:Chunk) WHERE x.pack IN $packs AND NOT c.active",
        "DELETE x",
    ),
    "dangling_reference_edges": (
        "MATCH (s:Chunk)-[x:REFERENCES]->(t:Chunk) WHERE s.pack IN $packs AND NOT (s.active AND t.active)",
        "DELETE x",
    ),
    "superseded_chunks": (
        "MATCH (d:Document)-[:HAS_VERSION]->(:DocumentVersion {status: 'superseded'})-[:HAS_CHUNK]->(x:Chunk) "
        "WHERE d.pack IN $packs AND NOT x.active",
        "DETACH DELETE x",
    ),
    "orphan_entities": (
        "MATCH (x:Entity) WHERE x.pack IN $packs "
        "AND NOT EXISTS { MATCH (x)-[:MENTIONED_IN]->(c:Chunk) WHERE c.active }",
        "DETACH DELETE x",
    ),
}


def plan_cleanup(driver: neo4j.Driver, database: str, packs: list[str]) -> dict[str, int]:
    """What a cleanup would remove, without removing anything."""
    return {
        name: read(driver, database, f"{match} RETURN count(x) AS n", packs=packs)[0]["n"]
        for name, (match, _) in STALE.items()
    }


def cleanup_inputs(driver: neo4j.Driver, database: str, packs: list[str]) -> dict[str, Any]:
    """The canonical inputs a cleanup approval binds: database, packs and the plan's counts."""
    return {"database": database, "packs": sorted(packs), "plan": plan_cleanup(driver, database, packs)}


def run_cleanup(
    driver: neo4j.Driver,
    database: str,
    packs: list[str],
    approval: approvals.Approval | CleanupApproval | None,
    *,
    run_id: str,
    audit: Any = None,
) -> dict[str, Any]:
    """Remove stale paths in one transaction and record who approved it.

    Refused before anything is deleted without an approval, or with one for another action or
    another plan (``ApprovalMismatch``; the plan is re-counted inside the deleting transaction
    too). ``audit`` (an AuditTrail) records the approval check."""
    if approval is None:
        inputs = cleanup_inputs(driver, database, packs)
        if audit is not None:
            audit.record_approval(
                action=approvals.GRAPH_CLEANUP,
                approval=None,
                expected_hash=approvals.inputs_hash(inputs),
                refused="CleanupNotApproved",
            )
        raise CleanupNotApproved(
            "cleanup deletes graph data: an approval with approved_by and reason, bound to the "
            f"plan (sha256 {approvals.inputs_hash(inputs)}), is required"
        )
    inputs = cleanup_inputs(driver, database, packs)
    if isinstance(approval, CleanupApproval):  # legacy: approves whatever the plan is now
        approval = approvals.Approval.grant(
            approvals.GRAPH_CLEANUP, inputs, approved_by=approval.approved_by, reason=approval.reason
        )
    approvals.require(approval, approvals.GRAPH_CLEANUP, inputs, audit=audit)
    plan = inputs["plan"]

    def work(tx: neo4j.ManagedTransaction) -> dict[str, int]:
        now = {
            name: single_record(tx.run(f"{match} RETURN count(x) AS n", packs=packs), f"cleanup count {name}")["n"]
            for name, (match, _) in STALE.items()
        }
        if now != plan:
            raise ApprovalMismatch(
                f"the cleanup plan changed since it was approved ({now} != {plan}); nothing was deleted"
            )
        removed = {
            name: single_record(tx.run(f"{match} {action} RETURN count(*) AS n", packs=packs), f"cleanup {name}")["n"]
            for name, (match, action) in STALE.items()
        }
        tx.run(
            "CREATE (:Cleanup {run_id: $run_id, packs: $packs, approved_by: $by, reason: $reason, "
            "inputs_hash: $hash, removed: $removed, at: datetime()})",
            run_id=run_id,
            packs=packs,
            by=approval.approved_by,
            reason=approval.reason,
            hash=approval.inputs_hash,
            removed=sum(removed.values()),
        ).consume()
        return removed

    with driver.session(database=database) as session:
        removed = session.execute_write(work)
    return {
        "run_id": run_id,
        "approved_by": approval.approved_by,
        "reason": approval.reason,
        "inputs_hash": approval.inputs_hash,
        "removed": removed,
    }
