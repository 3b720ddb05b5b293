"""Stale-path cleanup: remove what the quality report calls dangling, orphaned or stale.

Deleting graph data is an action a person answers for, so it requires an approval
(``rag_engine.governance.approvals``: who, why, and the sha256 of the cleanup plan it approves); without
one, or with one bound to another plan, nothing is deleted. ``plan_cleanup`` counts what would go (a dry run). Current
data is never touched: only edges whose evidence is not current, entities no current chunk
mentions, and the chunk nodes of superseded versions (the DocumentVersion node stays, with its
superseded status, as the record).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import Any

import neo4j

from rag_engine.errors import ApprovalMismatch, ApprovalRequired
from rag_engine.governance import approvals
from rag_engine.graph.quality_predicates import has_provenance, lacks_provenance
from rag_engine.store.connection import single_record
from rag_engine.store.session import read


class CleanupNotApproved(ApprovalRequired):
    """A cleanup was requested without an approval naming who and why."""


# What counts as stale, once: each entry selects the stale records as `x` and says how to remove
# them. Cleanup counts and deletes with these; the quality report counts with the same ones.
STALE: dict[str, tuple[str, str]] = {
    "unprovenanced_inferred_edges": (
        f"MATCH (a:Entity)-[x:RELATED]->(:Entity) WHERE coalesce(x.pack, a.pack) IN $packs AND {lacks_provenance('x')}",
        "DELETE x",
    ),
    "dangling_inferred_edges": (
        "MATCH (:Entity)-[x:RELATED]->(:Entity) WHERE x.pack IN $packs "
        f"AND {has_provenance('x')} "
        "AND NOT EXISTS { MATCH (c:Chunk {chunk_id: x.chunk_id}) WHERE c.active AND c.pack = x.pack }",
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

# What each stale record is, as text an approval can bind: the ids (and versions) it deletes. Two
# plans with the same counts over different records have different inputs hashes.
_IDENTITY: dict[str, str] = {
    "unprovenanced_inferred_edges": "startNode(x).entity_id + '-' + coalesce(x.type, '') + '->' "
    "+ endNode(x).entity_id + '@' + coalesce(x.chunk_id, '') + '#' + coalesce(x.doc_version, '')",
    "dangling_inferred_edges": "startNode(x).entity_id + '-' + x.type + '->' + endNode(x).entity_id + '@' "
    "+ x.chunk_id + '#' + x.doc_version",
    "stale_mentions": "startNode(x).entity_id + '@' + endNode(x).chunk_id + '#' + coalesce(endNode(x).doc_version, '')",
    "dangling_reference_edges": "startNode(x).chunk_id + '#' + coalesce(startNode(x).doc_version, '') + '->' "
    "+ endNode(x).chunk_id + '#' + coalesce(endNode(x).doc_version, '')",
    "superseded_chunks": "x.chunk_id + '#' + coalesce(x.doc_version, '')",
    "orphan_entities": "x.entity_id",
}


def _targets_query(name: str) -> str:
    match, _ = STALE[name]
    return f"{match} WITH {_IDENTITY[name]} AS id ORDER BY id RETURN count(*) AS n, collect(id) AS ids"


def _digest(ids: list[str]) -> str:
    return hashlib.sha256("\n".join(sorted(ids)).encode("utf-8")).hexdigest()


def _targets(run: Callable[[str], Mapping[str, Any]]) -> tuple[dict[str, int], dict[str, str]]:
    """(count per category, sha256 of its sorted record ids per category), read through ``run``."""
    counts: dict[str, int] = {}
    digests: dict[str, str] = {}
    for name in STALE:
        row = run(_targets_query(name))
        counts[name], digests[name] = int(row["n"]), _digest(row["ids"])
    return counts, digests


def plan_cleanup(driver: neo4j.Driver, database: str, packs: list[str]) -> dict[str, int]:
    """What a cleanup would remove, without removing anything."""
    counts: dict[str, int] = cleanup_inputs(driver, database, packs)["plan"]
    return counts


def cleanup_inputs(driver: neo4j.Driver, database: str, packs: list[str]) -> dict[str, Any]:
    """The canonical inputs a cleanup approval binds: database, packs, the plan's counts and, per
    category, the sha256 of the ids (with their versions) it would delete: an approval of one plan
    never deletes the records of another with the same counts."""
    counts, digests = _targets(lambda q: read(driver, database, q, packs=packs)[0])
    return {"database": database, "packs": sorted(packs), "plan": counts, "targets": digests}


def run_cleanup(
    driver: neo4j.Driver,
    database: str,
    packs: list[str],
    approval: approvals.Approval | None,
    *,
    run_id: str,
    audit: Any = None,
    actor: str | None = None,
) -> dict[str, Any]:
    """Remove stale paths in one transaction and record who approved it.

    Refused before anything is deleted without an approval, or with one for another action or
    another plan (``ApprovalMismatch``; the plan is re-counted inside the deleting transaction
    too). ``audit`` (an AuditTrail) records the approval check; ``actor`` is who asked, recorded
    on a refusal without an approval."""
    if approval is None:
        inputs = cleanup_inputs(driver, database, packs)
        if audit is not None:
            audit.record_approval(
                action=approvals.GRAPH_CLEANUP,
                approval=None,
                expected_hash=approvals.inputs_hash(inputs),
                refused="CleanupNotApproved",
                actor=actor,
                run_id=run_id,
            )
        raise CleanupNotApproved(
            "cleanup deletes graph data: an approval with approved_by and reason, bound to the "
            f"plan (sha256 {approvals.inputs_hash(inputs)}), is required"
        )
    inputs = cleanup_inputs(driver, database, packs)
    approvals.require(approval, approvals.GRAPH_CLEANUP, inputs, audit=audit, actor=actor, run_id=run_id)
    plan = inputs["plan"]

    def work(tx: neo4j.ManagedTransaction) -> dict[str, int]:
        now, digests = _targets(lambda q: dict(single_record(tx.run(q, packs=packs), "cleanup plan")))
        if now != plan or digests != inputs["targets"]:
            raise ApprovalMismatch(
                f"the cleanup plan changed since it was approved ({now} vs {plan}, or other records "
                "with the same counts); nothing was deleted"
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
