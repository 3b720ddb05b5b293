"""Discover new document versions: add their partitions and request one run for all of them.

This sensor owns new document versions: automation does not request new partitions (one run per
new version, never the sensor's and an automation run together). The run leaves out the paid
extraction (and the graph written from it) when its estimate is above
``automation.max_auto_cost_usd``: automation then holds it as awaiting approval, as for any
other paid work.

Each tick probes the store first (``probe_store``, a 2 s bound): with Neo4j stopped the tick is
skipped in one line (``<sensor>: the store is unavailable: Neo4j is not reachable at ...``), the
same line a step shows (``rag_assets.failures``), instead of a driver traceback after 30-60 s.
"""

import time
from typing import TYPE_CHECKING

import dagster as dg

from rag_assets.automation import extraction_estimate, within_limit
from rag_assets.failures import skip_reason
from rag_assets.partitions import document_versions, partitions_name, runs_by_default
from rag_assets.resources import EngineResource
from rag_engine.engine import Engine
from rag_engine.ingest.documents import discover
from rag_engine.ingest.extraction_step import budget_skipped_partitions
from rag_engine.ingest.steps import withdraw_missing_documents
from rag_engine.store.connection import probe_store

FREE_STEPS = ("source_documents", "chunks", "references", "chunk_index")
ALL_STEPS = (*FREE_STEPS, "llm_extraction", "graph_writes")
"""What a new version's run does when its extraction awaits approval."""

if TYPE_CHECKING:  # define_asset_job's return type, which dagster does not export
    from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition


def plan_partitions(current: list[str], found: list[str]) -> tuple[list[str], list[str]]:
    """(keys to add, keys to drop): a changed document drops its old version's key, a removed
    document drops its key too (the engine withdraws it from retrieval)."""
    found_set = set(found)
    add = [k for k in found if k not in set(current)]
    drop = [k for k in current if k not in found_set]
    return add, drop


def build_document_sensor(
    pack_name: str, job: "dg.JobDefinition | UnresolvedAssetJobDefinition"
) -> dg.SensorDefinition:
    parts = document_versions(pack_name)
    parts_name = partitions_name(parts)

    @dg.sensor(
        name=f"{pack_name}__new_document_versions",
        job=job,
        minimum_interval_seconds=60,
        # a pack outside the demo (DEMO_PACKS) starts stopped: no surprise ingestion on `make dev`
        default_status=dg.DefaultSensorStatus.RUNNING if runs_by_default(pack_name) else dg.DefaultSensorStatus.STOPPED,
        description="Scans the pack corpus by content hash; new versions get partitions and one run "
        "(the only run of a new version: automation does not request new partitions). Runs by default "
        "for the demo packs (DEMO_PACKS) only; turn it on for another pack.",
    )
    def _sensor(context: dg.SensorEvaluationContext, rag: EngineResource) -> dg.SensorResult | dg.SkipReason:
        engine = rag.engine()
        try:  # a stopped store: one line within the probe's bound, not half a minute of driver retries
            probe_store(engine.neo4j_target, engine.env)
            return _scan(context, engine)
        except Exception as exc:
            skipped = skip_reason(f"{pack_name}__new_document_versions", exc)
            if skipped is None:  # a bug: its traceback is what a developer needs
                raise
            return skipped

    def _scan(context: dg.SensorEvaluationContext, engine: Engine) -> dg.SensorResult | dg.SkipReason:
        pack = engine.pack(pack_name)
        refs = discover(pack, include_rejected=True)  # rejected files get a partition and a recorded reason
        found = [r.partition_key for r in refs]
        withdrawn = withdraw_missing_documents(engine, pack, [r.doc_id for r in refs if r.problem is None])
        if withdrawn:
            context.log.warning("withdrawn from retrieval (no longer in the corpus): %s", withdrawn)
        current = list(context.instance.get_dynamic_partitions(parts_name))
        add, superseded = plan_partitions(current, found)
        if not add and not superseded:
            pending = budget_skipped_partitions(engine, pack, [k for k in current if k in set(found)])
            if pending:  # an extraction budget ran out last time: continue (finished chunks are cached)
                ordered = [k for k in current if k in set(pending)]
                return dg.SensorResult(
                    run_requests=[
                        dg.RunRequest(
                            run_key=f"{pack_name}:continue:{time.time_ns()}",
                            asset_selection=[
                                dg.AssetKey([pack_name, "llm_extraction"]),
                                dg.AssetKey([pack_name, "graph_writes"]),
                            ],
                            tags={
                                "dagster/asset_partition_range_start": ordered[0],
                                "dagster/asset_partition_range_end": ordered[-1],
                            },
                        )
                    ]
                )
            return dg.SkipReason(f"no new document versions among {len(found)} documents")
        requests: list[dg.AddDynamicPartitionsRequest | dg.DeleteDynamicPartitionsRequest] = (
            [parts.build_add_request(add)] if add else []
        )
        if superseded:
            context.log.info("superseded or removed versions dropped from partitions: %s", superseded)
            requests.append(parts.build_delete_request(superseded))
        runs: list[dg.RunRequest] = []
        if add:
            # the whole pack, named: a run without an asset selection is not seen by automation's
            # executed_with_root_target, so the steps it wrote would look like updated deps of the
            # steps after them, and automation would run graph_writes again for the new version
            selection = [dg.AssetKey([pack_name, s]) for s in ALL_STEPS]
            if pack.entry.extraction:
                estimate = extraction_estimate(engine, pack_name, add)
                if not within_limit(engine, estimate):
                    selection = [dg.AssetKey([pack_name, s]) for s in FREE_STEPS]
                    context.log.info(
                        "new versions run without llm_extraction: estimated %s USD for %s calls is above "
                        "automation.max_auto_cost_usd; it awaits approval",
                        estimate["cost_usd"] if estimate["cost_usd"] is not None else "unknown",
                        estimate["calls"],
                    )
            runs.append(
                dg.RunRequest(
                    # the tick time makes a reverted file (X -> B -> C -> B) run again
                    run_key=f"{pack_name}:{time.time_ns()}:{','.join(sorted(add))}"[:4000],
                    asset_selection=selection,
                    tags={"dagster/asset_partition_range_start": add[0], "dagster/asset_partition_range_end": add[-1]},
                )
            )
        return dg.SensorResult(run_requests=runs, dynamic_partitions_requests=requests)

    return _sensor
