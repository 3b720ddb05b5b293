"""Cypher the evals and benchmarks use beside the engine's own: ground truths, baselines' inputs,
a statement round trip's floor (``trivial_statement_ms``) and fixture teardown. Nothing of the
engine calls these; they live here so that no Cypher lives outside the store
(``tests/test_architecture_cypher.py``).

``drop_pack`` deletes every node of a pack (its documents, versions, chunks, reference keys,
entities and extraction runs): for a benchmark's or an eval's own fixture pack, never a served one.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any

import neo4j

from rag_engine.store.session import Reads, read, read_transaction

_PACK_NODES = (
    "MATCH (n) WHERE ((n:Chunk OR n:Document OR n:Entity OR n:ExtractionRun) AND n.pack = $p) "
    "OR (n:DocumentVersion AND n.key STARTS WITH $p + ':') OR (n:RefKey AND n.key STARTS WITH $p + '|') "
)
_COUNT_PACK = _PACK_NODES + "RETURN count(n) AS n"
_CHUNK_COUNT = "MATCH (c:Chunk {pack: $p}) RETURN count(c) AS n"
_CHUNK_IDS = "MATCH (c:Chunk {pack: $p}) RETURN c.chunk_id AS id"
_RELATED = (
    "MATCH ()-[r:RELATED {pack: $p}]->() RETURN r.type AS type, r.confidence AS confidence, "
    "r.retrieval_eligible AS retrieval_eligible"
)
_REFERENCE_EDGES = (
    "MATCH (s:Chunk {pack: $pack})-[e:REFERENCES]->(t:Chunk) "
    "RETURN count(e) AS n, count(DISTINCT s.doc_id + '>' + t.doc_id) AS doc_pairs"
)
_SERVED_TEXTS = (
    "MATCH (c:Chunk) WHERE c.pack = $pack AND c.active AND coalesce(c.eligible, true) "
    "AND c.collection IN $collections "
    "RETURN c.anchor AS anchor, coalesce(c.heading, '') AS heading, coalesce(c.text, '') AS text "
    "ORDER BY anchor, c.chunk_id"
)
_TRIVIAL = "RETURN 1 AS one"
_EXACT = (
    "MATCH (c:Chunk) WHERE c.active AND coalesce(c.eligible, true) AND c.collection IN $collections "
    "AND c[$prop] IS NOT NULL WITH c, vector.similarity.cosine(c[$prop], $embedding) AS score "
    "RETURN c.chunk_id AS chunk_id ORDER BY score DESC, c.chunk_id LIMIT $k"
)


def drop_pack(driver: neo4j.Driver, database: str, pack: str, *, batch: int = 2000) -> None:
    """Delete every node of ``pack``, ``batch`` nodes per transaction (an auto-commit query, as
    ``IN TRANSACTIONS`` needs)."""
    with driver.session(database=database) as session:
        session.run(
            _PACK_NODES + f"CALL (n) {{ DETACH DELETE n }} IN TRANSACTIONS OF {int(batch)} ROWS", p=pack
        ).consume()


def pack_nodes(driver: neo4j.Driver, database: str, pack: str) -> int:
    """How many nodes of ``pack`` the store holds (what ``drop_pack`` deletes)."""
    return int(read(driver, database, _COUNT_PACK, p=pack)[0]["n"])


def store_counts(driver: neo4j.Driver, database: str) -> dict[str, int]:
    """The whole store's chunks, nodes and relationships (the sizing bench)."""
    records, _, _ = driver.execute_query(
        "CALL () { MATCH (c:Chunk) RETURN count(c) AS chunks } "
        "CALL () { MATCH (n) RETURN count(n) AS nodes } "
        "CALL () { MATCH ()-[r]->() RETURN count(r) AS relationships } "
        "RETURN chunks, nodes, relationships",
        database_=database,
        routing_=neo4j.RoutingControl.READ,
    )
    return dict(records[0])


def chunk_count(driver: neo4j.Driver, database: str, pack: str) -> int:
    """Chunks of ``pack``, current or not."""
    return int(read(driver, database, _CHUNK_COUNT, p=pack)[0]["n"])


def chunk_ids(driver: neo4j.Driver, database: str, pack: str) -> set[str]:
    """The ids of the chunks of ``pack``."""
    return {r["id"] for r in read(driver, database, _CHUNK_IDS, p=pack)}


def related_edges(driver: neo4j.Driver, database: str, pack: str) -> list[dict[str, Any]]:
    """The inferred edges of ``pack``: type, confidence, retrieval_eligible."""
    return read(driver, database, _RELATED, p=pack)


def reference_edges(driver: neo4j.Driver, database: str, pack: str) -> dict[str, int]:
    """REFERENCES edges out of ``pack``'s chunks: how many, and how many distinct document pairs."""
    row = read(driver, database, _REFERENCE_EDGES, pack=pack)[0]
    return {"n": int(row["n"]), "doc_pairs": int(row["doc_pairs"])}


def served_texts(driver: neo4j.Driver, database: str, pack: str, collections: Sequence[str]) -> list[dict[str, Any]]:
    """The pack's active, retrieval-eligible chunks in ``collections`` (anchor, heading, text), in
    anchor order: the chunks the engine's legs may return to a role reading those collections."""
    return read(driver, database, _SERVED_TEXTS, pack=pack, collections=list(collections))


def exact_neighbours(rx: Reads, *, embedding: list[float], collections: Sequence[str], k: int, prop: str) -> set[str]:
    """The true ``k`` nearest current chunks of ``collections`` by cosine over ``prop``, by brute
    force (no index): the ground truth an approximate index's recall is measured against."""
    rows = rx.rows(_EXACT, collections=list(collections), prop=prop, embedding=embedding, k=k)
    return {r["chunk_id"] for r in rows}


def trivial_statement_ms(driver: neo4j.Driver, database: str, runs: int = 200) -> float:
    """Median ms of a trivial statement (``RETURN 1``) in an open read transaction, the first
    fifth of the runs left out as warm-up: what one more statement of a question costs before it
    reads anything (the driver's and the server's round trip)."""
    times = []
    with read_transaction(driver, database, packs=()) as rx:
        for _ in range(runs):
            started = time.perf_counter()
            rx.rows(_TRIVIAL)
            times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times[runs // 5 :])
