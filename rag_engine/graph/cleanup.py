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
from collections.abc import Mapping
from typing import Any

import neo4j

from rag_engine.errors import ApprovalMismatch, ApprovalRequired
from rag_engine.governance import approvals
from rag_engine.store import cleanup as stale


class CleanupNotApproved(ApprovalRequired):
    """A cleanup was requested without an approval naming who and why."""


def _digest(ids: list[str]) -> str:
    return hashlib.sha256("\n".join(sorted(ids)).encode("utf-8")).hexdigest()


def _targets(found: Mapping[str, tuple[int, list[str]]]) -> tuple[dict[str, int], dict[str, str]]:
    """(count per category, sha256 of its sorted record ids per category)."""
    return {name: n for name, (n, _) in found.items()}, {name: _digest(ids) for name, (_, ids) in found.items()}


def plan_cleanup(driver: neo4j.Driver, database: str, packs: list[str]) -> dict[str, int]:
    """What a cleanup would remove, without removing anything."""
    counts: dict[str, int] = cleanup_inputs(driver, database, packs)["plan"]
    return counts


def cleanup_inputs(driver: neo4j.Driver, database: str, packs: list[str]) -> dict[str, Any]:
    """The canonical inputs a cleanup approval binds: database, packs, the plan's counts and, per
    category, the sha256 of the ids (with their versions) it would delete: an approval of one plan
    never deletes the records of another with the same counts."""
    counts, digests = _targets(stale.stale_targets(driver, database, packs))
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
        now, digests = _targets(stale.stale_targets_in(tx, packs))
        if now != plan or digests != inputs["targets"]:
            raise ApprovalMismatch(
                f"the cleanup plan changed since it was approved ({now} vs {plan}, or other records "
                "with the same counts); nothing was deleted"
            )
        removed = stale.delete_stale(tx, packs)
        stale.record_cleanup(
            tx,
            run_id=run_id,
            packs=packs,
            by=approval.approved_by,
            reason=approval.reason,
            hash=approval.inputs_hash,
            removed=sum(removed.values()),
        )
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
