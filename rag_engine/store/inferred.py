"""Cypher of the LLM-inferred graph: entities, their mentions, RELATED edges and extraction runs
(``graph.writer`` composes these into transactions). The caller passes every value as a parameter.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import neo4j

_DROP_INFERRED_FOR_DOC = """
MATCH (:Entity)-[r:RELATED {doc_id: $doc_id, pack: $pack}]->(:Entity) DELETE r
WITH count(*) AS ignored
MATCH (:Entity)-[m:MENTIONED_IN {doc_id: $doc_id, pack: $pack}]->(:Chunk) DELETE m
"""

_WRITE_ENTITIES = """
UNWIND $rows AS row
MERGE (e:Entity {entity_id: row.entity_id})
  ON CREATE SET e.name = row.name, e.normalized_name = row.normalized_name, e.type = row.type,
                e.pack = $pack, e.description = row.description, e.created_run_id = row.run_id
WITH e, row
MATCH (c:Chunk {chunk_id: row.chunk_id})
MERGE (e)-[m:MENTIONED_IN {chunk_id: row.chunk_id}]->(c)
  SET m += row.provenance, m.pack = $pack
"""

_WRITE_RELATIONSHIPS = """
UNWIND $rows AS row
MATCH (a:Entity {entity_id: row.source_id}), (b:Entity {entity_id: row.target_id})
MERGE (a)-[r:RELATED {type: row.type, chunk_id: row.provenance.chunk_id}]->(b)
  SET r += row.provenance, r.confidence = row.confidence, r.retrieval_eligible = row.retrieval_eligible,
      r.description = row.description, r.pack = $pack
"""

_WRITE_RUN = """
MERGE (r:ExtractionRun {run_id: $run_id})
SET r.pack = $pack, r.model = $model, r.prompt_hash = $prompt_hash, r.chunks = $chunks,
    r.cache_hits = $cache_hits, r.tokens = $tokens, r.cost = $cost, r.status = $status,
    r.skipped = $skipped, r.failures = $failures, r.finished_at = datetime()
"""


def drop_inferred(tx: neo4j.ManagedTransaction, *, pack: str, doc_id: str) -> None:
    """Delete every inferred edge and mention of a document (any version)."""
    tx.run(_DROP_INFERRED_FOR_DOC, doc_id=doc_id, pack=pack).consume()


def write_entities(tx: neo4j.ManagedTransaction, *, pack: str, rows: Sequence[dict[str, Any]]) -> None:
    """Merge entities and their MENTIONED_IN edges (with provenance) to their chunks."""
    tx.run(_WRITE_ENTITIES, rows=list(rows), pack=pack).consume()


def write_relationships(tx: neo4j.ManagedTransaction, *, pack: str, rows: Sequence[dict[str, Any]]) -> None:
    """Merge RELATED edges between written entities (with provenance and confidence)."""
    tx.run(_WRITE_RELATIONSHIPS, rows=list(rows), pack=pack).consume()


def write_extraction_run(driver: neo4j.Driver, database: str, **fields: Any) -> None:
    """Merge one (:ExtractionRun) with its figures (run_id, pack, model, prompt_hash, chunks,
    cache_hits, tokens, cost, status, skipped, failures)."""
    driver.execute_query(_WRITE_RUN, database_=database, **fields)
