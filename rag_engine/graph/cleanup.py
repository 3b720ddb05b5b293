"""Stale-path cleanup: remove what the quality report calls dangling, orphaned or stale.

Deleting graph data is an action a person answers for, so it requires an Approval (who, why);
without one nothing is deleted. ``plan_cleanup`` counts what would go (a dry run). Current
data is never touched: only edges whose evidence is not current, entities no current chunk
mentions, and the chunk nodes of superseded versions (the DocumentVersion node stays, with its
superseded status, as the record).
"""

from __future__ import annotations

from typing import Any

import neo4j
from pydantic import BaseModel, ConfigDict, field_validator

from rag_engine.errors import RagError
from rag_engine.retrieval.store_reads import read


class CleanupNotApproved(RagError):
    """A cleanup was requested without an approval naming who and why."""


class Approval(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    approved_by: str
    reason: str

    @field_validator("approved_by", "reason")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v or not v.strip():
            raise ValueError("must not be blank")
        return v.strip()


# What counts as stale, once: each entry selects the stale records as `x` and says how to remove
# them. Cleanup counts and deletes with these; the quality report counts with the same ones.
STALE: dict[str, tuple[str, str]] = {
    "dangling_inferred_edges": (
        "MATCH (:Entity)-[x:RELATED]->(:Entity) WHERE x.pack IN $packs "
        "AND NOT EXISTS { MATCH (c:Chunk {chunk_id: x.chunk_id}) WHERE c.active }", "DELETE x"),
    "stale_mentions": (
        "MATCH (:Entity)-[x:MENTIONED_IN]->(c:Chunk) WHERE x.pack IN $packs AND NOT c.active", "DELETE x"),
    "dangling_reference_edges": (
        "MATCH (s:Chunk)-[x:REFERENCES]->(t:Chunk) WHERE s.pack IN $packs AND NOT (s.active AND t.active)",
        "DELETE x"),
    "superseded_chunks": (
        "MATCH (d:Document)-[:HAS_VERSION]->(:DocumentVersion {status: 'superseded'})-[:HAS_CHUNK]->(x:Chunk) "
        "WHERE d.pack IN $packs AND NOT x.active", "DETACH DELETE x"),
    "orphan_entities": (
        "MATCH (x:Entity) WHERE x.pack IN $packs "
        "AND NOT EXISTS { MATCH (x)-[:MENTIONED_IN]->(c:Chunk) WHERE c.active }", "DETACH DELETE x"),
}


def plan_cleanup(driver: neo4j.Driver, database: str, packs: list[str]) -> dict[str, int]:
    """What a cleanup would remove, without removing anything."""
    return {name: read(driver, database, f"{match} RETURN count(x) AS n", packs=packs)[0]["n"]
            for name, (match, _) in STALE.items()}


def run_cleanup(driver: neo4j.Driver, database: str, packs: list[str], approval: Approval | None,
                *, run_id: str) -> dict[str, Any]:
    """Remove stale paths in one transaction and record who approved it; refuse without approval."""
    if approval is None:
        raise CleanupNotApproved("cleanup deletes graph data: an approval with approved_by and reason is required")

    def work(tx: neo4j.ManagedTransaction) -> dict[str, int]:
        removed = {name: tx.run(f"{match} {action} RETURN count(*) AS n", packs=packs).single()["n"]
                   for name, (match, action) in STALE.items()}
        tx.run("CREATE (:Cleanup {run_id: $run_id, packs: $packs, approved_by: $by, reason: $reason, "
               "removed: $removed, at: datetime()})", run_id=run_id, packs=packs, by=approval.approved_by,
               reason=approval.reason, removed=sum(removed.values())).consume()
        return removed

    with driver.session(database=database) as session:
        removed = session.execute_write(work)
    return {"run_id": run_id, "approved_by": approval.approved_by, "reason": approval.reason, "removed": removed}
