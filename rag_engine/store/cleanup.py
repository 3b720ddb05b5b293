"""Cypher of stale-path cleanup: what counts as stale, counted, identified and deleted
(``graph.cleanup`` decides whether a deletion is approved; ``graph.quality`` counts the same).

Only edges whose evidence is not current, entities no current chunk mentions, and the chunk
nodes of superseded versions are selected; current data never is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import neo4j

from rag_engine.store.connection import single_record
from rag_engine.store.quality_predicates import has_provenance, lacks_provenance
from rag_engine.store.session import read

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


def stale_targets(driver: neo4j.Driver, database: str, packs: Sequence[str]) -> dict[str, tuple[int, list[str]]]:
    """Per category: how many records are stale and their identities (sorted), each category in
    its own read transaction."""
    out = {}
    for name in STALE:
        row = read(driver, database, _targets_query(name), packs=list(packs))[0]
        out[name] = (int(row["n"]), list(row["ids"]))
    return out


def stale_targets_in(tx: neo4j.ManagedTransaction, packs: Sequence[str]) -> dict[str, tuple[int, list[str]]]:
    """``stale_targets`` inside the caller's (deleting) transaction."""
    out = {}
    for name in STALE:
        row = single_record(tx.run(_targets_query(name), packs=list(packs)), "cleanup plan")
        out[name] = (int(row["n"]), list(row["ids"]))
    return out


def delete_stale(tx: neo4j.ManagedTransaction, packs: Sequence[str]) -> dict[str, int]:
    """Delete every stale record, category by category; how many of each went."""
    return {
        name: single_record(tx.run(f"{match} {action} RETURN count(*) AS n", packs=list(packs)), f"cleanup {name}")["n"]
        for name, (match, action) in STALE.items()
    }


_RECORD = """
CREATE (:Cleanup {run_id: $run_id, packs: $packs, approved_by: $by, reason: $reason,
                  inputs_hash: $hash, removed: $removed, at: datetime()})
"""


def record_cleanup(tx: neo4j.ManagedTransaction, **fields: Any) -> None:
    """One (:Cleanup) record: run_id, packs, by (who approved), reason, hash (of the approved
    inputs), removed (how many records went)."""
    tx.run(_RECORD, **fields).consume()
