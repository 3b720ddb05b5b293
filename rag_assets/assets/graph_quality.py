"""graph_quality: the graph's health as asset checks, run nightly (its automation condition, and
the schedule of the checks job for instances without the automation sensor).

Orphans, dangling edges, missing provenance and key conflicts are blocking ERROR checks (the
same set as ``rag quality``, ``rag_engine.ops.status.BLOCKING_CHECKS``): the checks job fails
when one fails. Stale versions and an incomplete latest extraction run warn. Low-confidence
counts, graph sizes and the cleanup status are reported as metadata and always pass.
"""

from datetime import timedelta
from typing import Any

import dagster as dg

from rag_assets.automation import nightly
from rag_assets.resources import EngineResource
from rag_engine.graph.quality import quality_report
from rag_engine.ops.status import BLOCKING_CHECKS, WARNING_CHECKS

KEY = dg.AssetKey("graph_quality")
BLOCKING = BLOCKING_CHECKS
WARNING = WARNING_CHECKS
INFO = ("low_confidence_counted", "graph_size_reported", "latest_extraction_run", "cleanup_status")


DESCRIPTIONS = {
    "no_orphan_entities": "ERROR, blocking: entities no chunk mentions any more (see `rag cleanup --dry-run`).",
    "no_dangling_edges": "ERROR, blocking: inferred edges whose evidence chunk is gone or not current, and "
    "REFERENCES edges to chunks that are not current.",
    "no_missing_provenance": "ERROR, blocking: inferred edges or mentions lacking a provenance field "
    "(doc, chunk, version, bucket, run, model, prompt, source type).",
    "no_key_conflicts": "ERROR, blocking: a key a document owns (its id, e.g. POL-012) owned by another document "
    "too or answered by another document's active chunk: citations of it would link to the wrong document.",
    "no_stale_versions": "WARN: superseded document versions still holding chunk nodes (a cleanup removes them).",
    "low_confidence_counted": "Always passes: inferred edges stored below the confidence floor (never "
    "retrieval-eligible) and the eligible ones.",
    "graph_size_reported": "Always passes: documents, active chunks, entities, deterministic and inferred edges, "
    "eligible edges (numbers that plot over time).",
    "latest_extraction_run": "WARN when the latest extraction run did not complete (failed calls or budget).",
    "cleanup_status": "Always passes: the most recent approved cleanup.",
}


def _specs() -> list[dg.AssetCheckSpec]:
    specs = [dg.AssetCheckSpec(name, asset=KEY, blocking=True, description=DESCRIPTIONS[name]) for name in BLOCKING]
    specs += [dg.AssetCheckSpec(name, asset=KEY, description=DESCRIPTIONS[name]) for name in (*WARNING, *INFO)]
    return specs


def _sizes(report: dict[str, Any]) -> dict[str, int]:
    size = report["graph_size"]
    return {
        "documents": int(size.get("documents", 0)),
        "chunks": int(size.get("chunks", 0)),
        "entities": int(size.get("entities", 0)),
        "deterministic_edges": int(size["deterministic"]),
        "inferred_edges": int(size["inferred"]),
        "eligible_edges": int(size.get("eligible", 0)),
    }


def _checks(report: dict[str, Any]) -> list[dg.AssetCheckResult]:
    out: list[dg.AssetCheckResult] = []
    for name, field in {**BLOCKING, **WARNING}.items():
        count = int(report[field]["count"])
        out.append(
            dg.AssetCheckResult(
                check_name=name,
                passed=count == 0,
                severity=dg.AssetCheckSeverity.ERROR if name in BLOCKING else dg.AssetCheckSeverity.WARN,
                description=f"{count} {field.replace('_', ' ')}"
                + (f" (e.g. {report[field]['sample'][:3]})" if count and report[field].get("sample") else ""),
                metadata={"count": count, "detail": dg.MetadataValue.json(report[field])},
            )
        )
    out.append(
        dg.AssetCheckResult(
            check_name="low_confidence_counted",
            passed=True,
            metadata={
                "low_confidence": report["low_confidence"]["count"],
                "eligible": report["low_confidence"]["eligible"],
            },
        )
    )
    out.append(dg.AssetCheckResult(check_name="graph_size_reported", passed=True, metadata=_sizes(report)))
    latest = report["latest_run"]
    out.append(
        dg.AssetCheckResult(
            check_name="latest_extraction_run",
            severity=dg.AssetCheckSeverity.WARN,
            passed=latest is None or latest["status"] == "complete",
            description="no extraction run yet"
            if latest is None
            else f"latest extraction run {latest['run_id']} of {latest['pack']}: {latest['status']}",
            metadata={"latest_run": dg.MetadataValue.json(latest or {})},
        )
    )
    out.append(
        dg.AssetCheckResult(
            check_name="cleanup_status",
            passed=True,
            metadata={"last_cleanup": dg.MetadataValue.json(report["cleanup"] or {})},
        )
    )
    return out


@dg.asset(
    key=KEY,
    group_name="platform",
    kinds={"neo4j"},
    check_specs=_specs(),
    owners=["team:rag-platform"],
    tags={"cost": "free"},
    automation_condition=nightly(),
    freshness_policy=dg.FreshnessPolicy.cron(deadline_cron="30 3 * * *", lower_bound_delta=timedelta(hours=24)),
    description="Graph health: orphans, dangling edges, key conflicts, stale versions, provenance, confidence, sizes, "
    "latest extraction run and cleanup status, for the enabled packs.",
)
def graph_quality(context: dg.AssetExecutionContext, rag: EngineResource) -> dg.MaterializeResult:
    engine = rag.engine()
    report = quality_report(engine.driver, engine.database, sorted(engine.packs))
    failing = [n for n, f in BLOCKING.items() if report[f]["count"]]
    if failing:
        context.log.error("blocking graph quality checks fail: %s; see `rag cleanup --dry-run`", failing)
    return dg.MaterializeResult(
        metadata={
            "packs": dg.MetadataValue.json(report["packs"]),
            "orphan_entities": report["orphan_entities"]["count"],
            "dangling_edges": report["dangling_edges"]["count"],
            "stale_versions": report["stale_versions"]["count"],
            "key_conflicts": report["key_conflicts"]["count"],
            **_sizes(report),
        },
        check_results=_checks(report),
    )


graph_quality_job = dg.define_asset_job(
    "graph_quality_checks",
    selection=dg.AssetSelection.assets(KEY),
    description="Recompute graph_quality and run its checks; fails when a blocking check fails.",
)

nightly_graph_quality = dg.ScheduleDefinition(
    name="nightly_graph_quality",
    job=graph_quality_job,
    cron_schedule="0 3 * * *",
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Graph quality checks every night at 03:00 UTC.",
)
