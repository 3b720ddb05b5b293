"""Cypher of citations and the REFERENCES edges derived from them (``graph.writer`` composes
these into transactions). Each function runs statements in the caller's write transaction; the
caller passes every value as a parameter.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import neo4j

_WRITE_CITES = """
UNWIND $rows AS row
MATCH (s:Chunk {chunk_id: row.source_chunk_id})
MERGE (k:RefKey {key: $pack + '|' + row.normalized})
MERGE (s)-[r:CITES {normalized: row.normalized, raw: row.raw}]->(k)
  SET r.ref_type = row.ref_type, r.start = row.start, r.end = row.end
"""

_CLEAR_CITES = """
UNWIND $keys AS key
MATCH (v:DocumentVersion {key: key})-[:HAS_CHUNK]->(:Chunk)-[r:CITES]->() DELETE r
"""

# Derived edges: every active citing chunk to every active chunk answering to the cited key,
# self references skipped. Resolution is incremental: a write touches only the keys its document
# cites or answers to (any version, so a superseded version's targets are re-derived too), which
# keeps a full build linear in documents and a one-document change local. Edges whose source or
# target is no longer active are dropped for those keys. `raw` is the smallest citation text, so
# a re-run writes the same edge byte for byte.
_DROP_KEY_REFERENCES = """
UNWIND $keys AS key
MATCH (k:RefKey {key: key})<-[:CITES]-(s:Chunk)-[e:REFERENCES {normalized: substring(key, size($pack) + 1)}]->(:Chunk)
WHERE s.pack = $pack
DELETE e
"""

_RESOLVE_KEYS = """
UNWIND $keys AS key
MATCH (k:RefKey {key: key})<-[r:CITES]-(s:Chunk {pack: $pack, active: true})
MATCH (k)<-[:ANSWERS_TO]-(t:Chunk {active: true})
WHERE s <> t
WITH s, t, r.normalized AS normalized, r ORDER BY r.raw
WITH s, t, normalized, collect(r)[0] AS first
MERGE (s)-[e:REFERENCES {normalized: normalized}]->(t)
  SET e.source_type = 'deterministic_reference', e.ref_type = first.ref_type, e.raw = first.raw,
      e.resolved = true, e.resolution_version = $resolution_version
"""

_DOCS_KEYS = """
UNWIND $doc_ids AS doc_id
MATCH (c:Chunk {pack: $pack, doc_id: doc_id})
OPTIONAL MATCH (c)-[:CITES|ANSWERS_TO]->(k:RefKey)
RETURN doc_id, collect(DISTINCT k.key) AS keys
"""

_DROP_DOCS_REFERENCES = """
UNWIND $doc_ids AS doc_id
MATCH (c:Chunk {pack: $pack, doc_id: doc_id})-[e:REFERENCES]-(:Chunk)
WITH DISTINCT e
DELETE e
"""

_COUNT_CITES_MANY = """
UNWIND $keys AS key
MATCH (v:DocumentVersion {key: key})-[:HAS_CHUNK]->(s:Chunk)-[r:CITES]->(k:RefKey)
OPTIONAL MATCH (k)<-[:ANSWERS_TO]-(t:Chunk {active: true}) WHERE t <> s
WITH key, r, count(t) AS targets
RETURN key, sum(CASE WHEN targets > 0 THEN 1 ELSE 0 END) AS resolved,
       sum(CASE WHEN targets = 0 THEN 1 ELSE 0 END) AS unresolved
"""


def clear_citations(tx: neo4j.ManagedTransaction, *, keys: Sequence[str]) -> None:
    """Delete the CITES edges of the chunks of these document versions (by version key)."""
    tx.run(_CLEAR_CITES, keys=list(keys)).consume()


def write_citations(tx: neo4j.ManagedTransaction, *, pack: str, rows: Sequence[dict[str, Any]]) -> None:
    """Merge one CITES edge per row (chunk -> normalized key)."""
    tx.run(_WRITE_CITES, rows=list(rows), pack=pack).consume()


def resolve_keys(tx: neo4j.ManagedTransaction, *, pack: str, keys: Sequence[str], resolution_version: str) -> None:
    """Re-derive the REFERENCES edges of these (pack-scoped) keys: drop theirs, then resolve."""
    tx.run(_DROP_KEY_REFERENCES, keys=list(keys), pack=pack).consume()
    tx.run(_RESOLVE_KEYS, keys=list(keys), pack=pack, resolution_version=resolution_version).consume()


def document_keys(tx: neo4j.ManagedTransaction, *, pack: str, doc_ids: Sequence[str]) -> dict[str, list[str]]:
    """Each document's keys: the ones its chunks (any version) cite or answer to."""
    return {r["doc_id"]: r["keys"] for r in tx.run(_DOCS_KEYS, pack=pack, doc_ids=list(doc_ids))}


def drop_document_references(tx: neo4j.ManagedTransaction, *, pack: str, doc_ids: Sequence[str]) -> None:
    """Delete every REFERENCES edge into or out of these documents' chunks."""
    tx.run(_DROP_DOCS_REFERENCES, pack=pack, doc_ids=list(doc_ids)).consume()


def citation_counts(tx: neo4j.ManagedTransaction, *, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per version key: its citations with at least one active target (resolved) and without."""
    return {r["key"]: r.data() for r in tx.run(_COUNT_CITES_MANY, keys=list(keys))}
