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

The statements themselves live in the store (``store.versions``, ``store.references``,
``store.inferred``); this module decides what to write and composes them into transactions.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import neo4j

from rag_engine.errors import EmbedderMismatch, KeyConflict
from rag_engine.packs import ChunkRecord, ReferenceRecord
from rag_engine.store import inferred, references, versions
from rag_engine.store.epochs import bump_graph_epoch


def batched(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def version_key(pack: str, partition_key: str) -> str:
    """DocumentVersion key: pack-scoped, since partition keys are unique only within a pack."""
    return f"{pack}:{partition_key}"


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
        owners.update(versions.key_owners(tx, pack=pack, keys=keys))
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
        versions.write_versions(tx, pack=pack, docs=fields)
        for batch in batched(rows, batch_size):
            versions.write_chunks(tx, pack=pack, rows=batch)
        versions.drop_vanished_chunks(tx, docs=fields)
        versions.write_owned(tx, pack=pack, docs=fields)
        bump_graph_epoch(tx)
        return outcomes

    with driver.session(database=database) as session:
        return session.execute_write(work)


def activate_version(driver: neo4j.Driver, database: str, *, pack: str, doc_id: str, version: str) -> None:
    """Make a written (and indexed) version the current one; every other version is superseded."""

    def work(tx: neo4j.ManagedTransaction) -> None:
        versions.activate(tx, pack=pack, doc_id=doc_id, version=version, key=version_key(pack, f"{doc_id}--{version}"))
        bump_graph_epoch(tx)

    with driver.session(database=database) as session:
        session.execute_write(work)


def write_chunks_per_row(
    driver: neo4j.Driver, database: str, *, pack: str, key: str, chunks: Iterable[ChunkRecord]
) -> None:
    """The naive path (one transaction per chunk). Kept only so the benchmark can compare."""
    key = version_key(pack, key)

    def work(tx: neo4j.ManagedTransaction, row: dict[str, Any]) -> None:
        versions.write_chunks(tx, pack=pack, rows=[{**row, "version_key": key}])

    with driver.session(database=database) as session:
        for c in chunks:
            session.execute_write(work, chunk_row(c))


def _hold_active_index(tx: neo4j.ManagedTransaction, identity: str, property: str) -> None:
    """Write-lock the active index's (:IndexMeta) for the rest of the transaction and check it is
    still the one these vectors were made for. A re-index switch takes the same lock before its
    check that every current chunk has the new vector (``reindex._switch``), so a version
    embedded before a switch can never go live after it without the new index's vector."""
    rec = versions.hold_index_meta(tx)
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
            versions.set_embeddings(tx, rows=batch, identity=identity, property=property)
        for pack, doc_id, version in activate:
            versions.activate(
                tx, pack=pack, doc_id=doc_id, version=version, key=version_key(pack, f"{doc_id}--{version}")
            )

    with driver.session(database=database) as session:
        session.execute_write(work)


def _resolve(
    tx: neo4j.ManagedTransaction, pack: str, keys: list[str], resolution_version: str, batch_size: int = 2000
) -> None:
    for batch in batched(keys, batch_size):
        references.resolve_keys(tx, pack=pack, keys=batch, resolution_version=resolution_version)


def _rederive_documents(
    tx: neo4j.ManagedTransaction, pack: str, doc_ids: list[str], resolution_version: str
) -> dict[str, list[str]]:
    """Re-derive the REFERENCES edges into and out of these documents: their edges are dropped,
    then every key they cite or answer to (any version) is resolved once. The same edges as one
    resolution per document, since an edge touching one of them has its key among that
    document's keys. Returns each document's keys."""
    if not doc_ids:
        return {}
    keys = references.document_keys(tx, pack=pack, doc_ids=doc_ids)
    references.drop_document_references(tx, pack=pack, doc_ids=doc_ids)
    _resolve(tx, pack, sorted({k for ks in keys.values() for k in ks}), resolution_version)
    return keys


def withdraw_missing(
    driver: neo4j.Driver, database: str, *, pack: str, present: Sequence[str], resolution_version: str
) -> list[str]:
    """Documents no longer in the corpus stop being retrievable (their version becomes
    'withdrawn', their chunks inactive), release the keys they owned, and references into them
    are re-derived."""

    def work(tx: neo4j.ManagedTransaction) -> list[str]:
        versions.release_owned(tx, pack=pack, present=present)
        withdrawn = versions.withdraw(tx, pack=pack, present=present)
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
        references.clear_citations(tx, keys=keys)
        for batch in batched(rows, batch_size):
            references.write_citations(tx, pack=pack, rows=batch)

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
    version_keys = [version_key(pack, key) for key, _, _ in items]

    def work(tx: neo4j.ManagedTransaction) -> list[dict[str, int]]:
        keys = _rederive_documents(tx, pack, doc_ids, resolution_version)
        counts = references.citation_counts(tx, keys=version_keys)
        out = []
        for (_, doc_id, records), version in zip(items, version_keys, strict=True):
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
    inferred.drop_inferred(tx, pack=pack, doc_id=doc_id)
    for batch in batched(entities, batch_size):
        inferred.write_entities(tx, pack=pack, rows=batch)
    for batch in batched(rels, batch_size):
        inferred.write_relationships(tx, pack=pack, rows=batch)
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
    inferred.write_extraction_run(
        driver,
        database,
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
    )
