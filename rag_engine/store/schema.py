"""Constraints and indexes, created idempotently at startup.

The vector index is created with the active embedder's dimension and its identity is recorded
on an (:IndexMeta) node; a query or write with another identity is refused until a full
re-index is done, because mixing embedding spaces silently ruins recall.

Blue/green re-index (``rag_engine.ingest.reindex``): every embedder identity gets its own vector index
and chunk property, named by the identity (``index_names``); the (:IndexMeta) node points at the
active pair (``index``, ``property``). The first index of a database keeps the original names
(``chunk_embedding`` on ``embedding``), which is also what an IndexMeta without those fields
means. ``IndexMeta.epoch`` gets a fresh token whenever the active index changes (created,
switched): the query path caches the active index per epoch (``store.epochs``). Each non-active
index is a (:VectorIndex {identity, index, property, state}) record: ``building`` while a
re-index fills it, ``retired`` after a switch until it is dropped.

Schema statements take schema locks: two ingests starting together on a fresh database deadlock
on them (``TransientError: DeadlockDetected``). So every schema statement is retried on a
transient error with jittered exponential backoff (``IF NOT EXISTS`` makes a retry harmless), a
concurrent creator that won the race counts as success, and ``ensure_schema`` runs once per
driver and database in a process (threads wait for the first one).
"""

from __future__ import annotations

import hashlib
import logging
import random
import re
import threading
import time
import weakref
from typing import Any

import neo4j
from neo4j.exceptions import ClientError, TransientError

from rag_engine.errors import EmbedderMismatch, StoreError
from rag_engine.store.names import CHUNK_FULLTEXT as CHUNK_FULLTEXT
from rag_engine.store.names import EMBEDDING_PROPERTY as EMBEDDING_PROPERTY
from rag_engine.store.names import ENTITY_FULLTEXT as ENTITY_FULLTEXT
from rag_engine.store.names import VECTOR_INDEX as VECTOR_INDEX

log = logging.getLogger(__name__)

_SAFE_NAME = re.compile(r"^[a-z][a-z0-9_]*$")

CONSTRAINTS = (
    "CREATE CONSTRAINT document_key IF NOT EXISTS FOR (d:Document) REQUIRE d.key IS UNIQUE",
    "CREATE CONSTRAINT document_version_key IF NOT EXISTS FOR (v:DocumentVersion) REQUIRE v.key IS UNIQUE",
    "CREATE CONSTRAINT chunk_id IF NOT EXISTS FOR (c:Chunk) REQUIRE c.chunk_id IS UNIQUE",
    "CREATE CONSTRAINT ref_key IF NOT EXISTS FOR (k:RefKey) REQUIRE k.key IS UNIQUE",
    "CREATE CONSTRAINT entity_id IF NOT EXISTS FOR (e:Entity) REQUIRE e.entity_id IS UNIQUE",
    "CREATE CONSTRAINT extraction_run_id IF NOT EXISTS FOR (r:ExtractionRun) REQUIRE r.run_id IS UNIQUE",
    "CREATE CONSTRAINT index_meta_name IF NOT EXISTS FOR (m:IndexMeta) REQUIRE m.name IS UNIQUE",
    "CREATE CONSTRAINT vector_index_identity IF NOT EXISTS FOR (v:VectorIndex) REQUIRE v.identity IS UNIQUE",
    "CREATE CONSTRAINT store_epoch_name IF NOT EXISTS FOR (e:StoreEpoch) REQUIRE e.name IS UNIQUE",
)
INDEXES = (
    "CREATE INDEX chunk_doc IF NOT EXISTS FOR (c:Chunk) ON (c.doc_id)",
    "CREATE INDEX chunk_anchor IF NOT EXISTS FOR (c:Chunk) ON (c.anchor)",
    "CREATE INDEX chunk_pack_active IF NOT EXISTS FOR (c:Chunk) ON (c.pack, c.active)",
    "CREATE INDEX entity_normalized IF NOT EXISTS FOR (e:Entity) ON (e.normalized_name)",
    f"CREATE FULLTEXT INDEX {CHUNK_FULLTEXT} IF NOT EXISTS FOR (c:Chunk) ON EACH [c.text, c.heading]",
    f"CREATE FULLTEXT INDEX {ENTITY_FULLTEXT} IF NOT EXISTS FOR (e:Entity) ON EACH [e.name]",
)


# schema objects of earlier layouts, dropped on startup (Document ids became pack-scoped keys)
OBSOLETE = ("DROP CONSTRAINT document_id IF EXISTS",)


SCHEMA_ATTEMPTS = 10
SCHEMA_BACKOFF_S = 0.1
# another session created the same object between our check and our create: it exists, done
_ALREADY_EXISTS = ("AlreadyExists", "EquivalentSchemaRule")

_ensured: weakref.WeakKeyDictionary[neo4j.Driver, set[str]] = weakref.WeakKeyDictionary()
_locks: weakref.WeakKeyDictionary[neo4j.Driver, threading.Lock] = weakref.WeakKeyDictionary()
_locks_guard = threading.Lock()


def run_schema_statement(driver: neo4j.Driver, database: str, stmt: str, **params: Any) -> None:
    """One schema statement in its own auto-commit transaction, retried on transient errors
    (deadlocks between concurrent schema changes) with jittered exponential backoff."""
    for attempt in range(1, SCHEMA_ATTEMPTS + 1):
        try:
            with driver.session(database=database) as session:
                session.run(stmt, **params).consume()
            return
        except ClientError as exc:
            if any(marker in (exc.code or "") for marker in _ALREADY_EXISTS):
                return
            raise
        except TransientError as exc:
            if attempt == SCHEMA_ATTEMPTS:
                raise
            delay = SCHEMA_BACKOFF_S * 2 ** (attempt - 1) * (0.5 + random.random())
            log.info(
                "schema statement hit %s (attempt %d/%d), retrying in %.2fs", exc.code, attempt, SCHEMA_ATTEMPTS, delay
            )
            time.sleep(delay)


def await_indexes(driver: neo4j.Driver, database: str, *, seconds: int = 300) -> None:
    """Wait (up to ``seconds``) until every index is online."""
    run_schema_statement(driver, database, f"CALL db.awaitIndexes({int(seconds)})")


def ensure_schema(driver: neo4j.Driver, database: str) -> None:
    """Constraints and indexes, once per driver and database in this process; safe to run
    concurrently from other processes (retried, idempotent)."""
    with _locks_guard:
        lock = _locks.setdefault(driver, threading.Lock())
    with lock:  # a second thread on this driver waits for the first instead of racing it
        if database in _ensured.get(driver, ()):
            return
        for stmt in OBSOLETE + CONSTRAINTS + INDEXES:
            run_schema_statement(driver, database, stmt)
        await_indexes(driver, database)
        _ensured.setdefault(driver, set()).add(database)


def index_names(identity: str) -> tuple[str, str]:
    """(vector index name, chunk property) for an embedder identity that is not the first one:
    a digest of the identity, so names are valid identifiers whatever the identity holds."""
    digest = hashlib.sha256(identity.encode("utf-8")).hexdigest()[:12]
    return f"{VECTOR_INDEX}_{digest}", f"{EMBEDDING_PROPERTY}_{digest}"


def safe_name(name: str) -> str:
    """Index and property names are interpolated into schema statements: only our own shapes pass."""
    if not _SAFE_NAME.match(name):
        raise ValueError(f"not an index or property name of ours: {name!r}")
    return name


def current_embedder(driver: neo4j.Driver, database: str) -> dict[str, Any] | None:
    """The active index: identity, dimension, index (vector index name) and property (chunk
    property holding its vectors); None before the first chunk_index."""
    records, _, _ = driver.execute_query(
        "MATCH (m:IndexMeta {name: $name}) RETURN m.identity AS identity, m.dimension AS dimension, "
        "coalesce(m.index, $index) AS index, coalesce(m.property, $property) AS property",
        name=VECTOR_INDEX,
        index=VECTOR_INDEX,
        property=EMBEDDING_PROPERTY,
        database_=database,
        routing_=neo4j.RoutingControl.READ,
    )
    return dict(records[0]) if records else None


def active_vector_index(driver: neo4j.Driver, database: str) -> tuple[str, str] | None:
    """(vector index name, chunk property) the query path reads, or None without an index."""
    meta = current_embedder(driver, database)
    return (meta["index"], meta["property"]) if meta else None


def create_vector_index(driver: neo4j.Driver, database: str, index: str, prop: str, dimension: int) -> None:
    """Cosine, without Neo4j's default int8 quantization: quantized scores move by about 1e-4,
    as much as the gaps between e5's neighbours (its similarities sit in a narrow band), and the
    quantization ranges are learnt per index segment, so the dense ranking would depend on how
    the chunks happened to be written (batches, order), not only on what they say."""
    run_schema_statement(
        driver,
        database,
        f"CREATE VECTOR INDEX {safe_name(index)} IF NOT EXISTS FOR (c:Chunk) ON (c.{safe_name(prop)}) "
        "OPTIONS {indexConfig: {`vector.dimensions`: $dim, `vector.similarity_function`: 'cosine', "
        "`vector.quantization.enabled`: false}}",
        dim=dimension,
    )


def ensure_vector_index(driver: neo4j.Driver, database: str, identity: str, dimension: int) -> str:
    """Create the vector index for this embedder, or refuse if another embedder's index is active.
    Returns the chunk property the active index reads (where chunk_index writes vectors)."""
    existing = current_embedder(driver, database)
    if existing and existing["identity"] != identity:
        raise EmbedderMismatch(
            f"the chunk index was built with embedder {existing['identity']!r}; the active embedder is "
            f"{identity!r}. Run a full re-index (`rag reindex`) before using it."
        )
    index, prop = (existing["index"], existing["property"]) if existing else (VECTOR_INDEX, EMBEDDING_PROPERTY)
    create_vector_index(driver, database, index, prop, dimension)
    if existing is None:
        run_schema_statement(
            driver,
            database,
            "MERGE (m:IndexMeta {name: $name}) ON CREATE SET m.identity = $identity, "
            "m.dimension = $dim, m.index = $index, m.property = $property, m.epoch = randomUUID()",
            name=VECTOR_INDEX,
            identity=identity,
            dim=dimension,
            index=index,
            property=prop,
        )
        existing = current_embedder(driver, database)
        if existing is None:
            raise StoreError("the IndexMeta node just merged could not be read back")
        if existing["identity"] != identity:  # a concurrent first index with another embedder won
            raise EmbedderMismatch(
                f"the chunk index was just built with embedder {existing['identity']!r}; "
                f"the active embedder is {identity!r}"
            )
    await_indexes(driver, database)
    active_property: str = existing["property"]
    return active_property


def index_coverage(driver: neo4j.Driver, database: str, packs: list[str] | None = None) -> dict[str, Any] | None:
    """The active index and how many current chunks (of ``packs``, default all) lack its vector:
    ``{embedder_identity, complete, missing, active_chunks}``; None without an index. On the
    first index's shared property the chunk's ``embedder`` marker must match too."""
    meta = current_embedder(driver, database)
    if meta is None:
        return None
    records, _, _ = driver.execute_query(
        "MATCH (c:Chunk {active: true}) WHERE ($packs IS NULL OR c.pack IN $packs) "
        "RETURN count(c) AS active, sum(CASE WHEN c[$prop] IS NULL OR ($legacy AND "
        "(c.embedder IS NULL OR c.embedder <> $identity)) THEN 1 ELSE 0 END) AS missing",
        packs=packs,
        prop=meta["property"],
        legacy=meta["property"] == EMBEDDING_PROPERTY,
        identity=meta["identity"],
        database_=database,
        routing_=neo4j.RoutingControl.READ,
    )
    active, missing = int(records[0]["active"]), int(records[0]["missing"] or 0)
    return {
        "embedder_identity": meta["identity"],
        "complete": missing == 0,
        "missing": missing,
        "active_chunks": active,
    }


def drop_vector_index(driver: neo4j.Driver, database: str, index: str, prop: str) -> None:
    """Drop one vector index and remove its property from every chunk (in batches)."""
    with driver.session(database=database) as session:
        session.run(f"DROP INDEX {safe_name(index)} IF EXISTS").consume()
        session.run(
            f"MATCH (c:Chunk) WHERE c.{safe_name(prop)} IS NOT NULL "
            f"CALL (c) {{ REMOVE c.{safe_name(prop)} }} IN TRANSACTIONS OF 5000 ROWS"
        ).consume()


def reset_vector_index(driver: neo4j.Driver, database: str) -> None:
    """Drop the active vector index and all its embeddings (a cold re-index; ``rag reindex`` is
    the blue/green one that keeps serving)."""
    meta = current_embedder(driver, database)
    index, prop = (meta["index"], meta["property"]) if meta else (VECTOR_INDEX, EMBEDDING_PROPERTY)
    drop_vector_index(driver, database, index, prop)
    with driver.session(database=database) as session:
        session.run("MATCH (m:IndexMeta {name: $name}) DETACH DELETE m", name=VECTOR_INDEX).consume()
