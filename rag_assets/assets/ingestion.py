"""Per-pack ingestion assets: source_documents -> chunks -> references / chunk_index -> graph_writes.

Every asset is partitioned by document version and runs many partitions in one run
(BackfillPolicy.single_run). The work is in rag_engine.ingest (steps, runner); here we only loop over the
run's partitions, report progress and turn the step report into metadata.
"""

import time
import warnings
from collections.abc import Callable
from typing import Any

import dagster as dg

from rag_assets import approval_status, automation
from rag_assets.code_versions import code_versions
from rag_assets.failures import engine_errors, failure_context
from rag_assets.partitions import document_versions, partial_reason
from rag_assets.resources import EngineResource
from rag_assets.run_costs import run_costs_tagged
from rag_engine.engine import Engine
from rag_engine.errors import EmbedderMismatch, RagError
from rag_engine.ingest import pipeline, runner, steps
from rag_engine.ingest.embed_progress import EmbedTracker
from rag_engine.ingest.extraction_step import extraction_step, finish_run, new_budget
from rag_engine.ingest.stamps import read_stamps, record_step
from rag_engine.packs import DomainPack
from rag_engine.store.connection import check_reachable
from rag_engine.usage import rounded_cost

StepFn = Callable[[Engine, DomainPack, str], dict[str, Any]]


ROW_COUNT: dict[str, str | None] = {
    "source_documents": None,  # one document per partition: 1 loaded, 0 rejected
    "chunks": "chunks",
    "references": "references",
    "chunk_index": "embedded",
    "llm_extraction": "extracted",
    "graph_writes": None,
}
"""Which figure of a step's partition report is its row count (graph_writes: edges, summed;
source_documents: the partition's one document)."""


def _scalar(value: object) -> int | float | str | None:
    return value if isinstance(value, (int, float, str)) and not isinstance(value, bool) else None


def partition_metadata(step: str, outcome: str, figures: dict[str, Any], seconds: float) -> dict[str, Any]:
    """One partition's own figures (never the run's totals): what the UI shows per partition."""
    meta: dict[str, Any] = {"outcome": outcome, "seconds": round(seconds, 3)}
    if outcome == "unchanged":
        meta["reason"] = "done by an earlier run (its step stamp holds): no work"
        return meta
    if outcome == "partial":
        meta["reason"] = partial_reason(figures)
    elif outcome != "done":
        meta["reason"] = str(figures.get("reason", ""))
        meta["dagster/row_count"] = 0
        return meta
    for key, value in figures.items():
        v = _scalar(value)
        if v is not None:
            meta[key] = rounded_cost(v) if key.endswith("cost_usd") else v
            if key.endswith("cost_usd"):  # shown rounded, and exact beside it
                meta[f"{key}_exact"] = str(v)
    if step == "graph_writes":
        meta["edges"] = int(figures.get("resolved", 0)) + int(figures.get("relationships", 0))
        meta["dagster/row_count"] = meta["edges"]
    elif step == "source_documents":
        meta["dagster/row_count"] = 1
    elif row_figure := ROW_COUNT.get(step):
        meta["dagster/row_count"] = int(figures.get(row_figure, 0))
    return meta


def _run_summary(report: runner.StepReport, totals: tuple[str, ...]) -> str:
    figures = ", ".join(f"{k} {report.total(k)}" for k in totals)
    return (
        f"{report.step}: {len(report.done)} done, {len(report.unchanged)} unchanged, {len(report.rejected)} "
        f"rejected, {len(report.skipped)} skipped, {len(report.failed)} failed in {report.seconds:.1f}s"
        + (f"; {figures}" if figures else "")
    )


def _failure_metadata(report: runner.StepReport, totals: tuple[str, ...]) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "partitions_done": len(report.done),
        "partitions_failed": len(report.failed),
        "partitions_rejected": len(report.rejected),
        "seconds": report.seconds,
        **{k: report.total(k) for k in totals},
    }
    for name in ("rejected", "skipped", "failed"):
        if getattr(report, name):
            meta[name] = dg.MetadataValue.json(getattr(report, name))
    return meta


def _run(
    context: dg.AssetExecutionContext,
    engine_res: EngineResource,
    pack_name: str,
    step: str,
    fn: StepFn,
    totals: tuple[str, ...],
    check: "str | None" = None,
    extra: "Callable[[str], dict[str, Any]] | None" = None,
) -> dg.MaterializeResult:
    """Run one step over the run's partitions; each partition's materialization carries its own
    figures (``extra(key)`` adds per-partition figures the step does not return, e.g. tokens).

    The step stamps of `rag ingest` change detection are shared: a partition whose stamp holds
    (done by `rag ingest` or an earlier run at this code version) is materialized without work,
    every partition the step completes is stamped (its downstream stamps dropped), and one it left
    partial (an extraction the budget stopped) loses its stamp, so the next run of either path
    finishes it. The store is checked first: a stopped Neo4j fails the step at once, in one line.
    Every step tags its run with its ledger sum (``run_costs_tagged``: 0 calls if it calls no model)."""
    engine = engine_res.engine()
    with engine_errors(step, failure_context(context, engine)), run_costs_tagged(context, engine):
        check_reachable(engine.driver, engine.neo4j_target)
        return _run_step(context, engine, pack_name, step, fn, totals, check, extra)


def _run_step(
    context: dg.AssetExecutionContext,
    engine: Engine,
    pack_name: str,
    step: str,
    fn: StepFn,
    totals: tuple[str, ...],
    check: str | None,
    extra: Callable[[str], dict[str, Any]] | None,
) -> dg.MaterializeResult:
    pack = engine.pack(pack_name)
    keys = steps.claim_order(list(context.partition_keys)) if step == "chunks" else list(context.partition_keys)
    version = context.assets_def.code_versions_by_key[context.asset_key]
    if version is None:  # every ingestion asset is built with its code version
        raise dg.Failure(description=f"{step}: asset without a code version")
    old = read_stamps(engine.driver, engine.database, pack_name)
    unchanged = {k for k in keys if pipeline.stamp_holds(engine, pack, k, step, old.get(k, {}), version)}
    seconds: dict[str, float] = {}
    added: dict[str, dict[str, Any]] = {}

    def timed(key: str) -> dict[str, Any]:
        started = time.perf_counter()
        try:
            return fn(engine, pack, key)
        finally:
            seconds[key] = time.perf_counter() - started
            if extra:
                added[key] = extra(key)

    report = runner.run_step(step, [k for k in keys if k not in unchanged], timed, progress=context.log.info)
    report.unchanged = [k for k in keys if k in unchanged]
    partial = {k for k, figures in report.done.items() if not pipeline.complete(figures)}
    _stamp(engine, pack_name, step, version, [k for k in report.done if k not in partial])
    if partial:  # ran, but its output is not finished: no stamp, and downstream must run again
        record_step(engine.driver, engine.database, pack_name, step, None, sorted(partial))
    for key, reason in {**report.rejected, **report.failed}.items():
        context.log.error("%s: %s", key, reason)
    summary = _run_summary(report, totals)
    if report.failed:  # the others' work is written; the run says which partitions to re-run
        first = next(iter(sorted(report.failed.items())))
        raise dg.Failure(
            description=f"{step}: {len(report.failed)} partition(s) failed, e.g. {first[0]}: {first[1]}"[:1000],
            metadata=_failure_metadata(report, totals),
        )
    context.log.info("run totals: %s", summary)
    for key in keys:
        if key in unchanged:
            outcome, figures = "unchanged", {}
        elif key in partial:
            outcome, figures = "partial", {**report.done[key], **added.get(key, {})}
        elif key in report.done:
            outcome, figures = "done", {**report.done[key], **added.get(key, {})}
        else:
            outcome = "rejected" if key in report.rejected else "skipped"
            figures = {"reason": report.rejected.get(key) or report.skipped.get(key, "")}
        context.add_asset_metadata(partition_metadata(step, outcome, figures, seconds.get(key, 0.0)), partition_key=key)
    checks: list[dg.AssetCheckResult] = []
    if check:
        checks.append(
            dg.AssetCheckResult(
                check_name=check,
                passed=not report.rejected,
                severity=dg.AssetCheckSeverity.WARN,
                metadata={"rejected_count": len(report.rejected), "rejected": dg.MetadataValue.json(report.rejected)},
                description=(
                    f"{len(report.rejected)} document version(s) rejected at {step} (skipped downstream): "
                    + "; ".join(f"{k}: {v}" for k, v in sorted(report.rejected.items()))[:1000]
                    if report.rejected
                    else f"No document version rejected at {step}."
                ),
            )
        )
    return dg.MaterializeResult(check_results=checks)


def _stamp(engine: Engine, pack_name: str, step: str, version: str, keys: list[str]) -> None:
    """Stamp the partitions this step completed. source_documents writes no node, so a new
    version has none to stamp yet: chunks (which writes it) stamps source_documents too."""
    if step == "chunks":
        source = code_versions(engine, engine.pack(pack_name))["source_documents"]
        record_step(engine.driver, engine.database, pack_name, "source_documents", source, keys)
    record_step(engine.driver, engine.database, pack_name, step, version, keys)


OWNERS = ["team:rag-platform"]


def build_ingestion_assets(engine: Engine, pack: DomainPack, config_path: str) -> list[dg.AssetsDefinition]:
    # BackfillPolicy.single_run is marked beta; we rely on it on purpose (many partitions, one run)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.BetaWarning)
        return _build(engine, pack, config_path)


def _extraction_failures(engine: Engine, pack_name: str, keys: list[str]) -> dict[str, int]:
    """Failed extraction calls of these partitions counted per reason (the exception type)."""
    counts: dict[str, int] = {}
    for key in keys:
        if engine.artifacts.exists(pack_name, key, "llm_extraction"):
            data = engine.artifacts.read(pack_name, key, "llm_extraction")
            for reason in (data.get("failed") or {}).values():
                counts[str(reason)] = counts.get(str(reason), 0) + 1
    return dict(sorted(counts.items()))


def _chunks_to_embed(context: dg.AssetExecutionContext, engine: Engine, pack_name: str) -> int:
    """Chunks of the run's partitions that chunk_index will embed (or take from the cache): the
    total its progress lines count toward. Partitions whose stamp holds, or rejected upstream, add none."""
    pack = engine.pack(pack_name)
    version = context.assets_def.code_versions_by_key[context.asset_key] or ""
    old = read_stamps(engine.driver, engine.database, pack_name)
    total = 0
    for key in context.partition_keys:
        if pipeline.stamp_holds(engine, pack, key, "chunk_index", old.get(key, {}), version):
            continue
        try:
            chunks = engine.artifacts.read(pack_name, key, "chunks")
        except (FileNotFoundError, RagError, ValueError):
            continue
        total += len(chunks) if isinstance(chunks, list) else 0
    return total


def _reindex_then_index(
    context: dg.AssetExecutionContext,
    engine: Engine,
    pack: DomainPack,
    key: str,
    progress: Callable[[Any], None] | None = None,
) -> dict[str, Any]:
    """chunk_index under a new embedder identity: the blue/green re-index (rag_engine.ingest.reindex)
    moves every current chunk to the new index while the old one keeps serving, then this
    partition is indexed under the new identity. The switch needs a passed eval gate for the new
    embedder or an approval: without either the new index is built and the run fails with
    ApprovalRequired (approve with `rag reindex --dry-run`, then `rag reindex --approved-by ...`)."""
    try:
        return steps.index_step(engine, pack, key, run_id=context.run.run_id, progress=progress)
    except EmbedderMismatch as exc:
        from rag_engine.ingest.reindex import run_reindex

        context.log.warning("embedder identity changed (%s); running the blue/green re-index", exc)
        report = run_reindex(
            engine,
            progress=lambda p: context.log.info(
                "reindex %s: %s/%s chunks (%s from cache, %.1fs)", p.phase, p.done, p.total, p.cache_hits, p.seconds
            ),
        )
        context.log.info(
            "reindex %s: %s -> %s, %s chunks embedded",
            report.status,
            report.previous_identity,
            report.identity,
            report.embedded_chunks,
        )
        if report.status not in ("switched", "already_active"):
            raise
        out = steps.index_step(engine, pack, key, run_id=context.run.run_id, progress=progress)
        return {**out, "reindexed_from": report.previous_identity or "", "reindex_status": report.status}


def _build(engine: Engine, pack: DomainPack, config_path: str) -> list[dg.AssetsDefinition]:
    name, group = pack.name, pack.entry.domain
    parts = document_versions(name)
    versions = code_versions(engine, pack)
    free_tags = {"cost": "free", "pack": name}
    common: dict[str, Any] = {
        "partitions_def": parts,
        "group_name": group,
        "backfill_policy": dg.BackfillPolicy.single_run(),
        "kinds": {"python"},
        "owners": OWNERS,
        "automation_condition": automation.free_step(),
        "tags": free_tags,
    }
    extraction_free = automation.model_is_free(
        engine, automation.required_model(engine.cfg.defaults.extraction_model, "defaults.extraction_model")
    )

    def key(asset: str) -> dg.AssetKey:
        return dg.AssetKey([name, asset])

    @dg.asset(
        key=key("source_documents"),
        code_version=versions["source_documents"],
        description=f"Validated source documents of the {name} pack, one partition per document version.",
        check_specs=[
            dg.AssetCheckSpec(
                "documents_valid",
                asset=key("source_documents"),
                description="WARN when a document version is rejected (size, encoding, "
                "front matter); the reason is the check description.",
            )
        ],
        **common,
    )
    def source_documents(context: dg.AssetExecutionContext, rag: EngineResource) -> dg.MaterializeResult:
        return _run(context, rag, name, "source_documents", steps.source_step, ("chars",), check="documents_valid")

    @dg.asset(
        key=key("chunks"),
        deps=[source_documents],
        code_version=versions["chunks"],
        description="Chunks by the pack's rules; writes Document, DocumentVersion and (pending) Chunk nodes.",
        check_specs=[
            dg.AssetCheckSpec(
                "chunks_valid",
                asset=key("chunks"),
                description="WARN when the pack refuses a document (no chunks, duplicate "
                "chunk ids, a rule error); it is skipped downstream.",
            )
        ],
        **{**common, "kinds": {"python", "neo4j"}},
    )
    def chunks(context: dg.AssetExecutionContext, rag: EngineResource) -> dg.MaterializeResult:
        # a document the pack refuses (e.g. a second title) is rejected here and skipped downstream
        return _run(context, rag, name, "chunks", steps.chunks_step, ("chunks",), check="chunks_valid")

    @dg.asset(
        key=key("references"),
        deps=[chunks],
        code_version=versions["references"],
        description="Deterministic references extracted and normalized by the pack (CITES edges).",
        **{**common, "kinds": {"python", "neo4j"}},
    )
    def references(context: dg.AssetExecutionContext, rag: EngineResource) -> dg.MaterializeResult:
        return _run(context, rag, name, "references", steps.references_step, ("references",))

    @dg.asset(
        key=key("chunk_index"),
        deps=[chunks],
        code_version=versions["chunk_index"],
        description="Chunk embeddings by the active embedder and the vector index; an indexed "
        "version becomes the current one (the previous version is superseded). A new "
        "embedder identity runs the blue/green re-index first.",
        **{**common, "kinds": {"python", "neo4j"}, "tags": {**free_tags, "model": "embedder"}},
    )
    def chunk_index(context: dg.AssetExecutionContext, rag: EngineResource) -> dg.MaterializeResult:
        with engine_errors("chunk_index", failure_context(context, rag.engine())):
            check_reachable(rag.engine().driver, rag.engine().neo4j_target)
            total = _chunks_to_embed(context, rag.engine(), name)
        # the lines reach the run's event log through the managed ``rag_engine`` logger
        # (config/dagster.yaml), once: an ``emit`` here would log each of them twice
        with EmbedTracker(f"{name}/chunk_index", total) as tracker:  # _run tags the run with its embedding calls
            return _run(
                context,
                rag,
                name,
                "chunk_index",
                lambda e, p, k: _reindex_then_index(context, e, p, k, progress=tracker.callback(k)),
                ("embedded",),
            )

    @dg.asset(
        key=key("llm_extraction"),
        deps=[chunks],
        code_version=versions["llm_extraction"],
        pool="llm",
        description="LLM graph extraction per chunk, validated with provenance; budgets per run, "
        "cached by (chunk content, prompt, model). Paid work: automated only under "
        "automation.max_auto_cost_usd, else awaiting approval (materialize with approved_by and reason).",
        check_specs=[
            dg.AssetCheckSpec(
                "extraction_calls_ok",
                asset=key("llm_extraction"),
                description="WARN when extraction calls failed (counts per reason) or the run budget skipped chunks.",
            ),
            approval_status.check_spec(key("llm_extraction")),
        ],
        **{
            **common,
            "kinds": automation.extraction_kinds(engine),  # the extraction provider's kind (replay, openai, ...)
            "automation_condition": automation.paid_step(config_path),
            "tags": {"cost": "free" if extraction_free else "paid", "pack": name, "model": "extraction"},
        },
    )
    def llm_extraction(
        context: dg.AssetExecutionContext, rag: EngineResource, config: automation.PaidApproval
    ) -> dg.MaterializeResult:
        engine = rag.engine()
        with run_costs_tagged(context, engine):  # the run's calls on its tags, a refused run's too
            estimate = automation.extraction_estimate(engine, name, list(context.partition_keys))
            failed_with = {**failure_context(context, engine), **{f"estimate_{k}": v for k, v in estimate.items()}}
            with engine_errors("llm_extraction", failed_with):
                automation.require_paid_approval(context, engine, estimate, config)
            cleared = dg.AssetCheckResult(
                check_name=approval_status.CHECK,
                passed=True,
                severity=dg.AssetCheckSeverity.WARN,
                description=(
                    "Within automation.max_auto_cost_usd: no approval needed."
                    if automation.within_limit(engine, estimate)
                    else f"Approved by {config.approved_by}: {config.reason}"
                ),
            )
            budget = new_budget(engine, name)

            def step(e: Engine, p: DomainPack, k: str) -> dict[str, Any]:
                tokens, cost, calls, hits = budget.tokens, budget.cost, budget.chunks, budget.cache_hits
                out = extraction_step(e, p, k, run_id=context.run.run_id, budget=budget)
                figures: dict[str, Any] = {
                    "tokens": budget.tokens - tokens,
                    "llm_calls": budget.chunks - calls,
                    "cache_hits": budget.cache_hits - hits,
                }
                if cost is not None and budget.cost is not None:
                    figures["cost_usd"] = format(budget.cost - cost, "f")  # exact; shown rounded
                else:
                    figures["cost_known"] = "no (unpriced model)"
                return {**out, **figures}

            totals = ("extracted", "entities", "relationships", "skipped", "failed", "rejected")
            result = _run(context, rag, name, "llm_extraction", step, totals)
            with engine_errors("llm_extraction"):
                summary = finish_run(engine, engine.pack(name), context.run.run_id, budget)
            if budget.skipped:
                context.log.warning("budget exhausted: %s chunks skipped; the sensor continues", budget.skipped)
            context.log.info(
                "extraction run: %s, %s calls, %s cache hits, %s tokens, cost %s (%s)",
                summary["status"],
                summary["chunks"],
                summary["cache_hits"],
                summary["tokens"],
                summary["cost"] if summary["cost"] is not None else "unknown",
                summary["model"],
            )
            failures = _extraction_failures(engine, name, list(context.partition_keys))
            ok = not failures and not budget.skipped
            detail = ", ".join(f"{n} x {r}" for r, n in failures.items())
            check = dg.AssetCheckResult(
                check_name="extraction_calls_ok",
                passed=ok,
                severity=dg.AssetCheckSeverity.WARN,
                metadata={
                    "failed_calls": sum(failures.values()),
                    "budget_skipped": budget.skipped,
                    "failed_by_reason": dg.MetadataValue.json(failures),
                    "rejected_by_reason": dg.MetadataValue.json(summary["rejected"]),
                },
                description=(
                    "All extraction calls answered."
                    if ok
                    else f"{sum(failures.values())} failed call(s): {detail or 'none'}; "
                    f"{budget.skipped} chunk(s) skipped by the run budget (the document sensor continues them). "
                    "Failed calls are not retried by themselves: materialize the partitions again to retry."
                ),
            )
            if failures:
                context.log.warning("extraction calls failed: %s", detail)
            return dg.MaterializeResult(check_results=[*result.check_results, check, cleared])

    # graph_writes waits for chunk_index: a version is live (its chunks active) once indexed
    @dg.asset(
        key=key("graph_writes"),
        deps=[references, llm_extraction, chunk_index],
        code_version=versions["graph_writes"],
        description="Graph edges: deterministic references resolved to target chunks, and the validated "
        "LLM records of each version (a superseded version's inferred records are removed). "
        "Never calls a model: a policy change rebuilds it by itself.",
        **{**common, "kinds": {"neo4j"}, "automation_condition": automation.graph_step(config_path)},
    )
    def graph_writes(context: dg.AssetExecutionContext, rag: EngineResource) -> dg.MaterializeResult:
        return _run(
            context,
            rag,
            name,
            "graph_writes",
            steps.graph_step,
            ("resolved", "unresolved", "entities", "relationships", "eligible"),
        )

    return [source_documents, chunks, references, chunk_index, llm_extraction, graph_writes]
