"""Cypher of document versions, chunks, owned keys and vectors (``graph.writer`` composes these
into transactions). Each function runs one statement in the caller's write transaction; the
caller passes every value as a parameter.

Every write is UNWIND + MERGE keyed by stable ids, so re-running a partition leaves node and edge
counts unchanged. A new version's chunks are written inactive ('pending'); ``activate`` makes it
the current one, deactivating every other version's chunks (supersede).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import neo4j

from rag_engine.store.connection import single_record
from rag_engine.store.names import VECTOR_INDEX

_WRITE_VERSIONS = """
UNWIND $docs AS doc
MERGE (d:Document {key: $pack + ':' + doc.doc_id})
  SET d.doc_id = doc.doc_id, d.pack = $pack, d.title = doc.title, d.collection = doc.collection
MERGE (v:DocumentVersion {key: doc.key})
  ON CREATE SET v.status = 'pending'
  SET v.version = doc.version, v.doc_id = doc.doc_id, v.content_hash = doc.content_hash,
      v.source_path = doc.source_path, v.updated_at = datetime()
MERGE (d)-[:HAS_VERSION]->(v)
"""

_ACTIVATE = """
MATCH (d:Document {key: $pack + ':' + $doc_id})-[:HAS_VERSION]->(v:DocumentVersion {key: $key})
SET v.status = 'current', v.activated_at = coalesce(v.activated_at, datetime())
WITH d, v
OPTIONAL MATCH (d)-[:HAS_VERSION]->(old:DocumentVersion) WHERE old.key <> $key AND old.status <> 'superseded'
SET old.status = 'superseded', old.superseded_at = datetime()
WITH DISTINCT v
OPTIONAL MATCH (c:Chunk {doc_id: $doc_id, pack: $pack})
SET c.active = (c.doc_version = $version)
"""

_WRITE_CHUNKS = """
UNWIND $rows AS row
MATCH (v:DocumentVersion {key: row.version_key})
MERGE (c:Chunk {chunk_id: row.chunk_id})
  SET c.anchor = row.anchor, c.doc_id = row.doc_id, c.doc_version = row.doc_version, c.pack = $pack,
      c.ordinal = row.ordinal, c.heading = row.heading, c.text = row.text, c.collection = row.collection,
      c.language = row.language, c.content_hash = row.content_hash, c.keys = row.keys,
      c.eligible = row.eligible, c.active = coalesce(c.active, false)
MERGE (v)-[:HAS_CHUNK]->(c)
WITH c, row
// keys the chunk no longer answers to (changed rules, same chunk id) must stop matching
OPTIONAL MATCH (c)-[old:ANSWERS_TO]->(k:RefKey) WHERE NOT k.key IN [x IN row.keys | $pack + '|' + x]
DELETE old
WITH DISTINCT c, row
UNWIND row.keys AS key
MERGE (k:RefKey {key: $pack + '|' + key})
MERGE (c)-[:ANSWERS_TO]->(k)
"""

_KEY_OWNERS = """
UNWIND $keys AS key
MATCH (:RefKey {key: $pack + '|' + key})<-[:OWNS]-(d:Document {pack: $pack})
RETURN key, collect(DISTINCT d.doc_id) AS owners
"""

# the version's owned keys replace the document's: a key its new text no longer declares is released
_WRITE_OWNED = """
UNWIND $docs AS doc
MATCH (d:Document {key: $pack + ':' + doc.doc_id})
OPTIONAL MATCH (d)-[o:OWNS]->(old:RefKey) WHERE NOT old.key IN [x IN doc.owned | $pack + '|' + x]
DELETE o
WITH DISTINCT d, doc
UNWIND doc.owned AS key
MERGE (k:RefKey {key: $pack + '|' + key})
MERGE (d)-[:OWNS]->(k)
"""

_DROP_VANISHED_CHUNKS = """
UNWIND $docs AS doc
MATCH (v:DocumentVersion {key: doc.key})-[:HAS_CHUNK]->(c:Chunk)
WHERE NOT c.chunk_id IN doc.chunk_ids
DETACH DELETE c
"""

_SET_EMBEDDINGS = """
UNWIND $rows AS row
MATCH (c:Chunk {chunk_id: row.chunk_id})
CALL db.create.setNodeVectorProperty(c, $property, row.embedding)
SET c.embedder = CASE WHEN $property = 'embedding' THEN $identity ELSE c.embedder END
SET c += coalesce(row.units, {})
"""


_HOLD_INDEX = """
MATCH (m:IndexMeta {name: $meta})
SET m.held = true REMOVE m.held
RETURN m.identity AS identity, coalesce(m.property, 'embedding') AS property
"""

_WITHDRAW = """
MATCH (d:Document {pack: $pack}) WHERE NOT d.doc_id IN $present
MATCH (d)-[:HAS_VERSION]->(v:DocumentVersion) WHERE v.status = 'current'
SET v.status = 'withdrawn', v.withdrawn_at = datetime()
WITH DISTINCT d
OPTIONAL MATCH (c:Chunk {pack: $pack, doc_id: d.doc_id}) WHERE c.active
SET c.active = false
RETURN collect(DISTINCT d.doc_id) AS withdrawn
"""


_RELEASE_OWNED = """
MATCH (d:Document {pack: $pack})-[o:OWNS]->(:RefKey) WHERE NOT d.doc_id IN $present
DELETE o
"""


def key_owners(tx: neo4j.ManagedTransaction, *, pack: str, keys: Sequence[str]) -> dict[str, set[str]]:
    """The documents of ``pack`` owning each of ``keys`` (keys nobody owns are absent)."""
    return {r["key"]: set(r["owners"]) for r in tx.run(_KEY_OWNERS, keys=list(keys), pack=pack)}


def write_versions(tx: neo4j.ManagedTransaction, *, pack: str, docs: Sequence[dict[str, Any]]) -> None:
    """Merge each document and its version (``docs``: doc_id, key, version, title, collection,
    content_hash, source_path); a new version is 'pending'."""
    tx.run(_WRITE_VERSIONS, docs=list(docs), pack=pack).consume()


def write_chunks(tx: neo4j.ManagedTransaction, *, pack: str, rows: Sequence[dict[str, Any]]) -> None:
    """Merge chunks (inactive when new) under their version (``row.version_key``), with the keys they answer to."""
    tx.run(_WRITE_CHUNKS, rows=list(rows), pack=pack).consume()


def drop_vanished_chunks(tx: neo4j.ManagedTransaction, *, docs: Sequence[dict[str, Any]]) -> None:
    """Delete a version's chunks whose ids are no longer in ``doc.chunk_ids``."""
    tx.run(_DROP_VANISHED_CHUNKS, docs=list(docs)).consume()


def write_owned(tx: neo4j.ManagedTransaction, *, pack: str, docs: Sequence[dict[str, Any]]) -> None:
    """Each document owns exactly ``doc.owned`` (keys it no longer declares are released)."""
    tx.run(_WRITE_OWNED, docs=list(docs), pack=pack).consume()


def activate(tx: neo4j.ManagedTransaction, *, pack: str, doc_id: str, version: str, key: str) -> None:
    """Version ``key`` becomes current; every other version is superseded and its chunks inactive."""
    tx.run(_ACTIVATE, pack=pack, doc_id=doc_id, version=version, key=key).consume()


def set_embeddings(
    tx: neo4j.ManagedTransaction, *, rows: Sequence[dict[str, Any]], identity: str, property: str
) -> None:
    """Store each row's vector in ``property`` (a float32 array) and its unit vectors."""
    tx.run(_SET_EMBEDDINGS, rows=list(rows), identity=identity, property=property).consume()


def hold_index_meta(tx: neo4j.ManagedTransaction) -> dict[str, Any] | None:
    """Write-lock the active index's (:IndexMeta) for the rest of the transaction; its identity
    and property, or None without an active index."""
    rec = tx.run(_HOLD_INDEX, meta=VECTOR_INDEX).single()
    return None if rec is None else {"identity": rec["identity"], "property": rec["property"]}


def release_owned(tx: neo4j.ManagedTransaction, *, pack: str, present: Sequence[str]) -> None:
    """Documents of ``pack`` not in ``present`` release the keys they own."""
    tx.run(_RELEASE_OWNED, pack=pack, present=list(present)).consume()


def withdraw(tx: neo4j.ManagedTransaction, *, pack: str, present: Sequence[str]) -> list[str]:
    """Documents of ``pack`` not in ``present``: current version 'withdrawn', chunks inactive.
    Returns their ids."""
    return list(single_record(tx.run(_WITHDRAW, pack=pack, present=list(present)), "withdraw")["withdrawn"])
