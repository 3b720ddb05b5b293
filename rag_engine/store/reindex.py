"""Cypher of the blue/green re-index (``ingest.reindex`` runs the steps): the (:VectorIndex)
records, the current chunks lacking the new vector, their vectors written, and the switch of the
(:IndexMeta) pointer. The caller passes every value as a parameter.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import neo4j

from rag_engine.errors import StoreError
from rag_engine.store.names import VECTOR_INDEX
from rag_engine.store.session import read

_MISSING = (
    "MATCH (c:Chunk {active: true}) WHERE c[$prop] IS NULL "
    "RETURN c.chunk_id AS chunk_id, coalesce(c.heading, '') AS heading, coalesce(c.text, '') AS text "
    "ORDER BY c.chunk_id LIMIT $limit"
)

_COUNTS = (
    "MATCH (c:Chunk {active: true}) RETURN count(c) AS n, sum(CASE WHEN c[$prop] IS NULL THEN 0 ELSE 1 END) AS present"
)

_WRITE = """
UNWIND $rows AS row
MATCH (c:Chunk {chunk_id: row.chunk_id})
CALL db.create.setNodeVectorProperty(c, $property, row.embedding)
SET c += coalesce(row.units, {})
"""

_HOLD = "MATCH (m:IndexMeta {name: $meta}) SET m.held = true REMOVE m.held"
_SWITCH_CHECK = "MATCH (c:Chunk {active: true}) WHERE c[$prop] IS NULL RETURN count(c) AS n"
_SWITCH = """
MATCH (m:IndexMeta {name: $meta})
WHERE m.identity = $old
SET m.identity = $identity, m.dimension = $dim, m.index = $index, m.property = $property,
    m.reindexed_at = datetime(), m.previous_identity = $old, m.epoch = randomUUID()
WITH m
MATCH (v:VectorIndex {identity: $identity})
SET v.state = 'active', v.completed_at = datetime()
MERGE (o:VectorIndex {identity: $old})
SET o.state = 'retired', o.index = $old_index, o.property = $old_property, o.dimension = $old_dim,
    o.retired_at = datetime()
RETURN count(m) AS switched
"""

_INDEX_RECORD = (
    "MATCH (v:VectorIndex {identity: $identity}) RETURN v.index AS index, "
    "v.property AS property, v.dimension AS dimension, v.state AS state"
)
_BUILDING = (
    "MERGE (v:VectorIndex {identity: $identity}) SET v.index = $index, v.property = $property, "
    "v.dimension = $dim, v.state = 'building', v.started_at = coalesce(v.started_at, datetime())"
)
_RETIRED = (
    "MATCH (v:VectorIndex {state: 'retired'}) RETURN v.identity AS identity, v.index AS index, v.property AS property"
)
_RETIRED_NAMES = "MATCH (v:VectorIndex {state: 'retired'}) RETURN v.index AS index ORDER BY index"
_FORGET_RETIRED = "MATCH (v:VectorIndex {identity: $identity, state: 'retired'}) DELETE v"


def missing_vectors(driver: neo4j.Driver, database: str, prop: str, limit: int) -> list[dict[str, Any]]:
    """Up to ``limit`` current chunks without a vector in ``prop`` (chunk_id, heading, text), by id."""
    return read(driver, database, _MISSING, prop=prop, limit=limit)


def vector_counts(driver: neo4j.Driver, database: str, prop: str) -> tuple[int, int]:
    """(current chunks, those with a vector in ``prop``)."""
    rows = read(driver, database, _COUNTS, prop=prop)
    return int(rows[0]["n"]), int(rows[0]["present"] or 0)


def write_vectors(driver: neo4j.Driver, database: str, prop: str, rows: Sequence[dict[str, Any]]) -> None:
    """One write transaction: each row's vector (chunk_id, embedding, units) into ``prop``."""
    with driver.session(database=database) as session:
        session.execute_write(lambda tx: tx.run(_WRITE, property=prop, rows=list(rows)).consume())


def switch(tx: neo4j.ManagedTransaction, *, prop: str, **params: Any) -> bool | None:
    """In the caller's write transaction: lock the (:IndexMeta) (the lock an ingest's activation
    takes before its own check), then, when no current chunk lacks ``prop``, point it at the new
    index and retire the old one. None: chunks still lack the vector; False: the active index was
    no longer ``old``; True: switched. ``params``: old, identity, dim, index, property, old_index,
    old_property, old_dim."""
    tx.run(_HOLD, meta=VECTOR_INDEX).consume()
    check = tx.run(_SWITCH_CHECK, prop=prop).single()
    if check is None:
        raise StoreError("the switch check (a count query) returned no row")
    if check["n"]:
        return None
    rec = tx.run(_SWITCH, meta=VECTOR_INDEX, **params).single()
    return bool(rec and rec["switched"])


def index_record(driver: neo4j.Driver, database: str, identity: str) -> dict[str, Any] | None:
    """The (:VectorIndex) of ``identity`` (index, property, dimension, state), or None."""
    rows = read(driver, database, _INDEX_RECORD, identity=identity)
    return rows[0] if rows else None


def mark_building(driver: neo4j.Driver, database: str, *, identity: str, index: str, prop: str, dim: int) -> None:
    """Record the index of ``identity`` as 'building' (its start time kept from an earlier run)."""
    driver.execute_query(_BUILDING, identity=identity, index=index, property=prop, dim=dim, database_=database)


def retired(driver: neo4j.Driver, database: str) -> list[dict[str, Any]]:
    """The retired indexes: identity, index, property."""
    return read(driver, database, _RETIRED)


def retired_names(driver: neo4j.Driver, database: str) -> list[str]:
    """Names of the retired indexes, sorted."""
    return [r["index"] for r in read(driver, database, _RETIRED_NAMES)]


def forget_retired(driver: neo4j.Driver, database: str, identity: str) -> None:
    """Delete the (:VectorIndex) record of a dropped retired index."""
    driver.execute_query(_FORGET_RETIRED, identity=identity, database_=database)
