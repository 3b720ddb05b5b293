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


# (name, count query, delete query): each pair selects exactly the same records
_STEPS: tuple[tuple[str, str, str], ...] = (
    ("dangling_inferred_edges",
     "MATCH (:Entity)-[r:RELATED]->(:Entity) WHERE r.pack IN $packs "
     "AND NOT EXISTS { MATCH (c:Chunk {chunk_id: r.chunk_id}) WHERE c.active } RETURN count(r) AS n",
     "MATCH (:Entity)-[r:RELATED]->(:Entity) WHERE r.pack IN $packs "
     "AND NOT EXISTS { MATCH (c:Chunk {chunk_id: r.chunk_id}) WHERE c.active } DELETE r RETURN count(*) AS n"),
    ("stale_mentions",
     "MATCH (:Entity)-[m:MENTIONED_IN]->(c:Chunk) WHERE m.pack IN $packs AND NOT c.active RETURN count(m) AS n",
     "MATCH (:Entity)-[m:MENTIONED_IN]->(c:Chunk) WHERE m.pack IN $packs AND NOT c.active DELETE m "
     "RETURN count(*) AS n"),
    ("dangling_reference_edges",
     "MATCH (s:Chunk)-[e:REFERENCES]->(t:Chunk) WHERE s.pack IN $packs AND NOT (s.active AND t.active) "
     "RETURN count(e) AS n",
     "MATCH (s:Chunk)-[e:REFERENCES]->(t:Chunk) WHERE s.pack IN $packs AND NOT (s.active AND t.active) "
     "DELETE e RETURN count(*) AS n"),
    ("superseded_chunks",
     "MATCH (d:Document)-[:HAS_VERSION]->(:DocumentVersion {status: 'superseded'})-[:HAS_CHUNK]->(c:Chunk) "
     "WHERE d.pack IN $packs AND NOT c.active RETURN count(c) AS n",
     "MATCH (d:Document)-[:HAS_VERSION]->(:DocumentVersion {status: 'superseded'})-[:HAS_CHUNK]->(c:Chunk) "
     "WHERE d.pack IN $packs AND NOT c.active DETACH DELETE c RETURN count(*) AS n"),
    ("orphan_entities",
     "MATCH (e:Entity) WHERE e.pack IN $packs AND NOT EXISTS { MATCH (e)-[:MENTIONED_IN]->(c:Chunk) "
     "WHERE c.active } RETURN count(e) AS n",
     "MATCH (e:Entity) WHERE e.pack IN $packs AND NOT EXISTS { MATCH (e)-[:MENTIONED_IN]->(c:Chunk) "
     "WHERE c.active } DETACH DELETE e RETURN count(*) AS n"),
)


def plan_cleanup(driver: neo4j.Driver, database: str, packs: list[str]) -> dict[str, int]:
    """What a cleanup would remove, without removing anything."""
    return {name: read(driver, database, count, packs=packs)[0]["n"] for name, count, _ in _STEPS}


def run_cleanup(driver: neo4j.Driver, database: str, packs: list[str], approval: Approval | None,
                *, run_id: str) -> dict[str, Any]:
    """Remove stale paths in one transaction and record who approved it; refuse without approval."""
    if approval is None:
        raise CleanupNotApproved("cleanup deletes graph data: an approval with approved_by and reason is required")

    def work(tx: neo4j.ManagedTransaction) -> dict[str, int]:
        removed = {name: tx.run(delete, packs=packs).single()["n"] for name, _, delete in _STEPS}
        tx.run("CREATE (:Cleanup {run_id: $run_id, packs: $packs, approved_by: $by, reason: $reason, "
               "removed: $removed, at: datetime()})", run_id=run_id, packs=packs, by=approval.approved_by,
               reason=approval.reason, removed=sum(removed.values())).consume()
        return removed

    with driver.session(database=database) as session:
        removed = session.execute_write(work)
    return {"run_id": run_id, "approved_by": approval.approved_by, "reason": approval.reason, "removed": removed}
