"""Read-only queries of the query path, in the question's read transaction (``session.Reads``).
Every query takes the permitted collections as a parameter; nothing here can write.

What may be served is one predicate, ``SERVED``: an active, eligible chunk of an enabled pack
(``Reads.packs``, set from the engine's packs) in a permitted collection. Every read below that
returns a chunk (or a vector, a title, an expansion) filters by it, so a pack present in the
store but not enabled (a fixture, a pack turned off) is never returned by any leg."""

from __future__ import annotations

import re
from typing import Any

from rag_engine.store import epochs
from rag_engine.store.epochs import active_index
from rag_engine.store.names import CHUNK_FULLTEXT
from rag_engine.store.session import Reads

_LUCENE_SPECIAL = re.compile(r'([+\-!(){}\[\]^"~*?:\\/]|&&|\|\|)')
FIELDS = ("chunk_id", "anchor", "heading", "text", "collection", "doc_id", "doc_version")
"""What every query-path read returns of a chunk (as columns, or as a map per hit in ``legs``)."""
_CHUNK_FIELDS = ", ".join(f"c.{f} AS {f}" for f in FIELDS)


def served(var: str) -> str:
    """The one predicate of a chunk the query path may return (``var``): current, eligible, of an
    enabled pack, in a permitted collection. Its parameters come from ``scope``."""
    return (
        f"({var}.active AND coalesce({var}.eligible, true) AND {var}.pack IN $packs "
        f"AND {var}.collection IN $collections)"
    )


SERVED = served("c")
"""``served`` of ``c``, the name every query-path read gives its chunk."""


def title_shown(var: str) -> str:
    """The one predicate of a document whose title the query path may show (``var``): of an
    enabled pack, in a permitted collection (a title is document metadata: never one of a
    collection the caller may not read). Its parameters come from ``scope``."""
    return f"({var}.pack IN $packs AND {var}.collection IN $collections)"


def scope(rx: Reads, collections: tuple[str, ...]) -> dict[str, list[str]]:
    """The parameters of ``SERVED``: the permitted collections and the enabled packs."""
    return {"collections": list(collections), "packs": list(rx.packs)}


MAX_QUERY_TERMS = 256
"""Lucene refuses more than 1024 boolean clauses; distinct terms beyond this cap are dropped."""


def lucene_escape(text: str) -> str:
    """User text is never Lucene syntax: escape every operator, drop boolean keywords; at most
    MAX_QUERY_TERMS distinct terms (first occurrences kept) so no question exceeds Lucene's limit."""
    escaped = _LUCENE_SPECIAL.sub(r"\\\1", text)
    words = [w for w in escaped.split() if w not in {"AND", "OR", "NOT", "TO"} and w.strip("\\")]
    return " ".join(list(dict.fromkeys(words))[:MAX_QUERY_TERMS])


TEXT_FETCH_CAP = 5000
"""The largest fulltext fetch: Lucene scores every match anyway, this bounds what crosses to Cypher."""


def _text_hits(k: str) -> str:
    """The tail of one fulltext fetch (rows ``c, score`` in score order): ``fetched``, how many index
    hits it returned, and ``hits``, the first ``k`` (a parameter name) permitted current ones. Only
    those have their fields read and sent: the fetch is 4x k, since the index cannot filter."""
    fields = ", ".join(f"{f}: h.c.{f}" for f in FIELDS)
    return (
        f"WITH count(*) AS fetched, collect(CASE WHEN {SERVED} THEN {{c: c, score: score}} END)[..${k}] AS kept "
        f"RETURN fetched, [h IN kept | {{{fields}, score: h.score}}] AS hits"
    )


def fulltext(
    rx: Reads, text: str, collections: tuple[str, ...], k: int, *, fetch: int | None = None
) -> list[dict[str, Any]]:
    """The k best permitted, current chunks for ``text``. The index cannot filter by collection,
    so, like ``vector``, the fetch grows (x4, up to TEXT_FETCH_CAP) while it came back full and
    held fewer than k permitted hits: a role that reads a small share of the store still gets
    its matches (60 public chunks matched, the first fetch of 40 held none of them)."""
    q = lucene_escape(text)
    if not q.strip():
        return []
    fetch = fetch or k * 4
    while True:
        row = rx.values(
            f"CALL db.index.fulltext.queryNodes('{CHUNK_FULLTEXT}', $q, {{limit: $fetch}}) YIELD node AS c, score "
            f"WITH c, score ORDER BY score DESC {_text_hits('k')}",
            q=q,
            **scope(rx, collections),
            fetch=fetch,
            k=k,
        )[0]
        hits: list[dict[str, Any]] = row["hits"]
        if len(hits) >= k or row["fetched"] < fetch or fetch >= TEXT_FETCH_CAP:
            return hits
        fetch = min(fetch * 4, TEXT_FETCH_CAP)


VECTOR_FETCH_CAP = 5000


VECTOR_FETCH_FACTOR = 5
VECTOR_FETCH_MIN = 50


def vector_fetch(k: int) -> int:
    """The first fetch of the vector index for k permitted hits (it cannot filter); see
    ``evals/bench/fetch.py`` for the measurement of fused recall against the fetch size."""
    return max(k * VECTOR_FETCH_FACTOR, VECTOR_FETCH_MIN)


def vector(
    rx: Reads,
    embedding: list[float],
    collections: tuple[str, ...],
    k: int,
    identity: str,
    *,
    fetch: int | None = None,
) -> list[dict[str, Any]]:
    """Nearest permitted, current chunks from the active vector index (IndexMeta names it: a
    blue/green re-index switches it). The embedder that made ``embedding`` (``identity``) is
    checked against the index's in the same transaction (``epochs.active_index``, cached per
    re-index epoch): a query vector is never compared in another embedder's space.

    The index cannot filter, so it is over-fetched and the fetch grows (x4, up to
    VECTOR_FETCH_CAP) until k permitted hits are found: a role that may read a small collection
    of a large corpus still gets its k nearest chunks. ``fetch`` overrides the first fetch
    (measurements only)."""
    active, _cached = active_index(rx, identity)
    fetch = fetch or vector_fetch(k)
    while True:
        rows = rx.values(
            "CALL db.index.vector.queryNodes($index, $fetch, $embedding) YIELD node AS c, score "
            f"WHERE {SERVED} "
            f"RETURN {_CHUNK_FIELDS}, score ORDER BY score DESC LIMIT $k",
            index=active.index,
            embedding=embedding,
            **scope(rx, collections),
            k=k,
            fetch=fetch,
        )
        if len(rows) >= k or fetch >= VECTOR_FETCH_CAP:
            return rows
        fetch = min(fetch * 4, VECTOR_FETCH_CAP)


def _hits(leg: str) -> str:
    return "collect({" + ", ".join(f"{f}: c.{f}" for f in FIELDS) + f", score: score}}) AS {leg}"


LEGS_STATEMENT = f"""{epochs.STATE_COLUMNS}
CALL (index_epoch) {{
  WITH index_epoch WHERE $embedding IS NOT NULL AND index_epoch = $expected
  CALL db.index.vector.queryNodes($index, $vector_fetch, $embedding) YIELD node AS c, score
  WHERE {SERVED}
  WITH c, score ORDER BY score DESC LIMIT $dense_k
  RETURN {_hits("dense")}
}}
CALL () {{
  WITH $q AS q WHERE q <> ''
  CALL db.index.fulltext.queryNodes('{CHUNK_FULLTEXT}', q, {{limit: $text_fetch}}) YIELD node AS c, score
  WITH c, score ORDER BY score DESC
  {_text_hits("lexical_k")}
}}
RETURN indexed, index_epoch, graph_epoch, dense, fetched AS text_fetched, hits AS lexical
"""
"""The question's first statement (``legs``); ``store.measurement`` composes it into one more."""


def legs_parameters(
    text: str, embedding: list[float] | None, *, expected: Any, index: str | None, lexical_k: int, dense_k: int
) -> dict[str, Any]:
    """``LEGS_STATEMENT``'s parameters but the scope's: the vector leg runs when ``embedding`` is
    given and the store's index epoch is ``expected``; "" as ``text`` skips the fulltext leg."""
    q = lucene_escape(text)
    return {
        **epochs.STATE_PARAMS,
        "expected": expected,
        "index": index,
        "embedding": embedding,
        "vector_fetch": vector_fetch(dense_k),
        "dense_k": dense_k,
        "q": q if q.strip() else "",
        "text_fetch": lexical_k * 4,
        "lexical_k": lexical_k,
    }


def legs(
    rx: Reads,
    text: str,
    embedding: list[float] | None,
    collections: tuple[str, ...],
    *,
    lexical_k: int,
    dense_k: int,
    identity: str,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """(fulltext rows, vector rows or None): the question's first statement reads the store
    epochs, the fulltext leg (``text``; "" skips it) and, when ``embedding`` is given, the vector
    leg, in one round trip. Each leg is the same search as ``fulltext`` / ``vector``.

    The vector leg runs on the index this process cached for ``identity`` only if the store's
    index epoch, read in the same statement, is still the cached one; otherwise (first question,
    a re-index switched, another embedder) it returns None and ``vector`` runs it after the
    checked ``epochs.active_index``. Fewer than ``dense_k`` permitted hits also go on to
    ``vector``, which grows the fetch."""
    cached = epochs.cached_index(rx, identity) if embedding is not None else None
    row = rx.values(
        LEGS_STATEMENT,
        **legs_parameters(
            text,
            embedding if cached else None,
            expected=cached[0] if cached else None,
            index=cached[1].index if cached else None,
            lexical_k=lexical_k,
            dense_k=dense_k,
        ),
        **scope(rx, collections),
    )[0]
    epochs.remember_state(rx, row)
    lexical: list[dict[str, Any]] = row["lexical"]
    if len(lexical) < lexical_k and row["text_fetched"] >= lexical_k * 4:  # a small permitted share
        lexical = fulltext(rx, text, collections, lexical_k, fetch=lexical_k * 16)
    if cached is None or embedding is None or row["index_epoch"] != cached[0]:
        return lexical, None
    rx.memo["index_cached"] = True
    dense: list[dict[str, Any]] = row["dense"]
    if len(dense) < dense_k and vector_fetch(dense_k) < VECTOR_FETCH_CAP:  # a small permitted share
        dense = vector(rx, embedding, collections, dense_k, identity, fetch=vector_fetch(dense_k) * 4)
    return lexical, dense


def by_keys(
    rx: Reads, keys: list[str], collections: tuple[str, ...], limit: int = 200
) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
    """Chunks answering to reference keys (``pack|key``) named in a question, and per key the
    documents (``pack:doc_id``) whose active chunks answer to it, whatever the caller's role.

    A key answered in more than one document is ambiguous ("Rule 3.8" in a dozen rulebooks): the
    caller never turns it into an exact hit. Counting documents over every collection reveals no
    text, only that the number is not unique, and keeps a role's view from making it look unique.
    """
    if not keys:
        return [], {}
    docs = rx.rows(
        "MATCH (rk:RefKey)<-[:ANSWERS_TO]-(c:Chunk) WHERE rk.key IN $keys AND c.active AND c.pack IN $packs "
        "RETURN rk.key AS key, collect(DISTINCT c.pack + ':' + c.doc_id) AS docs",
        keys=keys,
        packs=list(rx.packs),
    )
    rows = rx.rows(
        f"MATCH (rk:RefKey)<-[:ANSWERS_TO]-(c:Chunk) WHERE rk.key IN $keys AND {SERVED} "
        f"RETURN {_CHUNK_FIELDS}, c.pack AS pack, c.ordinal AS ordinal, collect(rk.key) AS keys "
        f"ORDER BY c.pack, c.doc_id, c.ordinal LIMIT $limit",
        keys=keys,
        **scope(rx, collections),
        limit=limit,
    )
    return rows, {d["key"]: sorted(d["docs"]) for d in docs}


def citing(rx: Reads, chunk_ids: list[str], keys: list[str]) -> dict[str, int]:
    """How many of the question's reference keys each candidate chunk cites."""
    if not chunk_ids or not keys:
        return {}
    rows = rx.rows(
        "MATCH (c:Chunk)-[:CITES]->(rk:RefKey) WHERE c.chunk_id IN $ids AND rk.key IN $keys "
        "RETURN c.chunk_id AS chunk_id, count(DISTINCT rk) AS n",
        ids=chunk_ids,
        keys=keys,
    )
    return {r["chunk_id"]: int(r["n"]) for r in rows}


def referenced(rx: Reads, chunk_ids: list[str], collections: tuple[str, ...], k: int) -> list[dict[str, Any]]:
    """Deterministic reference expansion: chunks the seeds cite (one hop, active, permitted)."""
    if not chunk_ids or k <= 0:
        return []
    return rx.rows(
        f"UNWIND range(0, size($ids) - 1) AS rank "
        f"MATCH (s:Chunk {{chunk_id: $ids[rank]}})-[e:REFERENCES]->(c:Chunk) "
        f"WHERE {SERVED} AND NOT c.chunk_id IN $ids "
        f"WITH c, rank, e, s ORDER BY rank, e.raw "
        f"WITH c, collect({{rank: rank, via: e.raw, from: s.chunk_id}})[0] AS best "
        f"RETURN {_CHUNK_FIELDS}, best.rank AS seed_rank, best.via AS via, best.from AS from_chunk "
        f"ORDER BY seed_rank, c.chunk_id LIMIT $k",
        ids=chunk_ids,
        **scope(rx, collections),
        k=k,
    )


def chunks_by_id(rx: Reads, chunk_ids: list[str], collections: tuple[str, ...]) -> list[dict[str, Any]]:
    """Graph evidence chunks, still subject to the policy gate and to being current."""
    if not chunk_ids:
        return []
    return rx.rows(
        f"MATCH (c:Chunk) WHERE c.chunk_id IN $ids AND {SERVED} RETURN {_CHUNK_FIELDS}",
        ids=chunk_ids,
        **scope(rx, collections),
    )


def document_titles(rx: Reads, keys: list[str], collections: tuple[str, ...]) -> dict[str, str]:
    """``pack:doc_id`` -> the document's title, for the given keys whose document is in a
    permitted collection (a title is document metadata: never one of a collection the caller
    may not read, even when an older version of the document was readable)."""
    if not keys:
        return {}
    rows = rx.rows(
        f"MATCH (d:Document) WHERE d.key IN $keys AND {title_shown('d')} RETURN d.key AS key, d.title AS title",
        keys=keys,
        **scope(rx, collections),
    )
    return {r["key"]: r["title"] or "" for r in rows}


def cosines(
    rx: Reads, chunk_ids: list[str], embedding: list[float], identity: str, collections: tuple[str, ...]
) -> dict[str, float]:
    """Cosine of ``embedding`` with each permitted chunk's vector in the active index (same
    embedder only: ``epochs.active_index`` checks it), for the reranker's features. A chunk
    without a usable vector has none (Neo4j's null)."""
    if not chunk_ids:
        return {}
    active, _cached = active_index(rx, identity)
    rows = rx.rows(
        f"MATCH (c:Chunk) WHERE c.chunk_id IN $ids AND {SERVED} AND c[$property] IS NOT NULL "
        "WITH c, vector.similarity.cosine(c[$property], $embedding) AS cosine WHERE cosine IS NOT NULL "
        "RETURN c.chunk_id AS chunk_id, cosine",
        ids=chunk_ids,
        property=active.property,
        embedding=embedding,
        **scope(rx, collections),
    )
    return {r["chunk_id"]: float(r["cosine"]) for r in rows}
