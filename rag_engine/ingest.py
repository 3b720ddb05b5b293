"""The offline pipeline's steps, one document version at a time, without Dagster.

Each step reads the previous step's artifact, does its work and returns a small summary that
the orchestrator shows as metadata. A document that fails validation is recorded as rejected
(with the reason) and every later step skips it, so one bad file never stops the others.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import neo4j

from rag_engine.config import GraphConfig
from rag_engine.documents import load_document, still_in_corpus
from rag_engine.engine import Engine
from rag_engine.errors import (
    CapabilityNotSupported,
    ConfigError,
    DocumentError,
    EmbedderMismatch,
    PackError,
    StoreUnavailable,
)
from rag_engine.graph import schema, writer
from rag_engine.packs import ChunkRecord, DomainPack, SourceDocument, content_hash
from rag_engine.partition_keys import check as check_partition_key
from rag_engine.step_stamps import STEP_DEPS

log = logging.getLogger(__name__)

SOURCE, CHUNKS, REFERENCES, EXTRACTION = "source", "chunks", "references", "llm_extraction"


@dataclass
class StepReport:
    """What one step did over the partitions of a run."""

    step: str
    done: dict[str, dict[str, Any]] = field(default_factory=dict)
    rejected: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    """Unexpected errors of one partition (Neo4j, provider, bug): the others still run."""
    unchanged: list[str] = field(default_factory=list)
    """Partitions skipped by change detection: same content and step code version as their last
    successful run (``ingest_pack(skip_unchanged=True)``)."""
    seconds: float = 0.0

    def total(self, key: str) -> int:
        return sum(int(v.get(key, 0)) for v in self.done.values())


_STOPS_THE_RUN = (ConfigError, CapabilityNotSupported, EmbedderMismatch, StoreUnavailable)
"""Errors that are the same for every partition: the run stops at once with the typed error."""

_UNREACHABLE = (neo4j.exceptions.ServiceUnavailable, neo4j.exceptions.SessionExpired)


def _store_gone(step: str, key: str, exc: Exception) -> StoreUnavailable:
    """The store stopped answering mid-run: every later partition would wait out the driver's
    retries and fail the same way (Neo4j stopped during an ingest of 133 documents: ~40 s and a
    traceback per partition), so the run stops here with one line."""
    return StoreUnavailable(
        f"Neo4j stopped answering during {step} ({key}: {type(exc).__name__}); the run stopped there. "
        "Finished partitions are kept: re-run the ingest when the store is back"
    )


def _attempt(report: StepReport, step: str, key: str, work: Callable[[], Any]) -> tuple[bool, Any]:
    """Run one partition's work, recording a rejection, skip or failure in ``report``: (ok, result)."""
    try:
        return True, work()
    except (DocumentError, PackError) as exc:  # one document's problem, never the run's
        report.rejected[key] = str(exc)
        log.warning("%s %s rejected: %s", step, key, exc)
    except _Skip as exc:
        report.skipped[key] = str(exc)
    except _STOPS_THE_RUN:
        raise  # the same for every partition: stop at once with the typed error
    except _UNREACHABLE as exc:
        raise _store_gone(step, key, exc) from None
    except Exception as exc:
        report.failed[key] = f"{type(exc).__name__}: {exc}"
        log.exception("%s %s failed", step, key)
    return False, None


def _outcome(report: StepReport, key: str) -> str:
    return next(name for name in ("done", "rejected", "skipped", "failed") if key in getattr(report, name))


def run_step(
    step: str,
    keys: list[str],
    fn: Callable[[str], dict[str, Any]],
    progress: Callable[[str], None] | None = None,
    on_done: Callable[[str, str], None] | None = None,
) -> StepReport:
    """``on_done(key, outcome)`` after each partition (outcome: done, rejected, skipped, failed)."""
    report = StepReport(step)
    started = time.perf_counter()
    for i, key in enumerate(keys, 1):
        ok, figures = _attempt(report, step, key, partial(fn, key))
        if ok:
            report.done[key] = figures
        if on_done:
            on_done(key, _outcome(report, key))
        if progress and (i == len(keys) or i % 10 == 0):
            progress(f"{step}: {i}/{len(keys)} partitions")
    report.seconds = round(time.perf_counter() - started, 3)
    return report


@dataclass(frozen=True)
class Grouped:
    """A step split in two so a run can write several partitions in one transaction:
    ``prepare(key)`` does one partition's own work (artifacts, pack rules, embeddings) and returns
    (rows it will write, what to write); ``write(prepared list)`` writes them in one transaction
    and returns each partition's figures. ``prepare`` then ``write`` of one partition is the step."""

    prepare: Callable[[str], tuple[int, Any]]
    write: Callable[[list[Any]], list[Any]]
    """Each partition's figures, or the exception that partition's write refused it with."""

    def write_one(self, prepared: Any) -> dict[str, Any]:
        """One prepared partition written alone: its figures, or its refusal raised."""
        (out,) = self.write([prepared])
        if isinstance(out, Exception):
            raise out
        return dict(out)

    def step(self, engine: Engine, pack: DomainPack, key: str) -> dict[str, Any]:
        """The whole step for one partition (a Dagster partition run, ``run_step``)."""
        return self.write_one(self.prepare(key)[1])


def _raise(exc: Exception) -> None:
    raise exc


def run_grouped_step(
    step: str,
    keys: list[str],
    grouped: Grouped,
    group_rows: int,
    progress: Callable[[str], None] | None = None,
    on_done: Callable[[str, str], None] | None = None,
) -> StepReport:
    """``run_step`` with the writes of consecutive partitions grouped into one transaction of
    about ``group_rows`` rows (one round trip per query for the group, one commit): fewer round
    trips, the same writes. A partition whose preparation fails is recorded as ``run_step`` does;
    a group whose write fails is written again one partition at a time, so one partition's
    error is still that partition's only."""
    report = StepReport(step)
    started = time.perf_counter()
    finished = 0
    group: list[tuple[str, Any]] = []

    def tell(key: str) -> None:
        nonlocal finished
        finished += 1
        if on_done:
            on_done(key, _outcome(report, key))
        if progress and (finished == len(keys) or finished % 10 == 0):
            progress(f"{step}: {finished}/{len(keys)} partitions")

    def flush() -> None:
        if len(group) > 1:
            try:
                outcomes = grouped.write([p for _, p in group])
                for (key, _), out in zip(group, outcomes, strict=True):
                    if isinstance(out, Exception):  # this partition's own refusal (e.g. KeyConflict)
                        _attempt(report, step, key, partial(_raise, out))
                    else:
                        report.done[key] = out
            except _STOPS_THE_RUN:
                raise
            except _UNREACHABLE as exc:
                raise _store_gone(step, group[0][0], exc) from None
            except Exception as exc:  # noqa: BLE001 - retried one partition at a time below
                log.info("%s: a write of %d partitions failed (%s); one partition at a time", step, len(group), exc)
        for key, prepared in group:
            if not any(key in outcome for outcome in (report.done, report.rejected, report.skipped, report.failed)):
                ok, figures = _attempt(report, step, key, partial(grouped.write_one, prepared))
                if ok:
                    report.done[key] = figures
            tell(key)
        group.clear()

    rows = 0
    for key in keys:
        ok, prepared = _attempt(report, step, key, partial(grouped.prepare, key))
        if not ok:
            tell(key)
            continue
        group.append((key, prepared[1]))
        rows += prepared[0]
        if rows >= group_rows:
            flush()
            rows = 0
    flush()
    report.seconds = round(time.perf_counter() - started, 3)
    return report


class _Skip(Exception):
    """An upstream step rejected this partition; nothing to do here."""


GROUP_BATCHES = 4
"""A grouped step's transaction holds about this many write batches (``storage.neo4j.write_batch_size``
rows each) of consecutive partitions."""

_CHAIN = (SOURCE, CHUNKS, REFERENCES)
"""Steps whose artifact may record a rejection, in pipeline order."""


def _upstream(engine: Engine, pack: DomainPack, key: str, step: str) -> Any:
    """The artifact of an earlier step, or _Skip if the document was rejected anywhere upstream.

    Every step of the chain up to ``step`` is checked, not only the source: a document the pack
    refused at chunking has no chunks, so references, index, extraction and graph skip it."""
    doc_id, version = check_partition_key(key)
    chain = _CHAIN[: _CHAIN.index(step) + 1] if step in _CHAIN else (SOURCE, step)
    for name in chain:
        if name != step and name != SOURCE and not engine.artifacts.exists(pack.name, key, name):
            continue
        data = engine.artifacts.read(pack.name, key, name)
        if isinstance(data, dict) and data.get("rejected"):
            raise _Skip(f"rejected at {name}: {data['rejected']}")
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
    from rag_engine.partition_keys import PARTITION_SEP

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
    from rag_engine.providers.embedding_cache import embed_batched

    spec = engine.registry.embedding
    prop: list[str] = [vector_property] if vector_property else []

    def prepare(key: str) -> tuple[int, Any]:
        chunks = load_chunks(engine, pack, key)
        if not prop:
            prop.append(ensure_vector_index(engine))
        dimension = spec.model.dimension or 0  # ensure_vector_index refused a model without one
        result = embed_batched(
            [f"{c.heading}\n{c.text}" for c in chunks],
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
        rows = [{"chunk_id": c.chunk_id, "embedding": v} for c, v in zip(chunks, result.vectors, strict=False)]
        figures = {
            "embedded": len(rows),
            "dimension": spec.model.dimension,
            "embed_cache_hits": result.cache_hits,
            "embed_requests": result.requests,
            "embed_seconds": round(result.seconds, 3),
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
    from rag_engine.graph.extraction import confidence_bucket

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
    from rag_engine.documents import split_partition_key

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
    from rag_engine.step_stamps import any_missing

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


class IngestObserver:
    """Structured progress of ``ingest_pack`` (the CLI draws bars from it). Every hook is a no-op here."""

    def step_started(self, pack: str, step: str, total: int, unchanged: int) -> None:
        """``total`` partitions, of which ``unchanged`` are skipped by change detection."""

    def partition_done(self, pack: str, step: str, key: str, outcome: str) -> None:
        """One partition finished a step: done, rejected, skipped (rejected upstream) or failed."""

    def embedding(self, pack: str, key: str, progress: Any) -> None:
        """An ``EmbedProgress`` after each embedding batch of one partition."""

    def step_finished(self, pack: str, step: str, report: StepReport) -> None:
        """The step's report, its seconds included."""


_STEP_ARTIFACT = {"source_documents": SOURCE, "chunks": CHUNKS, "references": REFERENCES, "llm_extraction": EXTRACTION}
"""The artifact a later step reads; a skipped step must still have left it."""


def stamp_holds(engine: Engine, pack: DomainPack, key: str, step: str, stamps: dict[str, str], version: str) -> bool:
    """A partition's step is done already: its stamp carries the step's code version and the
    artifact later steps read is on disk (a pack without extraction leaves none: the stamp alone)."""
    artifact = _STEP_ARTIFACT.get(step) if step != "llm_extraction" or pack.entry.extraction else None
    return stamps.get(step) == version and (artifact is None or engine.artifacts.exists(pack.name, key, artifact))


def complete(figures: dict[str, Any]) -> bool:
    """Whether a partition's step report vouches for a stamp (an extraction with failed or
    budget-skipped chunks is not done)."""
    return not (figures.get("failed") or figures.get("skipped"))


def step_stamps(engine: Engine, pack: DomainPack) -> dict[str, str]:
    """The code version each step's stamp must carry: the assets' code versions. graph_writes of
    one version re-derives the reference edges into and out of its document (writer.resolve_references),
    so an added or changed document re-runs its own graph step only, as a Dagster partition does."""
    from rag_engine.code_versions import code_versions

    return dict(code_versions(engine, pack))


def ingest_pack(
    engine: Engine,
    pack: DomainPack,
    keys: list[str] | None = None,
    progress: Callable[[str], None] | None = None,
    run_id: str | None = None,
    extract: bool = True,
    skip_unchanged: bool = False,
    observer: IngestObserver | None = None,
) -> dict[str, StepReport]:
    """Run every step over the given document versions (default: all discovered), in order.

    The same steps the Dagster assets run, for the CLI, benchmarks and tests of the engine alone.
    The schema and the vector index are ensured once for the run, and each step's output is passed
    to the next in memory (``ArtifactStore.remembering``; the artifacts are still written).
    With ``skip_unchanged`` (what `rag ingest` does unless --force), a partition whose current
    version holds a stamp of the step's code version, whose upstream steps were skipped too and
    whose artifact is on disk is not run again (``StepReport.unchanged``); stamps of the steps that
    succeeded are written at the end. A run where nothing changed writes nothing.
    """
    from rag_engine.documents import discover
    from rag_engine.llm_extraction import extraction_step, finish_run, new_budget
    from rag_engine.step_stamps import read_stamps, stamped, write_stamps

    # files that are not documents (a link out of the corpus, a doc id another file already is)
    # get a partition too: source_documents records why they are rejected
    found = discover(pack, include_rejected=True)
    keys = keys if keys is not None else [r.partition_key for r in found]
    run_id = run_id or f"local-{uuid.uuid4().hex[:12]}"
    schema.ensure_schema(engine.driver, engine.database)  # once for the run (and the process)
    withdraw_missing_documents(engine, pack, [r.doc_id for r in found if r.problem is None])
    budget = new_budget(engine)
    obs = observer or IngestObserver()

    def on_batch(k: str) -> Callable[[Any], None] | None:
        return (lambda ep: obs.embedding(pack.name, k, ep)) if observer else None

    # a Grouped step writes several partitions per transaction (``run_grouped_step``)
    group_rows = GROUP_BATCHES * engine.cfg.storage.neo4j.write_batch_size
    steps: list[tuple[str, Callable[..., dict[str, Any]] | Grouped]] = [
        ("source_documents", source_step),
        ("chunks", chunks_grouped(engine, pack)),
        ("references", references_grouped(engine, pack)),
        ("chunk_index", index_grouped(engine, pack, run_id=run_id, progress=on_batch)),
    ]
    if extract:
        steps.append(("llm_extraction", lambda e, p, k: extraction_step(e, p, k, run_id=run_id, budget=budget)))
    steps.append(("graph_writes", graph_grouped(engine, pack)))
    with engine.artifacts.remembering():  # each step's output reaches the next in memory
        wanted = step_stamps(engine, pack)
        old = read_stamps(engine.driver, engine.database, pack.name) if skip_unchanged else {}
        ran: dict[str, set[str]] = {k: set() for k in keys}
        failed_at: dict[str, str] = {}  # partition -> why: failed or rejected at a step, later steps skip it
        new: dict[str, dict[str, str]] = {}
        reports = {}
        for name, fn in steps:

            def unchanged(k: str, name: str = name) -> bool:
                return not (ran[k] & set(STEP_DEPS[name])) and stamp_holds(
                    engine, pack, k, name, old.get(k, {}), wanted[name]
                )

            todo = [k for k in keys if not (skip_unchanged and unchanged(k))]
            blocked = {k: failed_at[k] for k in todo if k in failed_at}  # a later step has nothing to build on
            todo = [k for k in todo if k not in blocked]
            if name == "chunks":
                todo = claim_order(todo)
            obs.step_started(pack.name, name, len(keys), len(keys) - len(todo) - len(blocked))

            def on_done(k: str, outcome: str, name: str = name) -> None:
                obs.partition_done(pack.name, name, k, outcome)

            if isinstance(fn, Grouped):
                report = run_grouped_step(name, todo, fn, group_rows, progress, on_done=on_done)
            else:
                report = run_step(name, todo, partial(fn, engine, pack), progress, on_done=on_done)
            reports[name] = report
            for k, why in blocked.items():
                report.skipped[k] = why
                obs.partition_done(pack.name, name, k, "skipped")
            failed_at.update(dict.fromkeys(report.failed, f"failed at {name}; re-run after fixing that"))
            failed_at.update({k: f"rejected at {name}: {why}" for k, why in report.rejected.items()})
            report.unchanged = [k for k in keys if k not in set(todo) and k not in blocked]
            for k in todo:
                ran[k].add(name)
                done = report.done.get(k)
                if done is not None and complete(done):
                    new[k] = stamped(new.get(k, old.get(k, {})), name, wanted[name])
            if name == "llm_extraction" and todo:  # a run that extracted nothing records no run
                finish_run(engine, pack, run_id, budget)
            obs.step_finished(pack.name, name, report)
    write_stamps(engine.driver, engine.database, pack.name, {k: s for k, s in new.items() if s != old.get(k)})
    # files removed while the run was in progress (another run may have withdrawn them already,
    # before this one wrote them): the corpus as it is now decides what stays current
    now = discover(pack, include_rejected=True)
    withdraw_missing_documents(engine, pack, [r.doc_id for r in now if r.problem is None])
    return reports
