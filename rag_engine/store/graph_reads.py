"""Cypher of the query path's graph reads: entities named in a question (planner seeds) and one
traversal hop. Each runs in the question's read transaction (``session.Reads``); the caller
passes every value as a parameter.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rag_engine.store.names import ENTITY_FULLTEXT
from rag_engine.store.quality_predicates import traversable
from rag_engine.store.session import Reads

_ENTITY_HITS = (
    f"CALL db.index.fulltext.queryNodes('{ENTITY_FULLTEXT}', $q, {{limit: $fetch}}) YIELD node AS e "
    "WITH collect(e) AS hits "
    "RETURN size(hits) AS total, [e IN hits WHERE e.pack IN $packs AND EXISTS { "
    "MATCH (e)-[:MENTIONED_IN]->(c:Chunk) WHERE c.active AND c.collection IN $collections } "
    "| {entity_id: e.entity_id, name: e.name, normalized: e.normalized_name, pack: e.pack}] AS kept"
)

_MENTIONED_NAME = (
    "MATCH (e:Entity {entity_id: $id}) WHERE EXISTS { MATCH (e)-[:MENTIONED_IN]->(c:Chunk) "
    "WHERE c.active AND c.collection IN $collections } RETURN e.name AS name"
)

_ELIGIBLE_EDGES = (
    "MATCH (e:Entity)-[r:RELATED]-() WHERE e.entity_id IN $ids AND r.retrieval_eligible "
    "AND r.confidence >= $floor AND EXISTS { MATCH (ev:Chunk {chunk_id: r.chunk_id}) "
    "WHERE ev.active AND ev.collection IN $collections } RETURN count(r) AS n"
)

# every hop must be an edge that passes the quality predicates (provenance, not dangling) and is
# evidenced by a current chunk of an enabled pack the caller may read: the policy gate applies to
# paths (entity names, edges) exactly as it does to chunk text
_HOP = f"""
UNWIND $frontier AS fid
MATCH (a:Entity {{entity_id: fid}})-[r:RELATED]-(b:Entity)
WHERE {traversable("r")}
WITH a, r, b ORDER BY r.confidence DESC, r.chunk_id
WITH a, collect({{rel: r, b: b}})[..$fanout] AS edges
UNWIND edges AS e
RETURN a.entity_id AS from_id, e.b.entity_id AS to_id, e.b.name AS to_name, e.rel.type AS type,
       e.rel.confidence AS confidence, e.rel.chunk_id AS chunk_id,
       startNode(e.rel).entity_id = a.entity_id AS forward
"""


def entity_hits(
    rx: Reads, *, q: str, packs: Sequence[str], fetch: int, collections: Sequence[str]
) -> tuple[int, list[dict[str, Any]]]:
    """(index hits fetched, the ones of ``packs`` a current chunk of ``collections`` mentions) for
    the escaped fulltext query ``q``, at most ``fetch`` hits."""
    result = rx.rows(_ENTITY_HITS, q=q, packs=list(packs), fetch=fetch, collections=list(collections))
    return (result[0]["total"], result[0]["kept"]) if result else (0, [])


def mentioned_entity_name(rx: Reads, *, entity_id: str, collections: Sequence[str]) -> str | None:
    """The entity's name when a current chunk of ``collections`` mentions it, else None."""
    found = rx.rows(_MENTIONED_NAME, id=entity_id, collections=list(collections))
    return found[0]["name"] if found else None


def eligible_edge_count(rx: Reads, *, ids: Sequence[str], floor: float, collections: Sequence[str]) -> int:
    """Eligible inferred edges at or above ``floor`` touching these entities, evidenced in ``collections``."""
    rows = rx.rows(_ELIGIBLE_EDGES, ids=list(ids), floor=floor, collections=list(collections))
    return int(rows[0]["n"])


def hop(
    rx: Reads, *, frontier: Sequence[str], floor: float, fanout: int, collections: Sequence[str]
) -> list[dict[str, Any]]:
    """One breadth-first hop: at most ``fanout`` traversable edges per frontier entity, best first."""
    return rx.rows(
        _HOP,
        frontier=list(frontier),
        floor=floor,
        fanout=fanout,
        collections=list(collections),
        packs=list(rx.packs),
    )
