"""Read-only Neo4j queries of the query path. Every call runs in a READ transaction and takes
the permitted collections as a parameter; nothing here can write."""

from __future__ import annotations

import re
from typing import Any

import neo4j

from rag_engine.errors import EmbedderMismatch
from rag_engine.graph.schema import CHUNK_FULLTEXT, VECTOR_INDEX

_LUCENE_SPECIAL = re.compile(r'([+\-!(){}\[\]^"~*?:\\/]|&&|\|\|)')
_CHUNK_FIELDS = (
    "c.chunk_id AS chunk_id, c.anchor AS anchor, c.heading AS heading, c.text AS text, "
    "c.collection AS collection, c.doc_id AS doc_id, c.doc_version AS doc_version"
)


MAX_QUERY_TERMS = 256
"""Lucene refuses more than 1024 boolean clauses; distinct terms beyond this cap are dropped."""


def lucene_escape(text: str) -> str:
    """User text is never Lucene syntax: escape every operator, drop boolean keywords; at most
    MAX_QUERY_TERMS distinct terms (first occurrences kept) so no question exceeds Lucene's limit."""
    escaped = _LUCENE_SPECIAL.sub(r"\\\1", text)
    words = [w for w in escaped.split() if w not in {"AND", "OR", "NOT", "TO"} and w.strip("\\")]
    return " ".join(list(dict.fromkeys(words))[:MAX_QUERY_TERMS])


def read(driver: neo4j.Driver, database: str, query: str, **params: Any) -> list[dict[str, Any]]:
    def work(tx: neo4j.ManagedTransaction) -> list[dict[str, Any]]:
        return [r.data() for r in tx.run(query, **params)]

    with driver.session(database=database, default_access_mode=neo4j.READ_ACCESS) as session:
        return session.execute_read(work)


def fulltext(
    driver: neo4j.Driver, database: str, text: str, collections: tuple[str, ...], k: int
) -> list[dict[str, Any]]:
    q = lucene_escape(text)
    if not q.strip():
        return []
    return read(
        driver,
        database,
        f"CALL db.index.fulltext.queryNodes('{CHUNK_FULLTEXT}', $q, {{limit: $fetch}}) YIELD node AS c, score "
        f"WHERE c.active AND coalesce(c.eligible, true) AND c.collection IN $collections "
        f"RETURN {_CHUNK_FIELDS}, score ORDER BY score DESC LIMIT $k",
        q=q,
        collections=list(collections),
        k=k,
        fetch=k * 4,
    )


VECTOR_FETCH_CAP = 5000


def _vector_in_tx(
    tx: neo4j.ManagedTransaction, embedding: list[float], collections: tuple[str, ...], k: int, identity: str
) -> list[dict[str, Any]]:
    meta = tx.run(
        f"MATCH (m:IndexMeta {{name: '{VECTOR_INDEX}'}}) "
        f"RETURN m.identity AS identity, coalesce(m.index, '{VECTOR_INDEX}') AS index"
    ).single()
    if meta is None:
        raise EmbedderMismatch("no chunk index exists yet: materialize chunk_index first")
    if meta["identity"] != identity:
        raise EmbedderMismatch(
            f"index built with {meta['identity']!r}, query uses {identity!r}: "
            f"a full re-index is required (`rag reindex`)"
        )
    fetch = max(k * 5, 50)
    while True:
        rows = [
            r.data()
            for r in tx.run(
                "CALL db.index.vector.queryNodes($index, $fetch, $embedding) YIELD node AS c, score "
                "WHERE c.active AND coalesce(c.eligible, true) AND c.collection IN $collections "
                f"RETURN {_CHUNK_FIELDS}, score ORDER BY score DESC LIMIT $k",
                index=meta["index"],
                embedding=embedding,
                collections=list(collections),
                k=k,
                fetch=fetch,
            )
        ]
        if len(rows) >= k or fetch >= VECTOR_FETCH_CAP:
            return rows
        fetch = min(fetch * 4, VECTOR_FETCH_CAP)


def vector(
    driver: neo4j.Driver,
    database: str,
    embedding: list[float],
    collections: tuple[str, ...],
    k: int,
    identity: str | None = None,
) -> list[dict[str, Any]]:
    """Nearest permitted, current chunks from the active vector index (IndexMeta names it: a
    blue/green re-index switches it). With ``identity``, the embedder that made ``embedding`` is
    checked against the index's in the same transaction: a query vector can never be compared in
    another embedder's space, even while a re-index switches over (the old index outlives the switch).

    The index cannot filter, so it is over-fetched and the fetch grows (x4, up to
    VECTOR_FETCH_CAP) until k permitted hits are found: a role that may read a small collection
    of a large corpus still gets its k nearest chunks."""
    if identity is None:  # callers that checked the embedder themselves (benchmarks, evals)
        from rag_engine.graph.schema import current_embedder

        current = current_embedder(driver, database)
        identity = current["identity"] if current else ""
    with driver.session(database=database, default_access_mode=neo4j.READ_ACCESS) as session:
        return session.execute_read(_vector_in_tx, embedding, collections, k, identity)


def by_keys(
    driver: neo4j.Driver, database: str, keys: list[str], collections: tuple[str, ...], limit: int = 200
) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
    """Chunks answering to reference keys (``pack|key``) named in a question, and per key the
    documents (``pack:doc_id``) whose active chunks answer to it, whatever the caller's role.

    A key answered in more than one document is ambiguous ("Rule 3.8" in a dozen rulebooks): the
    caller never turns it into an exact hit. Counting documents over every collection reveals no
    text, only that the number is not unique, and keeps a role's view from making it look unique.
    """
    if not keys:
        return [], {}
    docs = read(
        driver,
        database,
        "MATCH (rk:RefKey)<-[:ANSWERS_TO]-(c:Chunk) WHERE rk.key IN $keys AND c.active "
        "RETURN rk.key AS key, collect(DISTINCT c.pack + ':' + c.doc_id) AS docs",
        keys=keys,
    )
    rows = read(
        driver,
        database,
        f"MATCH (rk:RefKey)<-[:ANSWERS_TO]-(c:Chunk) WHERE rk.key IN $keys AND c.active "
        f"AND c.collection IN $collections "
        f"RETURN {_CHUNK_FIELDS}, c.pack AS pack, c.ordinal AS ordinal, collect(rk.key) AS keys "
        f"ORDER BY c.pack, c.doc_id, c.ordinal LIMIT $limit",
        keys=keys,
        collections=list(collections),
        limit=limit,
    )
    return rows, {d["key"]: sorted(d["docs"]) for d in docs}


def citing(driver: neo4j.Driver, database: str, chunk_ids: list[str], keys: list[str]) -> dict[str, int]:
    """How many of the question's reference keys each candidate chunk cites."""
    if not chunk_ids or not keys:
        return {}
    rows = read(
        driver,
        database,
        "MATCH (c:Chunk)-[:CITES]->(rk:RefKey) WHERE c.chunk_id IN $ids AND rk.key IN $keys "
        "RETURN c.chunk_id AS chunk_id, count(DISTINCT rk) AS n",
        ids=chunk_ids,
        keys=keys,
    )
    return {r["chunk_id"]: int(r["n"]) for r in rows}


def referenced(
    driver: neo4j.Driver, database: str, chunk_ids: list[str], collections: tuple[str, ...], k: int
) -> list[dict[str, Any]]:
    """Deterministic reference expansion: chunks the seeds cite (one hop, active, permitted)."""
    if not chunk_ids or k <= 0:
        return []
    return read(
        driver,
        database,
        f"UNWIND range(0, size($ids) - 1) AS rank "
        f"MATCH (s:Chunk {{chunk_id: $ids[rank]}})-[e:REFERENCES]->(c:Chunk) "
        f"WHERE c.active AND c.collection IN $collections AND NOT c.chunk_id IN $ids "
        f"WITH c, rank, e, s ORDER BY rank, e.raw "
        f"WITH c, collect({{rank: rank, via: e.raw, from: s.chunk_id}})[0] AS best "
        f"RETURN {_CHUNK_FIELDS}, best.rank AS seed_rank, best.via AS via, best.from AS from_chunk "
        f"ORDER BY seed_rank, c.chunk_id LIMIT $k",
        ids=chunk_ids,
        collections=list(collections),
        k=k,
    )


def chunks_by_id(
    driver: neo4j.Driver, database: str, chunk_ids: list[str], collections: tuple[str, ...]
) -> list[dict[str, Any]]:
    """Graph evidence chunks, still subject to the policy gate and to being current."""
    if not chunk_ids:
        return []
    return read(
        driver,
        database,
        f"MATCH (c:Chunk) WHERE c.chunk_id IN $ids AND c.active AND c.collection IN $collections "
        f"RETURN {_CHUNK_FIELDS}",
        ids=chunk_ids,
        collections=list(collections),
    )
