"""Cypher the evals and benchmarks use beside the engine's own: ground truths, baselines' inputs,
a statement round trip's floor (``trivial_statement_ms``), the query path's store work as one
statement (``one_statement_reads``) and fixture teardown. Nothing of the engine calls these; they
live here so that no Cypher lives outside the store (``tests/test_architecture_cypher.py``).

``drop_pack`` deletes every node of a pack (its documents, versions, chunks, reference keys,
entities and extraction runs): for a benchmark's or an eval's own fixture pack, never a served one.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any

import neo4j

from rag_engine.store import epochs, reads, top_reads
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


_ONE_HEAD, _ = reads.LEGS_STATEMENT.rsplit("RETURN", 1)
_ONE_STATEMENT = (
    _ONE_HEAD
    + """
WITH [h IN hits | {chunk_id: h.chunk_id, score: h.score}] AS lexical,
  [h IN dense | {chunk_id: h.chunk_id, score: h.score}] AS dense
CALL (dense, lexical) {
  CALL (dense, lexical) {
    UNWIND range(0, size(lexical) - 1) AS i RETURN lexical[i].chunk_id AS id, 1.0 / ($rrf_k + i + 1) AS s
    UNION ALL
    UNWIND range(0, size(dense) - 1) AS i RETURN dense[i].chunk_id AS id, 1.0 / ($rrf_k + i + 1) AS s
  }
  WITH id, sum(s) AS fused ORDER BY fused DESC LIMIT $top_n
  RETURN collect(id) AS ids
}
CALL (ids) {
  WITH ids, ids[..$evidence_n] AS evidence_ids"""
    + top_reads.statement(ids="ids", evidence_ids="evidence_ids")
    + """}
RETURN lexical, dense,
  collect({chunk_id: chunk_id, doc_key: doc_key, title: title, cosine: cosine, units: units, cited: cited}) AS top
"""
)
"""One single-statement design of the query path's store work: the engine's own legs statement
(``reads.LEGS_STATEMENT``), plain RRF of its two legs in Cypher, and the rerank stage's own read of
the top candidates (``top_reads.statement``, with what reference expansion needs), returning each
leg's ids and scores and the top rows. Not a proven minimum: the legs still build their rows'
text and the top read finds its chunks again by id; and it leaves out the exact and graph legs,
fusion's own rules and the legs' regrown fetches."""


def one_statement_reads(
    driver: neo4j.Driver,
    database: str,
    *,
    text: str,
    embedding: list[float],
    expected_epoch: Any,
    index: str,
    prop: str,
    collections: Sequence[str],
    packs: Sequence[str],
    lexical_k: int,
    dense_k: int,
    rrf_k: int,
    top_n: int,
    evidence_n: int,
    splitter: str,
) -> dict[str, Any]:
    """``_ONE_STATEMENT`` for one question, sent as the raw hybrid query is (``execute_query``: BEGIN,
    the statement and its records in one round trip, then COMMIT): (dense rows, lexical rows, top
    rows). ``expected_epoch``: the store's index epoch (``index_epoch``), or the vector leg is
    skipped as the engine's legs statement skips it (``dense`` comes back empty)."""
    params: dict[str, Any] = {
        **reads.legs_parameters(
            text, embedding, expected=expected_epoch, index=index, lexical_k=lexical_k, dense_k=dense_k
        ),
        "collections": list(collections),
        "packs": list(packs),
        "rrf_k": rrf_k,
        "top_n": top_n,
        "evidence_n": evidence_n,
        **top_reads.parameters(prop, splitter=splitter, references=True),
    }
    records, _, _ = driver.execute_query(_ONE_STATEMENT, params, database_=database, routing_=neo4j.RoutingControl.READ)
    return dict(records[0]) if records else {"dense": [], "lexical": [], "top": []}


def index_epoch(driver: neo4j.Driver, database: str) -> Any:
    """The store's vector index epoch (what ``one_statement_reads`` checks, as ``reads.legs`` does),
    read as the query path reads it (``epochs.store_state``)."""
    with read_transaction(driver, database, packs=()) as rx:
        return epochs.store_state(rx).index_epoch
