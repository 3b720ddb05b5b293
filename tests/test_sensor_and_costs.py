"""The document-version sensor, the usage_costs asset and the cost tags of a run, through Dagster."""

from __future__ import annotations

from decimal import Decimal

import dagster as dg
import pytest

from rag_assets.definitions import build_definitions
from rag_assets.run_costs import (
    CALLS_TAG,
    COST_TAG,
    ESTIMATED_TAG,
    EXACT_COST_TAG,
    TOKENS_TAG,
    run_cost_tags,
    run_costs_tagged,
    tag_run_costs,
)
from rag_assets.sensors import plan_partitions
from rag_engine.usage import UsageRecord
from tests.support.packs import POLICY


def test_plan_partitions_adds_new_and_drops_superseded():
    add, drop = plan_partitions(["a--1", "b--1", "gone--1"], ["a--2", "b--1", "c--1"])
    assert add == ["a--2", "c--1"] and drop == ["a--1", "gone--1"]
    assert plan_partitions(["a--1"], ["a--1"]) == ([], [])


def _evaluate(defs, instance, pack):
    sensor = defs.resolve_sensor_def(f"{pack}__new_document_versions")
    ctx = dg.build_sensor_context(instance=instance, resources={"rag": defs.resources["rag"]})
    return sensor(ctx)


def test_sensor_adds_versions_requests_one_run_and_supersedes(variant, unique, tmp_path):
    defs = build_definitions(variant("base"))
    instance = dg.DagsterInstance.ephemeral()
    result = _evaluate(defs, instance, unique)
    assert isinstance(result, dg.SensorResult)
    (add,) = result.dynamic_partitions_requests
    assert sorted(k.split("--")[0] for k in add.partition_keys) == ["policy", "runbook"]
    (run,) = result.run_requests  # one run for all new versions (single-run backfill)
    assert run.tags["dagster/asset_partition_range_start"] == add.partition_keys[0]
    assert run.tags["dagster/asset_partition_range_end"] == add.partition_keys[-1]
    instance.add_dynamic_partitions(f"{unique}__document_versions", list(add.partition_keys))

    unchanged = _evaluate(defs, instance, unique)
    assert isinstance(unchanged, dg.SkipReason)

    # an extraction that stopped at its budget is continued by the next tick
    engine = defs.resources["rag"].engine()
    policy_key = next(k for k in add.partition_keys if k.startswith("policy--"))
    engine.artifacts.write(unique, policy_key, "llm_extraction_status", {"skipped": 3, "failed": 0})
    cont = _evaluate(defs, instance, unique)
    (req,) = cont.run_requests
    assert set(req.asset_selection) == {dg.AssetKey([unique, "llm_extraction"]), dg.AssetKey([unique, "graph_writes"])}
    assert (
        req.tags["dagster/asset_partition_range_start"] == policy_key == req.tags["dagster/asset_partition_range_end"]
    )
    engine.artifacts.write(unique, policy_key, "llm_extraction_status", {"skipped": 0, "failed": 0})
    assert isinstance(_evaluate(defs, instance, unique), dg.SkipReason)

    (tmp_path / "corpus" / "policy.md").write_text(POLICY + "\n## Addendum\nNew rule.\n")
    changed = _evaluate(defs, instance, unique)
    added, deleted = changed.dynamic_partitions_requests
    assert [k.split("--")[0] for k in added.partition_keys] == ["policy"]
    assert [k.split("--")[0] for k in deleted.partition_keys] == ["policy"]
    assert added.partition_keys[0] != deleted.partition_keys[0]


def test_usage_costs_asset_summarises_the_ledger():
    defs = build_definitions()
    engine = defs.resources["rag"].engine()
    before = len(engine.ledger.records())
    engine.ledger.record(
        UsageRecord(
            run_id="costs-test",
            purpose="usage_costs_test",
            provider="openai",
            requested_model="m",
            reported_model="m-1",
            input_tokens=1000,
            cached_input_tokens=200,
            output_tokens=100,
            status="ok",
            pricing_version="v",
            cost=Decimal("0.0015"),
        )
    )
    engine.ledger.record(
        UsageRecord(
            run_id="costs-test",
            purpose="usage_costs_test",
            provider="local",
            requested_model="x",
            input_tokens=10,
            output_tokens=1,
            status="ok",
            cost=None,
        )
    )
    instance = dg.DagsterInstance.ephemeral()
    result = dg.materialize([defs.resolve_assets_def("usage_costs")], instance=instance)
    meta = result.asset_materializations_for_node("usage_costs")[0].metadata
    assert meta["calls"].value == before + 2
    assert meta["unknown_cost_calls"].value >= 1  # unknown cost stays visible, never counted as zero
    known = meta["known_cost_usd"]
    assert isinstance(known, dg.FloatMetadataValue) and known.value >= 0.0015
    assert not any(k.startswith("known_cost_usd_") for k in meta)  # one figure, a number
    # the summary is a typed table, a row per kind, purpose, provider and model: no run ids, no text numbers
    summary = meta["summary"]
    assert isinstance(summary, dg.TableMetadataValue)
    types = {c.name: c.type for c in summary.schema.columns}
    assert types["cost_usd"] == "float" and types["calls"] == types["input_tokens"] == "int"
    assert "run_id" not in types
    rows = {(r.data["purpose"], r.data["provider"], r.data["model"]): r.data for r in summary.records}
    priced = rows[("usage_costs_test", "openai", "m")]
    assert priced["cost_usd"] == 0.0015 and priced["input_tokens"] == 1000
    unpriced = rows[("usage_costs_test", "local", "x")]
    assert unpriced["cost_usd"] is None and unpriced["unknown_cost_calls"] == 1 and unpriced["calls"] == 1
    for row in summary.records:
        assert all(not isinstance(row.data[c], str) for c, t in types.items() if t != "string"), row.data
    assert "nan" not in repr({k: v.value for k, v in meta.items()}).lower()
    # the asset tags its own run (it calls no model: nothing spent)
    tags = instance.get_run_by_id(result.run_id).tags
    assert (tags[COST_TAG], tags[TOKENS_TAG]) == ("0", "0")


def _spending_asset(records: list[dict]) -> dg.AssetsDefinition:
    """An asset that writes these usage records for its own run, plus one for another run, then
    tags its run: what a model-calling asset does."""

    @dg.asset(required_resource_keys={"rag"})
    def spends(context) -> None:  # unannotated: this module's annotations are strings
        engine = context.resources.rag.engine()
        for fields in records:
            engine.ledger.record(UsageRecord(run_id=context.run.run_id, purpose="answer", provider="p", **fields))
        engine.ledger.record(
            UsageRecord(run_id="another-run", purpose="answer", provider="p", requested_model="m", cost=Decimal(1))
        )
        tag_run_costs(context, engine)

    return spends


def test_tag_run_costs_puts_the_ledger_sum_of_the_run_on_its_tags():
    rag = build_definitions().resources["rag"]
    instance = dg.DagsterInstance.ephemeral()
    priced = [
        {"requested_model": "m", "input_tokens": 1000, "output_tokens": 100, "cost": Decimal("0.0015")},
        {"requested_model": "m", "input_tokens": 200, "output_tokens": 30, "cost": Decimal("0.00025")},
        {"requested_model": "e", "input_tokens": 50, "cost": Decimal(0)},
    ]
    result = dg.materialize_to_memory([_spending_asset(priced)], instance=instance, resources={"rag": rag})
    tags = instance.get_run_by_id(result.run_id).tags
    assert (tags[COST_TAG], tags[TOKENS_TAG], tags[CALLS_TAG]) == ("0.00175", "1380", "3")

    unpriced = [*priced, {"requested_model": "local", "input_tokens": 10, "output_tokens": 5, "cost": None}]
    result = dg.materialize_to_memory([_spending_asset(unpriced)], instance=instance, resources={"rag": rag})
    tags = instance.get_run_by_id(result.run_id).tags
    assert (tags[COST_TAG], tags[TOKENS_TAG], tags[CALLS_TAG]) == ("unknown", "1395", "4")  # never a partial sum


def _ending_asset(records: list[dict], end: BaseException) -> dg.AssetsDefinition:
    """An asset that spends like a model-calling step inside ``run_costs_tagged``, then ends with
    ``end``: a failure, or the interrupt a cancelled run's step gets."""

    @dg.asset(required_resource_keys={"rag"})
    def ends(context) -> None:  # unannotated: this module's annotations are strings
        engine = context.resources.rag.engine()
        with run_costs_tagged(context, engine):
            for fields in records:
                engine.ledger.record(UsageRecord(run_id=context.run.run_id, purpose="answer", provider="p", **fields))
            raise end

    return ends


@pytest.mark.parametrize(
    "end",
    [
        dg.Failure(description="2 partition(s) failed"),
        RuntimeError("engine error"),
        dg.DagsterExecutionInterruptedError(),  # what a step of a cancelled run is interrupted with
    ],
    ids=["failure", "error", "cancelled"],
)
def test_failed_and_cancelled_runs_are_tagged_with_their_ledger_sum(end):
    """A run that ends in a failure or a cancel still spent its calls: its tags are the ledger's sum
    for the run, exactly, like a finished run's (they were written only at a step's end before)."""
    rag = build_definitions().resources["rag"]
    instance = dg.DagsterInstance.ephemeral()
    spent = [
        {"requested_model": "m", "input_tokens": 1000, "output_tokens": 100, "cost": Decimal("0.0015")},
        {
            "requested_model": "f",
            "input_tokens": 400,
            "output_tokens": 40,
            "cost": Decimal("0.0002"),
            "estimated": True,
        },
    ]
    try:
        result = dg.materialize_to_memory(
            [_ending_asset(spent, end)], instance=instance, resources={"rag": rag}, raise_on_error=False
        )
        run_id = result.run_id
    except dg.DagsterExecutionInterruptedError:  # an interrupt stops the in-process run itself
        (run,) = instance.get_runs(limit=1)
        run_id = run.run_id
    tags = instance.get_run_by_id(run_id).tags
    ledger = rag.engine().ledger.records(run_id=run_id)
    assert len(ledger) == 2
    assert {k: tags.get(k) for k in (COST_TAG, EXACT_COST_TAG, TOKENS_TAG, CALLS_TAG, ESTIMATED_TAG)} == run_cost_tags(
        ledger
    )
    assert (tags[COST_TAG], tags[TOKENS_TAG], tags[CALLS_TAG], tags[ESTIMATED_TAG]) == ("0.0017", "1540", "2", "1")


def test_a_running_step_shows_what_it_has_spent_so_far(monkeypatch):
    """Tags are refreshed while a step runs, not only at its end: a long embedding run shows its
    ledger sum so far in the Runs list."""
    import time

    from rag_assets import run_costs

    monkeypatch.setattr(run_costs, "REFRESH_SECONDS", 0.05)
    seen: list[str | None] = []

    @dg.asset(required_resource_keys={"rag"})
    def slow(context) -> None:  # unannotated: this module's annotations are strings
        engine = context.resources.rag.engine()
        with run_costs_tagged(context, engine):
            engine.ledger.record(
                UsageRecord(
                    run_id=context.run.run_id, purpose="index", provider="p", requested_model="e", cost=Decimal(1)
                )
            )
            deadline = time.monotonic() + 10
            while (
                time.monotonic() < deadline
                and context.instance.get_run_by_id(context.run.run_id).tags.get(CALLS_TAG) != "1"
            ):
                time.sleep(0.02)
            seen.append(context.instance.get_run_by_id(context.run.run_id).tags.get(COST_TAG))

    rag = build_definitions().resources["rag"]
    instance = dg.DagsterInstance.ephemeral()
    result = dg.materialize_to_memory([slow], instance=instance, resources={"rag": rag})
    assert seen == ["1"]  # tagged while the step was still running
    assert instance.get_run_by_id(result.run_id).tags[COST_TAG] == "1"


def test_every_ingestion_run_is_tagged_with_its_ledger_sum(variant, unique):
    """A run of steps that call no model (as a backfill's runs of chunks and references) carries
    its tags too, 0 calls; a whole ingestion run's tags are its ledger sum."""
    defs = build_definitions(variant("tags"))
    instance = dg.DagsterInstance.ephemeral()
    result = _evaluate(defs, instance, unique)
    (add,) = result.dynamic_partitions_requests
    instance.add_dynamic_partitions(f"{unique}__document_versions", list(add.partition_keys))
    (request,) = result.run_requests
    ledger = defs.resources["rag"].engine().ledger
    graph = defs.resolve_asset_graph()
    pack = {k for k in graph.get_all_asset_keys() if k.path[0] == unique}
    for selection in ({k for k in pack if k.path[-1] in ("source_documents", "chunks")}, pack):
        job = defs.resolve_implicit_global_asset_job_def().get_subset(asset_selection=selection)
        run = job.execute_in_process(instance=instance, raise_on_error=False, tags=request.tags)
        tags = instance.get_run_by_id(run.run_id).tags
        expected = run_cost_tags(ledger.records(run_id=run.run_id))
        assert {k: tags.get(k) for k in expected} == expected, selection
    assert expected[CALLS_TAG] == str(len(ledger.records(run_id=run.run_id)))
