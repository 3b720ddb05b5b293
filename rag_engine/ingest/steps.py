"""The offline pipeline's steps, one document version at a time, without Dagster.

Each step reads the previous step's artifact, does its work and returns a small summary that
the orchestrator shows as metadata. A document that fails validation is recorded as rejected
(with the reason) and every later step skips it, so one bad file never stops the others.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from rag_engine.config import GraphConfig
from rag_engine.engine import Engine
from rag_engine.errors import (
    ConfigError,
    DocumentError,
    PackError,
)
from rag_engine.graph import writer
from rag_engine.graph.extraction import confidence_bucket
from rag_engine.ingest.documents import load_document, split_partition_key, still_in_corpus
from rag_engine.ingest.runner import Grouped, SkipPartition
from rag_engine.ingest.stamps import any_missing
from rag_engine.ingest.unit_vectors import embed_units
from rag_engine.packs import ChunkRecord, DomainPack, SourceDocument, content_hash
from rag_engine.providers.embedding_cache import embed_batched
from rag_engine.store import schema
from rag_engine.store.partition_keys import PARTITION_SEP
from rag_engine.store.partition_keys import check as check_partition_key
from rag_engine.text.sentences import embedded_passage

log = logging.getLogger(__name__)

SOURCE, CHUNKS, REFERENCES, EXTRACTION = "source", "chunks", "references", "llm_extraction"


_CHAIN = (SOURCE, CHUNKS, REFERENCES)
"""Steps whose artifact may record a rejection, in pipeline order."""


def _upstream(engine: Engine, pack: DomainPack, key: str, step: str) -> Any:
    """The artifact of an earlier step, or SkipPartition if the document was rejected anywhere upstream.

    Every step of the chain up to ``step`` is checked, not only the source: a document the pack
    refused at chunking has no chunks, so references, index, extraction and graph skip it."""
    doc_id, version = check_partition_key(key)
    chain = _CHAIN[: _CHAIN.index(step) + 1] if step in _CHAIN else (SOURCE, step)
    for name in chain:
        if name != step and name != SOURCE and not engine.artifacts.exists(pack.name, key, name):
            continue
        data = engine.artifacts.read(pack.name, key, name)
        if isinstance(data, dict) and data.get("rejected"):
            raise SkipPartition(f"rejected at {name}: {data['rejected']}")
        _check_identity(pack.name, key, name, data, doc_id, version)
    return data


def _check_identity(pack: str, key: str, step: str, data: Any, doc_id: str, version: str) -> None:
    """An artifact must be of the document version its key names: a file put in the folder by
    hand (or copied from another partition) is refused, never served under this key."""
    fields: tuple[str, ...]
    if step == SOURCE:
        items = [data] if isinstance(data, dict) else []
        fields = ("pack", "doc_id", "version")
    elif step == CHUNKS:
        items = data if isinstance(data, list) else []
        fields = ("doc_id", "doc_version")
    else:
        return
    want = {"pack": pack, "doc_id": doc_id, "version": version, "doc_version": version}
    if not items and step == SOURCE:
        raise DocumentError(f"{key}: the {step} artifact is not a document")
    for item in items:
        got = {f: item.get(f) if isinstance(item, dict) else None for f in fields}
        if any(got[f] != want[f] for f in fields):
            raise DocumentError(f"{key}: the {step} artifact is of another document ({got}); re-run {step}")


# -- steps -----------------------------------------------------------------------------


def source_step(engine: Engine, pack: DomainPack, key: str) -> dict[str, Any]:
    check_partition_key(key)  # before anything is written under it
    try:
        doc = load_document(pack, key, max_bytes=engine.cfg.max_document_bytes)
    except (DocumentError, PackError) as exc:
        engine.artifacts.write(pack.name, key, SOURCE, {"rejected": str(exc)})
        raise
    engine.artifacts.write(pack.name, key, SOURCE, doc.model_dump(mode="json"))
    return {"chars": len(doc.text), "collection": doc.collection}


def chunks_step(engine: Engine, pack: DomainPack, key: str) -> dict[str, Any]:
    g = chunks_grouped(engine, pack)
    return g.step(engine, pack, key)


def chunks_grouped(engine: Engine, pack: DomainPack) -> Grouped:
    """``chunks_step`` in two: chunking and checks per partition, then the versions of several
    documents written in one transaction (``writer.write_document_versions``, key ownership decided
    in the run's claim order); a version refused for a key another document owns gets its
    ``KeyConflict`` (and its rejection artifact), the others are written."""

    def prepare(key: str) -> tuple[int, Any]:
        doc = SourceDocument.model_validate(_upstream(engine, pack, key, SOURCE))
        try:
            chunks = pack.chunk(doc)
            owned = pack.owned_keys(doc)
        except Exception as exc:  # noqa: BLE001 - any pack failure rejects this one document, recorded below
            # recorded like a source rejection, so every later step skips this partition
            reason = str(exc) if isinstance(exc, (PackError, DocumentError)) else f"{type(exc).__name__}: {exc}"
            engine.artifacts.write(pack.name, key, CHUNKS, {"rejected": f"the pack refused this document: {reason}"})
            raise DocumentError(f"{key}: the pack refused this document: {reason}") from None
        ids = [c.chunk_id for c in chunks]
        unanswered = sorted(set(owned) - {k for c in chunks for k in c.keys})
        limit = engine.cfg.storage.neo4j.max_chunks_per_document
        problem = (
            "the pack produced no chunks from this document"
            if not chunks
            else f"{len(chunks):,} chunks, more than storage.neo4j.max_chunks_per_document ({limit:,}): one "
            "version is written in one transaction; split the document"
            if len(chunks) > limit
            else "the pack produced duplicate chunk ids"
            if len(set(ids)) != len(ids)
            else f"the pack says the document owns keys no chunk answers to: {unanswered}"
            if unanswered
            else None
        )
        if problem:
            engine.artifacts.write(pack.name, key, CHUNKS, {"rejected": problem})
            raise DocumentError(f"{key}: {problem}")
        gone = still_in_corpus(pack, doc)
        if gone:  # recorded like any rejection, so a later step run alone (Dagster) skips it too
            engine.artifacts.write(pack.name, key, CHUNKS, {"rejected": gone})
            raise DocumentError(gone)
        engine.artifacts.write(pack.name, key, CHUNKS, [c.model_dump(mode="json") for c in chunks])
        version = writer.VersionWrite(
            doc_id=doc.doc_id,
            version=doc.version,
            title=doc.title,
            collection=doc.collection,
            content_hash=content_hash(doc.text),
            source_path=doc.source_path,
            chunks=chunks,
            owned_keys=owned,
        )
        return len(chunks), (key, version, {"chunks": len(chunks), "owned_keys": len(owned)})

    def write(prepared: list[Any]) -> list[dict[str, Any] | Exception]:
        schema.ensure_schema(engine.driver, engine.database)
        outcomes = writer.write_document_versions(
            engine.driver,
            engine.database,
            pack=pack.name,
            docs=[version for _, version, _ in prepared],
            batch_size=engine.cfg.storage.neo4j.write_batch_size,
            min_words=max(pack.manifest.min_chunk_words, engine.cfg.retrieval.min_chunk_words),
        )
        out: list[dict[str, Any] | Exception] = []
        for (key, _, figures), conflict in zip(prepared, outcomes, strict=True):
            if conflict is not None:  # a key another document owns: this later claimant is rejected, nothing written
                engine.artifacts.write(pack.name, key, CHUNKS, {"rejected": str(conflict)})
            out.append(figures if conflict is None else conflict)
        return out

    return Grouped(prepare, write)


def claim_order(keys: list[str]) -> list[str]:
    """The order the chunks step runs a run's partitions in: by doc id, so among new documents
    claiming the same owned key the first in doc id order keeps it, whatever order the run got."""
    return sorted(keys, key=lambda k: (k.rpartition(PARTITION_SEP)[0], k))


def load_chunks(engine: Engine, pack: DomainPack, key: str) -> list[ChunkRecord]:
    return [ChunkRecord.model_validate(c) for c in _upstream(engine, pack, key, CHUNKS)]


def references_step(engine: Engine, pack: DomainPack, key: str) -> dict[str, Any]:
    g = references_grouped(engine, pack)
    return g.step(engine, pack, key)


def references_grouped(engine: Engine, pack: DomainPack) -> Grouped:
    def prepare(key: str) -> tuple[int, Any]:
        chunks = load_chunks(engine, pack, key)
        refs = [r for c in chunks for r in pack.extract_references(c)]
        engine.artifacts.write(pack.name, key, REFERENCES, [r.model_dump(mode="json") for r in refs])
        by_type: dict[str, int] = {}
        for r in refs:
            by_type[r.ref_type] = by_type.get(r.ref_type, 0) + 1
        figures = {"references": len(refs), **{f"type_{k}": v for k, v in sorted(by_type.items())}}
        return len(refs), (key, refs, figures)

    def write(prepared: list[Any]) -> list[dict[str, Any]]:
        writer.write_citations_many(
            engine.driver,
            engine.database,
            pack=pack.name,
            items=[(key, refs) for key, refs, _ in prepared],
            batch_size=engine.cfg.storage.neo4j.write_batch_size,
        )
        return [figures for _, _, figures in prepared]

    return Grouped(prepare, write)


def ensure_vector_index(engine: Engine) -> str:
    """The active embedder's vector index (created if missing, refused if another embedder's is
    active); returns the chunk property index_step writes vectors to."""
    spec = engine.registry.embedding
    dimension = spec.model.dimension
    if dimension is None:  # config validation requires one on every embedding model
        raise ConfigError(f"embedding model {spec.name!r} has no dimension")
    return schema.ensure_vector_index(engine.driver, engine.database, spec.identity, dimension)


def index_step(
    engine: Engine,
    pack: DomainPack,
    key: str,
    run_id: str | None = None,
    progress: Callable[[Any], None] | None = None,
    vector_property: str | None = None,
) -> dict[str, Any]:
    """Embed the version's chunks (batched; unchanged texts come from the embedding cache with no
    model call), write the vectors and activate the version in one transaction. ``progress`` gets
    an ``EmbedProgress`` after each batch (default: a log line). ``vector_property``: the result
    of ``ensure_vector_index`` when the caller (a run of many partitions) already ensured it."""
    g = index_grouped(engine, pack, run_id, lambda k: progress, vector_property)
    return g.step(engine, pack, key)


def index_grouped(
    engine: Engine,
    pack: DomainPack,
    run_id: str | None = None,
    progress: Callable[[str], Callable[[Any], None] | None] = lambda key: None,
    vector_property: str | None = None,
) -> Grouped:
    """``index_step`` in two: embedding per partition, then the vectors of several versions
    written and each version activated (in order) in one transaction. ``progress(key)``: the
    partition's ``EmbedProgress`` callback, if any."""
    spec = engine.registry.embedding
    prop: list[str] = [vector_property] if vector_property else []

    def prepare(key: str) -> tuple[int, Any]:
        chunks = load_chunks(engine, pack, key)
        if not prop:
            prop.append(ensure_vector_index(engine))
        dimension = spec.model.dimension or 0  # ensure_vector_index refused a model without one
        result = embed_batched(
            [embedded_passage(c.heading, c.text) for c in chunks],
            lambda batch: engine.embed_texts(batch, purpose="index", run_id=run_id),
            identity=spec.identity,
            dimension=dimension,
            batch_size=spec.model.batch_size,
            cache=engine.embedding_cache,
            progress=progress(key)
            or (
                lambda p: log.info(
                    "chunk_index %s: %d/%d chunks embedded (%d from cache, %d requests, %.1fs)",
                    key,
                    p.done,
                    p.total,
                    p.cache_hits,
                    p.requests,
                    p.seconds,
                )
            ),
        )
        doc = SourceDocument.model_validate(_upstream(engine, pack, key, SOURCE))
        gone = still_in_corpus(pack, doc)  # embedding takes a while: the file may have gone meanwhile
        if gone:
            raise DocumentError(gone)
        units = (
            embed_units(
                [(c.heading, c.text) for c in chunks],
                lambda batch: engine.embed_texts(batch, purpose="index", run_id=run_id),
                vector_property=prop[0],
                identity=spec.identity,
                dimension=dimension,
                batch_size=spec.model.batch_size,
                cache=engine.embedding_cache,
                label=key,
            )
            if engine.cfg.retrieval.evidence.index_units
            else None
        )
        rows = [
            {"chunk_id": c.chunk_id, "embedding": v, "units": units.props[i] if units else None}
            for i, (c, v) in enumerate(zip(chunks, result.vectors, strict=False))
        ]
        figures = {
            "embedded": len(rows),
            "dimension": spec.model.dimension,
            "embed_cache_hits": result.cache_hits,
            "embed_requests": result.requests,
            "embed_seconds": round(result.seconds, 3),
            **(units.figures() if units else {}),
        }
        return len(rows), (rows, (pack.name, chunks[0].doc_id, chunks[0].doc_version), figures)

    def write(prepared: list[Any]) -> list[dict[str, Any]]:
        writer.write_embeddings(
            engine.driver,
            engine.database,
            identity=spec.identity,
            rows=[row for rows, _, _ in prepared for row in rows],
            batch_size=engine.cfg.storage.neo4j.write_batch_size,
            property=prop[0],
            # indexed: each version goes live with its vectors (lexical and dense alike), the previous one retires
            activate=[version for _, version, _ in prepared],
        )
        return [figures for _, _, figures in prepared]

    return Grouped(prepare, write)


def apply_graph_policy(
    records: list[dict[str, Any]], graph: GraphConfig, max_confidence: float = 1.0
) -> list[dict[str, Any]]:
    """Eligibility and confidence buckets are graph policy, decided when the graph is written:
    a changed confidence floor rebuilds the graph (graph_writes) without re-extraction. The model's
    confidence is a claim, capped by the pack's ceiling; the claim is kept as claimed_confidence."""
    out = []
    for rec in records:
        rels = []
        for rel in rec["relationships"]:
            claimed = rel["provenance"].get("claimed_confidence", rel["confidence"])
            confidence = min(claimed, max_confidence)
            bucket = confidence_bucket(confidence, graph.confidence_buckets)
            rels.append(
                {
                    **rel,
                    "confidence": confidence,
                    "retrieval_eligible": confidence >= graph.confidence_floor,
                    "provenance": {**rel["provenance"], "confidence_bucket": bucket, "claimed_confidence": claimed},
                }
            )
        out.append({**rec, "relationships": rels})
    return out


def graph_step(engine: Engine, pack: DomainPack, key: str) -> dict[str, Any]:
    """Target resolution (CITES -> REFERENCES) and the validated LLM records of this version."""
    g = graph_grouped(engine, pack)
    return g.step(engine, pack, key)


def graph_grouped(engine: Engine, pack: DomainPack) -> Grouped:
    """``graph_step`` in two: the version's inferred records are read per partition, then the
    references of several versions are resolved and their records written in one transaction
    (``writer.write_graph_many``)."""

    def prepare(key: str) -> tuple[int, Any]:
        refs = _upstream(engine, pack, key, REFERENCES)
        records: list[dict[str, Any]] | None = None
        complete: int | None = None
        if not pack.entry.extraction:  # extraction turned off: no inferred records of this document remain
            records = []
        elif engine.artifacts.exists(pack.name, key, EXTRACTION):
            extraction = engine.artifacts.read(pack.name, key, EXTRACTION)
            records = apply_graph_policy(extraction["records"], engine.cfg.graph, pack.entry.max_confidence)
            complete = int(extraction["complete"])
        return 1 + len(refs) + len(records or []), (key, records, complete)

    def write(prepared: list[Any]) -> list[dict[str, Any]]:
        figures = writer.write_graph_many(
            engine.driver,
            engine.database,
            pack=pack.name,
            items=[(key, split_partition_key(key)[0], records) for key, records, _ in prepared],
            resolution_version=engine.cfg.graph.target_resolution_version,
            batch_size=engine.cfg.storage.neo4j.write_batch_size,
        )
        out = []
        for (_, _, complete), f in zip(prepared, figures, strict=True):
            out.append({**f, "extraction_complete": complete} if complete is not None else dict(f))
        return out

    return Grouped(prepare, write)


def withdraw_missing_documents(engine: Engine, pack: DomainPack, present: list[str]) -> list[str]:
    """A file removed from the corpus must stop being answered and cited."""
    schema.ensure_schema(engine.driver, engine.database)
    if not any_missing(engine.driver, engine.database, pack.name, present):
        return []  # read first: a run with nothing removed opens no write transaction
    withdrawn = writer.withdraw_missing(
        engine.driver,
        engine.database,
        pack=pack.name,
        present=present,
        resolution_version=engine.cfg.graph.target_resolution_version,
    )
    for doc_id in withdrawn:
        log.warning("document %s of pack %s is no longer in the corpus: withdrawn", doc_id, pack.name)
    return withdrawn
