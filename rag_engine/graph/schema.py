"""Constraints and indexes, created idempotently at startup.

The vector index is created with the active embedder's dimension and its identity is recorded
on an (:IndexMeta) node; a query or write with another identity is refused until a full
re-index (``reset_vector_index``) is done, because mixing embedding spaces silently ruins recall.

Schema statements take schema locks: two ingests starting together on a fresh database deadlock
on them (``TransientError: DeadlockDetected``). So every schema statement is retried on a
transient error with jittered exponential backoff (``IF NOT EXISTS`` makes a retry harmless), a
concurrent creator that won the race counts as success, and ``ensure_schema`` runs once per
driver and database in a process (threads wait for the first one).
"""

from __future__ import annotations

import logging
import random
import threading
import time
import weakref

import neo4j
from neo4j.exceptions import ClientError, TransientError

from rag_engine.errors import EmbedderMismatch

log = logging.getLogger(__name__)

VECTOR_INDEX = "chunk_embedding"
CHUNK_FULLTEXT = "chunk_text"
ENTITY_FULLTEXT = "entity_name"

CONSTRAINTS = (
    "CREATE CONSTRAINT document_key IF NOT EXISTS FOR (d:Document) REQUIRE d.key IS UNIQUE",
    "CREATE CONSTRAINT document_version_key IF NOT EXISTS FOR (v:DocumentVersion) REQUIRE v.key IS UNIQUE",
    "CREATE CONSTRAINT chunk_id IF NOT EXISTS FOR (c:Chunk) REQUIRE c.chunk_id IS UNIQUE",
    "CREATE CONSTRAINT ref_key IF NOT EXISTS FOR (k:RefKey) REQUIRE k.key IS UNIQUE",
    "CREATE CONSTRAINT entity_id IF NOT EXISTS FOR (e:Entity) REQUIRE e.entity_id IS UNIQUE",
    "CREATE CONSTRAINT extraction_run_id IF NOT EXISTS FOR (r:ExtractionRun) REQUIRE r.run_id IS UNIQUE",
    "CREATE CONSTRAINT index_meta_name IF NOT EXISTS FOR (m:IndexMeta) REQUIRE m.name IS UNIQUE",
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

_ensured: "weakref.WeakKeyDictionary[neo4j.Driver, set[str]]" = weakref.WeakKeyDictionary()
_locks: "weakref.WeakKeyDictionary[neo4j.Driver, threading.Lock]" = weakref.WeakKeyDictionary()
_locks_guard = threading.Lock()


def run_schema_statement(driver: neo4j.Driver, database: str, stmt: str, **params) -> None:
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
            log.info("schema statement hit %s (attempt %d/%d), retrying in %.2fs",
                     exc.code, attempt, SCHEMA_ATTEMPTS, delay)
            time.sleep(delay)


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
        run_schema_statement(driver, database, "CALL db.awaitIndexes(300)")
        _ensured.setdefault(driver, set()).add(database)


def current_embedder(driver: neo4j.Driver, database: str) -> dict | None:
    records, _, _ = driver.execute_query(
        "MATCH (m:IndexMeta {name: $name}) RETURN m.identity AS identity, m.dimension AS dimension",
        name=VECTOR_INDEX,
        database_=database,
        routing_=neo4j.RoutingControl.READ,
    )
    return dict(records[0]) if records else None


def ensure_vector_index(driver: neo4j.Driver, database: str, identity: str, dimension: int) -> None:
    """Create the vector index for this embedder, or refuse if another embedder built it."""
    existing = current_embedder(driver, database)
    if existing and existing["identity"] != identity:
        raise EmbedderMismatch(
            f"the chunk index was built with embedder {existing['identity']!r}; the active embedder is "
            f"{identity!r}. Run a full re-index (`rag reindex`) before using it."
        )
    run_schema_statement(
        driver, database,
        f"CREATE VECTOR INDEX {VECTOR_INDEX} IF NOT EXISTS FOR (c:Chunk) ON (c.embedding) "
        "OPTIONS {indexConfig: {`vector.dimensions`: $dim, `vector.similarity_function`: 'cosine'}}",
        dim=dimension,
    )
    run_schema_statement(driver, database,
                         "MERGE (m:IndexMeta {name: $name}) SET m.identity = $identity, m.dimension = $dim",
                         name=VECTOR_INDEX, identity=identity, dim=dimension)
    run_schema_statement(driver, database, "CALL db.awaitIndexes(300)")


def check_embedder(driver: neo4j.Driver, database: str, identity: str) -> None:
    existing = current_embedder(driver, database)
    if existing is None:
        raise EmbedderMismatch("no chunk index exists yet: materialize chunk_index first")
    if existing["identity"] != identity:
        raise EmbedderMismatch(
            f"index built with {existing['identity']!r}, query uses {identity!r}: a full re-index is required"
        )


def reset_vector_index(driver: neo4j.Driver, database: str) -> None:
    """Drop the vector index and all embeddings: the first step of a full re-index."""
    with driver.session(database=database) as session:
        session.run(f"DROP INDEX {VECTOR_INDEX} IF EXISTS").consume()
        session.run("MATCH (c:Chunk) WHERE c.embedding IS NOT NULL CALL (c) { REMOVE c.embedding } IN TRANSACTIONS OF 5000 ROWS").consume()
        session.run("MATCH (m:IndexMeta {name: $name}) DETACH DELETE m", name=VECTOR_INDEX).consume()
