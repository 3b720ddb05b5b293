"""Per-pack ingestion assets: source_documents -> chunks -> references / chunk_index -> graph_writes.

Every asset is partitioned by document version and runs many partitions in one run
(BackfillPolicy.single_run). The work is in rag_engine.ingest; here we only loop over the
run's partitions, report progress and turn the step report into metadata.
"""


import warnings
from collections.abc import Callable

import dagster as dg

from rag_assets.code_versions import code_versions
from rag_assets.partitions import document_versions
from rag_assets.resources import EngineResource
from rag_engine import ingest
from rag_engine.engine import Engine
from rag_engine.llm_extraction import extraction_step, finish_run, new_budget
from rag_engine.packs import DomainPack

StepFn = Callable[[Engine, DomainPack, str], dict]


def _report_metadata(report: ingest.StepReport, totals: tuple[str, ...]) -> dict:
    meta: dict = {
        "partitions_done": len(report.done),
        "partitions_rejected": len(report.rejected),
        "partitions_skipped": len(report.skipped),
        "partitions_failed": len(report.failed),
        "seconds": report.seconds,
    }
    for key in totals:
        meta[key] = report.total(key)
    if report.rejected:
        meta["rejected"] = dg.MetadataValue.json(report.rejected)
    if report.skipped:
        meta["skipped"] = dg.MetadataValue.json(report.skipped)
    if report.failed:
        meta["failed"] = dg.MetadataValue.json(report.failed)
    if len(report.done) == 1:
        meta.update({k: v for k, v in next(iter(report.done.values())).items() if isinstance(v, (int, float, str))})
    return meta


def _run(context: dg.AssetExecutionContext, engine_res: EngineResource, pack_name: str, step: str,
         fn: StepFn, totals: tuple[str, ...], check: "str | None" = None) -> dg.MaterializeResult:
    engine = engine_res.engine()
    pack = engine.pack(pack_name)
    keys = list(context.partition_keys)
    report = ingest.run_step(step, keys, lambda key: fn(engine, pack, key), progress=context.log.info)
    for key, reason in {**report.rejected, **report.failed}.items():
        context.log.error(f"{key}: {reason}")
    if report.failed:  # the others' work is written; the run says which partitions to re-run
        raise dg.Failure(description=f"{step}: {len(report.failed)} partition(s) failed: {sorted(report.failed)}",
                         metadata=_report_metadata(report, totals))
    if not report.done and (report.rejected or report.skipped):
        raise dg.Failure(
            description=f"{step}: no partition of this run could be processed",
            metadata=_report_metadata(report, totals),
        )
    checks = []
    if check:
        checks.append(dg.AssetCheckResult(
            check_name=check, passed=not report.rejected, severity=dg.AssetCheckSeverity.WARN,
            metadata={"rejected": dg.MetadataValue.json(report.rejected)},
            description=f"Documents rejected at {step}; they are skipped downstream.",
        ))
    return dg.MaterializeResult(metadata=_report_metadata(report, totals), check_results=checks)


def build_ingestion_assets(engine: Engine, pack: DomainPack) -> list[dg.AssetsDefinition]:
    # BackfillPolicy.single_run is marked beta; we rely on it on purpose (many partitions, one run)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.BetaWarning)
        return _build(engine, pack)


def _build(engine: Engine, pack: DomainPack) -> list[dg.AssetsDefinition]:
    name, group = pack.name, pack.entry.domain
    parts = document_versions(name)
    versions = code_versions(engine, pack)
    common = dict(partitions_def=parts, group_name=group, backfill_policy=dg.BackfillPolicy.single_run(),
                  kinds={"python"})

    def key(asset: str) -> dg.AssetKey:
        return dg.AssetKey([name, asset])

    @dg.asset(key=key("source_documents"), code_version=versions["source_documents"],
              description=f"Validated source documents of the {name} pack, one partition per document version.",
              check_specs=[dg.AssetCheckSpec("documents_valid", asset=key("source_documents"))],
              **common)
    def source_documents(context: dg.AssetExecutionContext, rag: EngineResource) -> dg.MaterializeResult:
        return _run(context, rag, name, "source_documents", ingest.source_step, ("chars",), check="documents_valid")

    @dg.asset(key=key("chunks"), deps=[source_documents], code_version=versions["chunks"],
              description="Chunks by the pack's rules; writes Document, DocumentVersion and (pending) Chunk nodes.",
              check_specs=[dg.AssetCheckSpec("chunks_valid", asset=key("chunks"))],
              **{**common, "kinds": {"python", "neo4j"}})
    def chunks(context: dg.AssetExecutionContext, rag: EngineResource) -> dg.MaterializeResult:
        # a document the pack refuses (e.g. a second title) is rejected here and skipped downstream
        return _run(context, rag, name, "chunks", ingest.chunks_step, ("chunks",), check="chunks_valid")

    @dg.asset(key=key("references"), deps=[chunks], code_version=versions["references"],
              description="Deterministic references extracted and normalized by the pack (CITES edges).",
              **{**common, "kinds": {"python", "neo4j"}})
    def references(context: dg.AssetExecutionContext, rag: EngineResource) -> dg.MaterializeResult:
        return _run(context, rag, name, "references", ingest.references_step, ("references",))

    @dg.asset(key=key("chunk_index"), deps=[chunks], code_version=versions["chunk_index"],
              description="Chunk embeddings by the active embedder and the vector index; an indexed "
                          "version becomes the current one (the previous version is superseded).",
              **{**common, "kinds": {"python", "neo4j"}})
    def chunk_index(context: dg.AssetExecutionContext, rag: EngineResource) -> dg.MaterializeResult:
        return _run(context, rag, name, "chunk_index",
                    lambda e, p, k: ingest.index_step(e, p, k, run_id=context.run.run_id), ("embedded",))

    @dg.asset(key=key("llm_extraction"), deps=[chunks], code_version=versions["llm_extraction"], pool="llm",
              description="LLM graph extraction per chunk, validated with provenance; budgets per run, "
                          "cached by (chunk content, prompt, model).",
              **{**common, "kinds": {"python", "openai"}})
    def llm_extraction(context: dg.AssetExecutionContext, rag: EngineResource) -> dg.MaterializeResult:
        engine = rag.engine()
        budget = new_budget(engine)
        result = _run(context, rag, name, "llm_extraction",
                      lambda e, p, k: extraction_step(e, p, k, run_id=context.run.run_id, budget=budget),
                      ("extracted", "entities", "relationships", "skipped", "failed", "rejected"))
        summary = finish_run(engine, engine.pack(name), context.run.run_id, budget)
        if budget.skipped:
            context.log.warning(f"budget exhausted: {budget.skipped} chunks skipped; a later run continues")
        meta = {**result.metadata, "status": summary["status"], "llm_calls": summary["chunks"],
                "cache_hits": summary["cache_hits"], "tokens": summary["tokens"],
                "cost_usd": summary["cost"] or "unknown", "model": summary["model"],
                "prompt_hash": summary["prompt_hash"], "rejected_by_reason": dg.MetadataValue.json(summary["rejected"])}
        return dg.MaterializeResult(metadata=meta)

    # graph_writes waits for chunk_index: a version is live (its chunks active) once indexed
    @dg.asset(key=key("graph_writes"), deps=[references, llm_extraction, chunk_index],
              code_version=versions["graph_writes"],
              description="Graph edges: deterministic references resolved to target chunks, and the validated "
                          "LLM records of each version (a superseded version's inferred records are removed).",
              **{**common, "kinds": {"neo4j"}})
    def graph_writes(context: dg.AssetExecutionContext, rag: EngineResource) -> dg.MaterializeResult:
        return _run(context, rag, name, "graph_writes", ingest.graph_step,
                    ("resolved", "unresolved", "entities", "relationships", "eligible"))

    return [source_documents, chunks, references, chunk_index, llm_extraction, graph_writes]
