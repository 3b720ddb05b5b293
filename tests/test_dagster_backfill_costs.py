"""A backfill shows its total: the backfill_costs sensor tags a finished backfill with the usage
ledger sum over all of its runs. The runs are real runs of a throwaway pack's ingestion assets (the
local embedder's calls are ledger records), two of them tagged with the backfill's id as the backfill
daemon tags the runs it launches, and one outside it; the backfill is a real PartitionBackfill in the
same instance, marked finished as the daemon marks it."""

from __future__ import annotations

import time

import dagster as dg
from dagster._core.execution.backfill import BulkActionStatus, PartitionBackfill

from rag_assets.backfill_costs import BACKFILL_ID_TAG, backfill_cost_tags
from rag_assets.definitions import build_definitions
from rag_assets.run_costs import run_cost_tags
from tests.test_dagster_automation import Automation

RANGE = ("dagster/asset_partition_range_start", "dagster/asset_partition_range_end")


def _run(auto: Automation, defs: dg.Definitions, partition: str, tags: dict[str, str]) -> str:
    keys = {k for k in defs.resolve_asset_graph().get_all_asset_keys() if k.path[0] == auto.pack}
    job = defs.resolve_implicit_global_asset_job_def().get_subset(asset_selection=keys)
    result = job.execute_in_process(
        instance=auto.instance, raise_on_error=False, tags={RANGE[0]: partition, RANGE[1]: partition, **tags}
    )
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    return result.run_id


def test_a_finished_backfill_is_tagged_with_the_ledger_sum_of_its_runs(variant, unique):
    defs = build_definitions(variant("base"))
    engine = defs.resources["rag"].engine()
    auto = Automation(unique)
    sensor = defs.resolve_sensor_def(f"{unique}__new_document_versions")
    found = sensor(dg.build_sensor_context(instance=auto.instance, resources={"rag": defs.resources["rag"]}))
    assert isinstance(found, dg.SensorResult)
    for req in found.dynamic_partitions_requests or []:
        auto.instance.add_dynamic_partitions(auto.parts, list(req.partition_keys))
    first, second = list(auto.instance.get_dynamic_partitions(auto.parts))[:2]

    backfill_id = "bf" + unique
    pack_keys = sorted((k for k in defs.resolve_asset_graph().get_all_asset_keys() if k.path[0] == unique), key=str)
    backfill = PartitionBackfill.from_asset_partitions(
        backfill_id=backfill_id,
        asset_graph=defs.resolve_asset_graph(),
        partition_names=[first, second],
        asset_selection=pack_keys,
        backfill_timestamp=time.time(),
        tags={"operator": "test"},
        dynamic_partitions_store=auto.instance,
        all_partitions=False,
        title=None,
        description=None,
        run_config=None,
    )
    auto.instance.add_backfill(backfill)
    costs = dg.build_sensor_context(instance=auto.instance, resources={"rag": defs.resources["rag"]})
    costs_sensor = defs.resolve_sensor_def("backfill_costs")

    runs = [_run(auto, defs, p, {BACKFILL_ID_TAG: backfill_id}) for p in (first, second)]
    outside = _run(auto, defs, first, {})  # not the backfill's: left out of its total

    # still running (REQUESTED): not tagged, its runs' own tags show its spend so far
    costs_sensor(costs)
    assert not any(k.startswith("rag/backfill_") for k in auto.instance.get_backfill(backfill_id).tags)

    auto.instance.update_backfill(backfill.with_status(BulkActionStatus.COMPLETED_SUCCESS))
    skip = costs_sensor(costs)
    tags = auto.instance.get_backfill(backfill_id).tags

    records = [r for run_id in runs for r in engine.ledger.records(run_id=run_id)]
    assert records, "the runs embedded chunks: ledger records expected"
    assert len(engine.ledger.records(run_id=outside)) > 0
    expected = run_cost_tags(records)
    assert tags["rag/backfill_model_calls"] == expected["rag/model_calls"] == str(len(records))
    assert tags["rag/backfill_tokens"] == expected["rag/tokens"]
    assert tags["rag/backfill_cost_usd"] == expected["rag/cost_usd"]
    assert tags["rag/backfill_cost_usd_exact"] == expected["rag/cost_usd_exact"]
    assert tags["rag/backfill_estimated_calls"] == expected["rag/estimated_calls"]
    assert tags["rag/backfill_runs"] == "2"
    assert tags["operator"] == "test"  # the backfill's own tags are kept
    # the total is the sum of its runs' own tags (what the Runs list shows per run)
    per_run = [auto.instance.get_run_by_id(r).tags for r in runs]  # type: ignore[union-attr]
    assert int(tags["rag/backfill_model_calls"]) == sum(int(t["rag/model_calls"]) for t in per_run)
    assert backfill_id in str(skip)

    # a later tick changes nothing; the sum helper agrees with the tags written
    costs_sensor(costs)
    assert auto.instance.get_backfill(backfill_id).tags == tags
    assert {k: v for k, v in tags.items() if k.startswith("rag/")} == backfill_cost_tags(engine, runs)
