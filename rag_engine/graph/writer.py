"""Idempotent, batched writes of document versions, chunks, embeddings and references.

Every write is UNWIND + MERGE in a managed transaction, keyed by stable ids, so re-running a
partition leaves node and edge counts unchanged. A new version's chunks are written inactive
('pending'); ``activate_version`` makes it the current one once it is indexed, deactivating
every other version's chunks (supersede). Until then the previous version keeps answering.

A document owns the keys its pack says name it (``(:Document)-[:OWNS]->(:RefKey)``, see
``DomainPack.owned_keys``); a version whose chunks answer to a key another document owns is not
written (``KeyConflict``), checked in the same transaction as the write.
Writes that can change which inferred edges a question may traverse (chunks written, activated
or withdrawn, inferred records replaced) bump the graph epoch last in their transaction
(``store.epochs``), so no process keeps a cached graph fact past them.

Longer than 500 lines because every Cypher write of the store is here, so the transaction shape
and batching of each write can be reviewed side by side.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import neo4j

from rag_engine.errors import EmbedderMismatch, KeyConflict
from rag_engine.packs import ChunkRecord, ReferenceRecord
from rag_engine.store.connection import single_record
from rag_engine.store.epochs import bump_graph_epoch
from rag_engine.store.names import VECTOR_INDEX


def batched(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def version_key(pack: str, partition_key: str) -> str:
    """DocumentVersion key: pack-scoped, since partition keys are unique only within a pack."""
    return f"{pack}:{partition_key}"


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


_WORD = re.compile(r"[^\W\d_]{2,}")


def retrieval_eligible(text: str, min_words: int) -> bool:
    """A chunk with fewer than ``min_words`` words (a heading, a bare number) is kept as a
    citation anchor and reference target, but never retrieved by the lexical or dense leg alone:
    near-empty text is close to every question in a vector space."""
    return min_words <= 0 or len(_WORD.findall(text)) >= min_words


def chunk_row(c: ChunkRecord, min_words: int = 0) -> dict[str, Any]:
    return {**c.model_dump(mode="json"), "eligible": retrieval_eligible(c.text, min_words)}


@dataclass(frozen=True)
class VersionWrite:
    """One document version for ``write_document_versions``: the document's fields, its chunks
    and the keys it owns (``DomainPack.owned_keys``)."""

    doc_id: str
    version: str
    title: str
    collection: str
    content_hash: str
    source_path: str
    chunks: Sequence[ChunkRecord]
    owned_keys: Sequence[str] = ()


def write_document_version(
    driver: neo4j.Driver,
    database: str,
    *,
    pack: str,
    doc_id: str,
    version: str,
    title: str,
    collection: str,
    content_hash: str,
    source_path: str,
    chunks: Sequence[ChunkRecord],
    batch_size: int = 500,
    min_words: int = 0,
    owned_keys: Sequence[str] = (),
) -> None:
    """Write one document version and its chunks (pending until ``activate_version``) and the keys
    the document owns. Raises ``KeyConflict``, writing nothing, when a chunk answers to a key another
    document of the pack owns: the document already holding the key keeps it."""
    doc = VersionWrite(doc_id, version, title, collection, content_hash, source_path, chunks, owned_keys)
    (outcome,) = write_document_versions(
        driver, database, pack=pack, docs=[doc], batch_size=batch_size, min_words=min_words
    )
    if outcome is not None:
        raise outcome


def write_document_versions(
    driver: neo4j.Driver,
    database: str,
    *,
    pack: str,
    docs: Sequence[VersionWrite],
    batch_size: int = 500,
    min_words: int = 0,
) -> list[KeyConflict | None]:
    """``write_document_version`` of several versions (of distinct documents) in one transaction,
    in order: a version whose chunks answer to a key another document owns (in the store, or
    claimed by an earlier version of this call) is not written and gets its ``KeyConflict``
    (None: written). The ownership is decided in order, as one write per version would: the
    store's owners are read once in the transaction, and each version written takes its keys
    over (releasing the ones it no longer declares) before the next is checked."""
    if len({d.doc_id for d in docs}) != len(docs):
        raise ValueError("write_document_versions: one version per document")
    answered = {d.doc_id: sorted({k for c in d.chunks for k in c.keys}) for d in docs}

    def work(tx: neo4j.ManagedTransaction) -> list[KeyConflict | None]:
        keys = sorted({k for ks in answered.values() for k in ks})
        owners: dict[str, set[str]] = {k: set() for k in keys}
        for r in tx.run(_KEY_OWNERS, keys=keys, pack=pack):
            owners[r["key"]] = set(r["owners"])
        outcomes: list[KeyConflict | None] = []
        for d in docs:
            taken = {k: min(owners[k] - {d.doc_id}) for k in answered[d.doc_id] if owners[k] - {d.doc_id}}
            if taken:
                outcomes.append(
                    KeyConflict(
                        f"{d.doc_id}: answers to "
                        + ", ".join(f"key {k!r}, which document {o!r} owns" for k, o in taken.items())
                        + "; the document already holding a key keeps it",
                        taken,
                    )
                )
                continue
            outcomes.append(None)
            for holders in owners.values():  # its owned keys replace the document's
                holders.discard(d.doc_id)
            for k in set(d.owned_keys):
                owners.setdefault(k, set()).add(d.doc_id)
        written = [d for d, outcome in zip(docs, outcomes, strict=True) if outcome is None]
        if not written:
            return outcomes
        fields = [
            {
                "doc_id": d.doc_id,
                "key": version_key(pack, f"{d.doc_id}--{d.version}"),
                "version": d.version,
                "title": d.title,
                "collection": d.collection,
                "content_hash": d.content_hash,
                "source_path": d.source_path,
                "chunk_ids": [c.chunk_id for c in d.chunks],
                "owned": sorted(set(d.owned_keys)),
            }
            for d in written
        ]
        rows = [
            {**chunk_row(c, min_words), "version_key": f["key"]}
            for d, f in zip(written, fields, strict=True)
            for c in d.chunks
        ]
        tx.run(_WRITE_VERSIONS, docs=fields, pack=pack).consume()
        for batch in batched(rows, batch_size):
            tx.run(_WRITE_CHUNKS, rows=list(batch), pack=pack).consume()
        tx.run(_DROP_VANISHED_CHUNKS, docs=fields).consume()
        tx.run(_WRITE_OWNED, docs=fields, pack=pack).consume()
        bump_graph_epoch(tx)
        return outcomes

    with driver.session(database=database) as session:
        return session.execute_write(work)


def activate_version(driver: neo4j.Driver, database: str, *, pack: str, doc_id: str, version: str) -> None:
    """Make a written (and indexed) version the current one; every other version is superseded."""

    def work(tx: neo4j.ManagedTransaction) -> None:
        tx.run(
            _ACTIVATE, pack=pack, doc_id=doc_id, version=version, key=version_key(pack, f"{doc_id}--{version}")
        ).consume()
        bump_graph_epoch(tx)

    with driver.session(database=database) as session:
        session.execute_write(work)


def write_chunks_per_row(
    driver: neo4j.Driver, database: str, *, pack: str, key: str, chunks: Iterable[ChunkRecord]
) -> None:
    """The naive path (one transaction per chunk). Kept only so the benchmark can compare."""
    key = version_key(pack, key)

    def work(tx: neo4j.ManagedTransaction, row: dict[str, Any]) -> None:
        tx.run(_WRITE_CHUNKS, rows=[{**row, "version_key": key}], pack=pack).consume()

    with driver.session(database=database) as session:
        for c in chunks:
            session.execute_write(work, chunk_row(c))


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


def _hold_active_index(tx: neo4j.ManagedTransaction, identity: str, property: str) -> None:
    """Write-lock the active index's (:IndexMeta) for the rest of the transaction and check it is
    still the one these vectors were made for. A re-index switch takes the same lock before its
    check that every current chunk has the new vector (``reindex._switch``), so a version
    embedded before a switch can never go live after it without the new index's vector."""
    rec = tx.run(_HOLD_INDEX, meta=VECTOR_INDEX).single()
    if rec is None:
        raise EmbedderMismatch("no active vector index: it was removed during the run; run the ingest again")
    if (rec["identity"], rec["property"]) != (identity, property):
        raise EmbedderMismatch(
            f"the active vector index changed during the run (a re-index switched it to {rec['identity']!r}); "
            "these vectors are for the old one and are not activated. Run the ingest again with the config "
            "the store now answers to"
        )


def write_embeddings(
    driver: neo4j.Driver,
    database: str,
    *,
    identity: str,
    rows: Sequence[dict[str, Any]],
    batch_size: int = 500,
    property: str = "embedding",
    activate: Sequence[tuple[str, str, str]] = (),
) -> None:
    """rows: {chunk_id, embedding, units?}. ``units``: the unit-vector properties
    (``ingest.unit_vectors``), set with the vector. Stored as a float vector in ``property`` (the active index's,
    see schema.current_embedder); the first index's shared property also gets the ``embedder``
    marker, other properties are named by their identity. ``activate``, (pack, doc_id, version)
    each: those versions go live in the same transaction (``activate_version``), in order, once
    their vectors (all in ``rows``) are in.

    ``db.create.setNodeVectorProperty`` inside UNWIND, one statement per batch: it stores a
    float32 array, half the size of the float64 list a plain SET stores (Neo4j 5.26's vector
    index accepts both; their write rates measured the same)."""

    def work(tx: neo4j.ManagedTransaction) -> None:
        if activate:
            _hold_active_index(tx, identity, property)
        for batch in batched(rows, batch_size):
            tx.run(_SET_EMBEDDINGS, rows=list(batch), identity=identity, property=property).consume()
        for pack, doc_id, version in activate:
            tx.run(
                _ACTIVATE, pack=pack, doc_id=doc_id, version=version, key=version_key(pack, f"{doc_id}--{version}")
            ).consume()

    with driver.session(database=database) as session:
        session.execute_write(work)


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


def _resolve(
    tx: neo4j.ManagedTransaction, pack: str, keys: list[str], resolution_version: str, batch_size: int = 2000
) -> None:
    for batch in batched(keys, batch_size):
        tx.run(_DROP_KEY_REFERENCES, keys=list(batch), pack=pack).consume()
        tx.run(_RESOLVE_KEYS, keys=list(batch), pack=pack, resolution_version=resolution_version).consume()


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


def _rederive_documents(
    tx: neo4j.ManagedTransaction, pack: str, doc_ids: list[str], resolution_version: str
) -> dict[str, list[str]]:
    """Re-derive the REFERENCES edges into and out of these documents: their edges are dropped,
    then every key they cite or answer to (any version) is resolved once. The same edges as one
    resolution per document, since an edge touching one of them has its key among that
    document's keys. Returns each document's keys."""
    if not doc_ids:
        return {}
    keys = {r["doc_id"]: r["keys"] for r in tx.run(_DOCS_KEYS, pack=pack, doc_ids=doc_ids)}
    tx.run(_DROP_DOCS_REFERENCES, pack=pack, doc_ids=doc_ids).consume()
    _resolve(tx, pack, sorted({k for ks in keys.values() for k in ks}), resolution_version)
    return keys


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


def withdraw_missing(
    driver: neo4j.Driver, database: str, *, pack: str, present: Sequence[str], resolution_version: str
) -> list[str]:
    """Documents no longer in the corpus stop being retrievable (their version becomes
    'withdrawn', their chunks inactive), release the keys they owned, and references into them
    are re-derived."""

    def work(tx: neo4j.ManagedTransaction) -> list[str]:
        tx.run(_RELEASE_OWNED, pack=pack, present=list(present)).consume()
        withdrawn = single_record(tx.run(_WITHDRAW, pack=pack, present=list(present)), "withdraw")["withdrawn"]
        _rederive_documents(tx, pack, list(withdrawn), resolution_version)
        bump_graph_epoch(tx)
        return list(withdrawn)

    with driver.session(database=database) as session:
        return session.execute_write(work)


def write_citations(
    driver: neo4j.Driver, database: str, *, pack: str, key: str, refs: Sequence[ReferenceRecord], batch_size: int = 500
) -> None:
    """Replace this version's extracted citations (chunk -> normalized key)."""
    write_citations_many(driver, database, pack=pack, items=[(key, refs)], batch_size=batch_size)


def write_citations_many(
    driver: neo4j.Driver,
    database: str,
    *,
    pack: str,
    items: Sequence[tuple[str, Sequence[ReferenceRecord]]],
    batch_size: int = 500,
) -> None:
    """Replace the extracted citations of several versions, ``(partition key, refs)``, in one
    transaction. A version's citations come from its own chunks, so clearing them all first and
    then writing them all leaves what one write per version leaves."""
    keys = [version_key(pack, key) for key, _ in items]
    rows = [r.model_dump(mode="json") for _, refs in items for r in refs]

    def work(tx: neo4j.ManagedTransaction) -> None:
        tx.run(_CLEAR_CITES, keys=keys).consume()
        for batch in batched(rows, batch_size):
            tx.run(_WRITE_CITES, rows=list(batch), pack=pack).consume()

    with driver.session(database=database) as session:
        session.execute_write(work)


def resolve_references(
    driver: neo4j.Driver, database: str, *, pack: str, key: str, doc_id: str, resolution_version: str
) -> dict[str, int]:
    """Re-derive the REFERENCES edges of the keys this document cites or answers to (any of its
    versions); return this version's resolved/unresolved citation counts."""
    return write_graph_many(
        driver, database, pack=pack, items=[(key, doc_id, None)], resolution_version=resolution_version
    )[0]


_COUNT_CITES_MANY = """
UNWIND $keys AS key
MATCH (v:DocumentVersion {key: key})-[:HAS_CHUNK]->(s:Chunk)-[r:CITES]->(k:RefKey)
OPTIONAL MATCH (k)<-[:ANSWERS_TO]-(t:Chunk {active: true}) WHERE t <> s
WITH key, r, count(t) AS targets
RETURN key, sum(CASE WHEN targets > 0 THEN 1 ELSE 0 END) AS resolved,
       sum(CASE WHEN targets = 0 THEN 1 ELSE 0 END) AS unresolved
"""


def write_graph_many(
    driver: neo4j.Driver,
    database: str,
    *,
    pack: str,
    items: Sequence[tuple[str, str, Sequence[dict[str, Any]] | None]],
    resolution_version: str,
    batch_size: int = 500,
) -> list[dict[str, int]]:
    """The graph step of several versions, ``(partition key, doc_id, inferred records or None)``,
    in one transaction: the REFERENCES edges of their documents are re-derived once
    (``_rederive_documents``), then each document's inferred records are replaced
    (``write_inferred``, in order; None leaves them alone). Returns each version's
    resolved/unresolved citation counts (and inferred figures when records were given)."""
    doc_ids = list(dict.fromkeys(doc_id for _, doc_id, _ in items))
    versions = [version_key(pack, key) for key, _, _ in items]

    def work(tx: neo4j.ManagedTransaction) -> list[dict[str, int]]:
        keys = _rederive_documents(tx, pack, doc_ids, resolution_version)
        counts = {r["key"]: r for r in tx.run(_COUNT_CITES_MANY, keys=versions)}
        out = []
        for (_, doc_id, records), version in zip(items, versions, strict=True):
            rec = counts.get(version)
            figures = {
                "resolved": int(rec["resolved"] or 0) if rec else 0,
                "unresolved": int(rec["unresolved"] or 0) if rec else 0,
                "keys_resolved": len(keys.get(doc_id, [])),
            }
            if records is not None:
                figures.update(_write_inferred(tx, pack, doc_id, records, batch_size))
            out.append(figures)
        if any(records is not None for _, _, records in items):
            bump_graph_epoch(tx)
        return out

    with driver.session(database=database) as session:
        return session.execute_write(work)


# -- LLM-inferred graph ------------------------------------------------------------------------

_DROP_INFERRED_FOR_DOC = """
MATCH (:Entity)-[r:RELATED {doc_id: $doc_id, pack: $pack}]->(:Entity) DELETE r
WITH count(*) AS ignored
MATCH (:Entity)-[m:MENTIONED_IN {doc_id: $doc_id, pack: $pack}]->(:Chunk) DELETE m
"""

_WRITE_ENTITIES = """
UNWIND $rows AS row
MERGE (e:Entity {entity_id: row.entity_id})
  ON CREATE SET e.name = row.name, e.normalized_name = row.normalized_name, e.type = row.type,
                e.pack = $pack, e.description = row.description, e.created_run_id = row.run_id
WITH e, row
MATCH (c:Chunk {chunk_id: row.chunk_id})
MERGE (e)-[m:MENTIONED_IN {chunk_id: row.chunk_id}]->(c)
  SET m += row.provenance, m.pack = $pack
"""

_WRITE_RELATIONSHIPS = """
UNWIND $rows AS row
MATCH (a:Entity {entity_id: row.source_id}), (b:Entity {entity_id: row.target_id})
MERGE (a)-[r:RELATED {type: row.type, chunk_id: row.provenance.chunk_id}]->(b)
  SET r += row.provenance, r.confidence = row.confidence, r.retrieval_eligible = row.retrieval_eligible,
      r.description = row.description, r.pack = $pack
"""


def write_inferred(
    driver: neo4j.Driver,
    database: str,
    *,
    pack: str,
    doc_id: str,
    records: Sequence[dict[str, Any]],
    batch_size: int = 500,
) -> dict[str, int]:
    """Replace every inferred record of a document (any version) with this version's records.

    Removing by doc id first is what drops a superseded version's inferred edges; the MERGE
    keys make a re-run of the same version leave counts unchanged.
    """

    def work(tx: neo4j.ManagedTransaction) -> dict[str, int]:
        out = _write_inferred(tx, pack, doc_id, records, batch_size)
        bump_graph_epoch(tx)
        return out

    with driver.session(database=database) as session:
        return session.execute_write(work)


def _write_inferred(
    tx: neo4j.ManagedTransaction, pack: str, doc_id: str, records: Sequence[dict[str, Any]], batch_size: int
) -> dict[str, int]:
    """``write_inferred`` inside a caller's transaction (which bumps the graph epoch last)."""
    entities = [
        {**e, "run_id": e["provenance"]["extraction_run_id"], "chunk_id": e["provenance"]["chunk_id"]}
        for r in records
        for e in r["entities"]
    ]
    rels = [rel for r in records for rel in r["relationships"]]
    tx.run(_DROP_INFERRED_FOR_DOC, doc_id=doc_id, pack=pack).consume()
    for batch in batched(entities, batch_size):
        tx.run(_WRITE_ENTITIES, rows=list(batch), pack=pack).consume()
    for batch in batched(rels, batch_size):
        tx.run(_WRITE_RELATIONSHIPS, rows=list(batch), pack=pack).consume()
    return {
        "entities": len(entities),
        "relationships": len(rels),
        "eligible": sum(1 for r in rels if r["retrieval_eligible"]),
    }


def write_extraction_run(
    driver: neo4j.Driver,
    database: str,
    *,
    run_id: str,
    pack: str,
    model: str,
    prompt_hash: str,
    chunks: int,
    cache_hits: int,
    tokens: int,
    cost: str | None,
    status: str,
    skipped: int,
    failures: int,
) -> None:
    driver.execute_query(
        "MERGE (r:ExtractionRun {run_id: $run_id}) "
        "SET r.pack = $pack, r.model = $model, r.prompt_hash = $prompt_hash, r.chunks = $chunks, "
        "r.cache_hits = $cache_hits, r.tokens = $tokens, r.cost = $cost, r.status = $status, "
        "r.skipped = $skipped, r.failures = $failures, r.finished_at = datetime()",
        run_id=run_id,
        pack=pack,
        model=model,
        prompt_hash=prompt_hash,
        chunks=chunks,
        cache_hits=cache_hits,
        tokens=tokens,
        cost=cost,
        status=status,
        skipped=skipped,
        failures=failures,
        database_=database,
    )
