"""Cypher of path feedback (``graph.feedback`` validates and composes): constant text with
parameters that can only add an (:Observation) and its edges, or read them back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import neo4j

from rag_engine.store.connection import single_record

_FOUND = """
OPTIONAL MATCH (e:Entity) WHERE e.entity_id IN $entity_ids
  AND ($collections IS NULL OR EXISTS {
        MATCH (e)-[:MENTIONED_IN]->(m:Chunk) WHERE m.collection IN $collections })
WITH collect(DISTINCT e.entity_id) AS entities
OPTIONAL MATCH (c:Chunk) WHERE c.chunk_id IN $chunk_ids AND ($collections IS NULL OR c.collection IN $collections)
RETURN entities, collect(DISTINCT c.chunk_id) AS chunks
"""

_CREATE = """
CREATE (o:Observation {observation_id: $observation_id, verdict: $verdict, note: $note, actor: $actor,
                       query_hash: $query_hash, path_signature: $signature, path_id: $path_id,
                       created_at: datetime()})
RETURN toString(o.created_at) AS created_at
"""

_OBSERVES = """
MATCH (o:Observation {observation_id: $observation_id})
UNWIND $entity_ids AS eid
MATCH (e:Entity {entity_id: eid})
CREATE (o)-[:OBSERVES]->(e)
RETURN count(*) AS n
"""

_ABOUT_CHUNK = """
MATCH (o:Observation {observation_id: $observation_id})
UNWIND $chunk_ids AS cid
MATCH (c:Chunk {chunk_id: cid})
CREATE (o)-[:ABOUT_CHUNK]->(c)
RETURN count(*) AS n
"""

_SUMMARY = """
MATCH (o:Observation)
RETURN o.path_signature AS signature, o.path_id AS path_id,
       sum(CASE o.verdict WHEN 'useful' THEN 1 ELSE 0 END) AS useful,
       sum(CASE o.verdict WHEN 'harmful' THEN 1 ELSE 0 END) AS harmful
ORDER BY harmful DESC, useful ASC, signature
"""


def found_nodes(
    tx: neo4j.ManagedTransaction,
    *,
    entity_ids: Sequence[str],
    chunk_ids: Sequence[str],
    collections: Sequence[str] | None,
) -> tuple[set[str], set[str]]:
    """(entity ids, chunk ids) of these that exist and that ``collections`` may read (None: any)."""
    found = single_record(
        tx.run(
            _FOUND,
            entity_ids=list(entity_ids),
            chunk_ids=list(chunk_ids),
            collections=None if collections is None else list(collections),
        ),
        "feedback path lookup",
    )
    return set(found["entities"]), set(found["chunks"])


def create_observation(tx: neo4j.ManagedTransaction, params: dict[str, Any]) -> str:
    """Create one (:Observation) from ``params``; its created_at as text."""
    created: str = single_record(tx.run(_CREATE, params), "observation create")["created_at"]
    return created


def observe(
    tx: neo4j.ManagedTransaction, *, observation_id: str, entity_ids: Sequence[str], chunk_ids: Sequence[str]
) -> tuple[int, int]:
    """Link the observation to its entities (OBSERVES) and evidence chunks (ABOUT_CHUNK); how many of each."""
    n_entities = single_record(
        tx.run(_OBSERVES, observation_id=observation_id, entity_ids=list(entity_ids)), "OBSERVES edges"
    )["n"]
    n_chunks = single_record(
        tx.run(_ABOUT_CHUNK, observation_id=observation_id, chunk_ids=list(chunk_ids)), "ABOUT_CHUNK edges"
    )["n"]
    return int(n_entities), int(n_chunks)


def feedback_rows(driver: neo4j.Driver, database: str) -> list[dict[str, Any]]:
    """Per path signature: its path id and useful/harmful counts, most harmful first (a read-access session)."""
    with driver.session(database=database, default_access_mode=neo4j.READ_ACCESS) as session:
        return session.execute_read(lambda tx: [r.data() for r in tx.run(_SUMMARY)])
