"""Read-only Neo4j queries of the query path. Every call runs in a READ transaction and takes
the permitted collections as a parameter; nothing here can write."""

from __future__ import annotations

import re
from typing import Any

import neo4j

from rag_engine.graph.schema import CHUNK_FULLTEXT, VECTOR_INDEX

_LUCENE_SPECIAL = re.compile(r'([+\-!(){}\[\]^"~*?:\\/]|&&|\|\|)')
_CHUNK_FIELDS = ("c.chunk_id AS chunk_id, c.anchor AS anchor, c.heading AS heading, c.text AS text, "
                 "c.collection AS collection, c.doc_id AS doc_id, c.doc_version AS doc_version")


def lucene_escape(text: str) -> str:
    """User text is never Lucene syntax: escape every operator, drop boolean keywords."""
    escaped = _LUCENE_SPECIAL.sub(r"\\\1", text)
    return " ".join(w for w in escaped.split() if w not in {"AND", "OR", "NOT", "TO"})


def read(driver: neo4j.Driver, database: str, query: str, **params: Any) -> list[dict[str, Any]]:
    def work(tx: neo4j.ManagedTransaction) -> list[dict[str, Any]]:
        return [r.data() for r in tx.run(query, **params)]

    with driver.session(database=database, default_access_mode=neo4j.READ_ACCESS) as session:
        return session.execute_read(work)


def fulltext(driver: neo4j.Driver, database: str, text: str, collections: tuple[str, ...], k: int) -> list[dict]:
    q = lucene_escape(text)
    if not q.strip():
        return []
    return read(
        driver, database,
        f"CALL db.index.fulltext.queryNodes('{CHUNK_FULLTEXT}', $q, {{limit: $fetch}}) YIELD node AS c, score "
        f"WHERE c.active AND c.collection IN $collections "
        f"RETURN {_CHUNK_FIELDS}, score ORDER BY score DESC LIMIT $k",
        q=q, collections=list(collections), k=k, fetch=k * 4,
    )


VECTOR_FETCH_CAP = 5000


def vector(driver: neo4j.Driver, database: str, embedding: list[float], collections: tuple[str, ...],
           k: int) -> list[dict]:
    """Nearest permitted, current chunks. The index cannot filter, so it is over-fetched and the
    fetch grows (x4, up to VECTOR_FETCH_CAP) until k permitted hits are found: a role that may
    read a small collection of a large corpus still gets its k nearest chunks."""
    fetch = max(k * 5, 50)
    while True:
        rows = read(
            driver, database,
            f"CALL db.index.vector.queryNodes('{VECTOR_INDEX}', $fetch, $embedding) YIELD node AS c, score "
            f"WHERE c.active AND c.collection IN $collections "
            f"RETURN {_CHUNK_FIELDS}, score ORDER BY score DESC LIMIT $k",
            embedding=embedding, collections=list(collections), k=k, fetch=fetch,
        )
        if len(rows) >= k or fetch >= VECTOR_FETCH_CAP:
            return rows
        fetch = min(fetch * 4, VECTOR_FETCH_CAP)


def by_keys(driver: neo4j.Driver, database: str, keys: list[str], collections: tuple[str, ...],
            k: int) -> list[dict]:
    """Chunks answering to normalized reference keys (``pack|key``), e.g. 'Article 17(1)' asked directly."""
    if not keys:
        return []
    return read(
        driver, database,
        f"MATCH (rk:RefKey)<-[:ANSWERS_TO]-(c:Chunk) WHERE rk.key IN $keys AND c.active "
        f"AND c.collection IN $collections RETURN DISTINCT {_CHUNK_FIELDS}, c.ordinal AS ordinal, 1.0 AS score "
        f"ORDER BY doc_id, ordinal LIMIT $k",
        keys=keys, collections=list(collections), k=k,
    )


def referenced(driver: neo4j.Driver, database: str, chunk_ids: list[str], collections: tuple[str, ...],
               k: int) -> list[dict]:
    """Deterministic reference expansion: chunks the seeds cite (one hop, active, permitted)."""
    if not chunk_ids or k <= 0:
        return []
    return read(
        driver, database,
        f"UNWIND range(0, size($ids) - 1) AS rank "
        f"MATCH (s:Chunk {{chunk_id: $ids[rank]}})-[e:REFERENCES]->(c:Chunk) "
        f"WHERE c.active AND c.collection IN $collections AND NOT c.chunk_id IN $ids "
        f"WITH c, rank, e, s ORDER BY rank, e.raw "
        f"WITH c, collect({{rank: rank, via: e.raw, from: s.chunk_id}})[0] AS best "
        f"RETURN {_CHUNK_FIELDS}, best.rank AS seed_rank, best.via AS via, best.from AS from_chunk "
        f"ORDER BY seed_rank, c.chunk_id LIMIT $k",
        ids=chunk_ids, collections=list(collections), k=k,
    )


def chunks_by_id(driver: neo4j.Driver, database: str, chunk_ids: list[str], collections: tuple[str, ...]) -> list[dict]:
    """Graph evidence chunks, still subject to the policy gate and to being current."""
    if not chunk_ids:
        return []
    return read(
        driver, database,
        f"MATCH (c:Chunk) WHERE c.chunk_id IN $ids AND c.active AND c.collection IN $collections "
        f"RETURN {_CHUNK_FIELDS}",
        ids=chunk_ids, collections=list(collections),
    )
