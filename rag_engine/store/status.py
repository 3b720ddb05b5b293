"""Cypher of the operator's status figures (``ops.status`` and the provider swap's probes shape
them): what each pack holds, what the store holds of every pack, the active chunks' size. Reads
only, each in a read transaction routed to a reader.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import neo4j

from rag_engine.store.session import read

# A chunk is in the vector index when its vector is one the index takes: the index's dimension,
# finite values, not all zeros (a cosine index leaves a zero vector out without a word), and on
# the first index's shared property the chunk's embedder marker must match too
# (schema.index_coverage). A stored vector it leaves out is counted apart, as ``unindexable``.
_PACK_COUNTS = """
UNWIND $packs AS pack
OPTIONAL MATCH (d:Document {pack: pack})-[:HAS_VERSION]->(v:DocumentVersion {status: 'current'})
WITH pack, count(DISTINCT d) AS documents
OPTIONAL MATCH (c:Chunk {pack: pack}) WHERE c.active
WITH pack, documents, c, c[$prop] AS vec
WITH pack, documents, c, vec,
     vec IS NOT NULL AND size(vec) = $dim AND all(x IN vec WHERE x = x AND abs(x) < 3.0e38)
     AND any(x IN vec WHERE x <> 0) AND (NOT $legacy OR c.embedder = $identity) AS indexed
RETURN pack, documents, count(c) AS chunks,
       sum(CASE WHEN indexed THEN 1 ELSE 0 END) AS embedded,
       sum(CASE WHEN vec IS NOT NULL AND NOT indexed THEN 1 ELSE 0 END) AS unindexable
"""


_STORED_PACKS = """
CALL () { MATCH (d:Document) RETURN d.pack AS pack, count(d) AS documents, 0 AS chunks, 0 AS active
          UNION ALL
          MATCH (c:Chunk) RETURN c.pack AS pack, 0 AS documents, count(c) AS chunks,
                                 sum(CASE WHEN c.active THEN 1 ELSE 0 END) AS active }
WITH coalesce(pack, '(none)') AS pack, sum(documents) AS documents, sum(chunks) AS chunks, sum(active) AS active
RETURN pack, documents, chunks, active ORDER BY pack
"""
"""Every pack that has documents or chunks in the store, enabled or not."""


_ACTIVE_SIZE = (
    "MATCH (c:Chunk {active: true}) WHERE $packs IS NULL OR c.pack IN $packs "
    "RETURN count(c) AS n, sum(size(coalesce(c.heading, '')) + 1 + size(coalesce(c.text, ''))) AS chars"
)
_ACTIVE_SAMPLE = (
    "MATCH (c:Chunk {active: true}) WHERE $packs IS NULL OR c.pack IN $packs "
    "RETURN c.text AS text ORDER BY c.chunk_id LIMIT $k"
)


def pack_counts(
    driver: neo4j.Driver,
    database: str,
    packs: Sequence[str],
    *,
    prop: str,
    dim: int,
    legacy: bool,
    identity: str | None,
) -> list[dict[str, Any]]:
    """Per pack: current documents, active chunks, those the active index (``prop``, ``dim``)
    takes (``embedded``) and those holding a vector it leaves out (``unindexable``)."""
    return read(driver, database, _PACK_COUNTS, packs=list(packs), prop=prop, dim=dim, legacy=legacy, identity=identity)


def stored_packs(driver: neo4j.Driver, database: str) -> list[dict[str, Any]]:
    """Every pack with documents or chunks in the store: documents, chunks, active chunks."""
    return read(driver, database, _STORED_PACKS)


def active_size(
    driver: neo4j.Driver, database: str, packs: Sequence[str] | None, sample: int
) -> tuple[int, int, list[str]]:
    """(count, total characters of heading + text, the first ``sample`` texts by chunk id) of the
    active chunks of ``packs`` (None: every pack)."""
    p = None if packs is None else list(packs)
    rows = read(driver, database, _ACTIVE_SIZE, packs=p)
    texts = read(driver, database, _ACTIVE_SAMPLE, packs=p, k=sample)
    return int(rows[0]["n"]), int(rows[0]["chars"] or 0), [r["text"] or "" for r in texts]


_ANY_ACTIVE = "MATCH (c:Chunk) WHERE c.active AND c.collection IN $collections RETURN count(c) > 0 AS any"


def any_served(driver: neo4j.Driver, database: str, collections: Sequence[str]) -> bool:
    """Whether any current chunk of these collections is in the store (a store ingested at all)."""
    rows = read(driver, database, _ANY_ACTIVE, collections=list(collections))
    return bool(rows and rows[0]["any"])
