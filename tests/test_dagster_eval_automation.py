"""When automation requests eval_report: on a fresh instance, and after a change only once every
upstream partition of it is written. Each tick is Dagster's own evaluator
(``dg.evaluate_automation_conditions``) with the previous tick's cursor, as the automation sensor
does; upstream runs are real runs of the pack's assets in the same instance: created (not started yet, so in
progress) and then executed. eval_report itself is never executed (it would answer the shipped
golden sets): the tests count its requests.
"""

from __future__ import annotations

from typing import Any

import dagster as dg
from dagster._core.definitions.job_base import InMemoryJob
from dagster._core.execution.api import execute_run

from rag_assets.definitions import build_definitions
from tests.test_dagster_automation import EVAL, Automation


def _tick(auto: Automation, defs: dg.Definitions) -> dict[str, Any]:
    """One automation tick: {asset key: requested partitions (or True)} for what it requested."""
    result = dg.evaluate_automation_conditions(
        defs=defs, instance=auto.instance, cursor=auto.cursor, asset_selection=auto.selection()
    )
    auto.cursor = result.cursor
    requested: dict[str, Any] = {}
    for key in defs.resolve_asset_graph().get_all_asset_keys():
        if result.get_num_requested(key):
            parts = result.get_requested_partitions(key)
            requested[key.to_user_string()] = sorted(p for p in parts if p) or True
    return requested


def _created_document_run(auto: Automation, defs: dg.Definitions) -> dg.DagsterRun:
    """The document sensor's run for the pack's new versions, created in the instance (in progress:
    not started, its materializations planned) but not executed yet."""
    sensor = defs.resolve_sensor_def(f"{auto.pack}__new_document_versions")
    result = sensor(dg.build_sensor_context(instance=auto.instance, resources={"rag": defs.resources["rag"]}))
    assert isinstance(result, dg.SensorResult), result
    for req in result.dynamic_partitions_requests or []:
        auto.instance.add_dynamic_partitions(auto.parts, list(req.partition_keys))
    (run_request,) = result.run_requests
    keys = {k for k in defs.resolve_asset_graph().get_all_asset_keys() if k.path[0] == auto.pack}
    return _created_run(auto, defs, keys, run_request.tags)


IN_PROCESS = {"execution": {"config": {"in_process": {}}}}
"""The default executor's in-process mode: the run executes in the test's process."""


def _created_run(auto: Automation, defs: dg.Definitions, keys: set[dg.AssetKey], tags: Any) -> dg.DagsterRun:
    """A run of these assets created in the instance (not started: in progress, its
    materializations planned), as a launcher creates it before a worker picks it up."""
    job = defs.resolve_implicit_global_asset_job_def().get_subset(asset_selection=keys)
    return auto.instance.create_run_for_job(
        job_def=job, tags=tags, asset_selection=frozenset(keys), run_config=IN_PROCESS
    )


def _execute(auto: Automation, defs: dg.Definitions, run: dg.DagsterRun) -> None:
    keys = set(run.asset_selection or ())
    job = defs.resolve_implicit_global_asset_job_def().get_subset(asset_selection=keys)
    result = execute_run(InMemoryJob(job), run, auto.instance)  # the created run itself, not a new one
    assert result.success, [e.message for e in result.all_events if e.is_failure]


def test_eval_report_is_requested_on_a_fresh_instance_once(variant, unique):
    """A fresh instance whose packs were ingested before automation ever ran (``make demo`` then
    ``make dev``): the first tick requests eval_report, so eval_gate is evaluated without a change;
    later ticks do not request it again. Before the fix its trigger (``newly_missing`` since last
    handled) was reset by the initial evaluation on the very tick it fired: never requested."""
    defs = build_definitions(variant("base"))
    auto = Automation(unique)
    _execute(auto, defs, _created_document_run(auto, defs))  # ingested, no automation tick yet

    assert _tick(auto, defs) == {"eval_report": True}
    assert _tick(auto, defs) == {}
    assert _tick(auto, defs) == {}


def test_eval_report_waits_for_an_upstream_run_in_progress(variant, unique):
    """A run writing the pack's partitions is in progress: the tick does not request eval_report
    (nor anything of the pack); after the run completes it does, once."""
    defs = build_definitions(variant("base"))
    auto = Automation(unique)
    assert _tick(auto, defs) == {"eval_report": True}  # fresh instance: the gate's first evaluation

    run = _created_document_run(auto, defs)
    assert _tick(auto, defs) == {}  # the run is in progress: no eval of a half-written change
    assert _tick(auto, defs) == {}
    _execute(auto, defs, run)
    assert _tick(auto, defs) == {"eval_report": True}  # every partition written: one eval
    assert _tick(auto, defs) == {}


def test_eval_report_is_not_requested_beside_the_graph_writes_it_gates(variant, unique):
    """A traversal-policy change requests graph_writes for every partition; eval_report is not
    requested on that tick (it would run beside the writes and judge the graph from before the
    change), and is requested once after they are written. Before the fix it was requested on the
    same tick (``any_deps_updated`` counts a dependency requested this tick)."""
    base = build_definitions(variant("base"))
    auto = Automation(unique)
    _tick(auto, base)
    _execute(auto, base, _created_document_run(auto, base))
    _tick(auto, base)  # the ingest's eval
    assert _tick(auto, base) == {}

    traversal = build_definitions(
        variant("traversal", edit=lambda s: s.replace('policy_version: "1"', 'policy_version: "2"'))
    )
    requested = _tick(auto, traversal)
    graph = f"{unique}/graph_writes"
    assert set(requested) == {graph}, requested
    assert len(requested[graph]) == len(auto.instance.get_dynamic_partitions(auto.parts))

    keys = requested[graph]
    range_tags = {"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]}
    run = _created_run(auto, traversal, {dg.AssetKey([unique, "graph_writes"])}, range_tags)
    assert _tick(auto, traversal) == {}  # graph_writes in progress: still no eval
    _execute(auto, traversal, run)
    assert _tick(auto, traversal) == {"eval_report": True}
    assert _tick(auto, traversal) == {}
    assert EVAL.to_user_string() == "eval_report"


def test_a_change_written_while_the_eval_runs_gets_its_own_eval(variant, unique):
    """eval_report is running when a new version is written: no eval beside it; when it ends
    (its materialization recorded, as its run records it) the change it may have missed is
    evaluated once. Before the fix the eval's own materialization reset the trigger (since last
    *handled*): the change was never evaluated (seen in the UI walk)."""
    defs = build_definitions(variant("base"))
    auto = Automation(unique)
    assert _tick(auto, defs) == {"eval_report": True}
    job = defs.resolve_implicit_global_asset_job_def().get_subset(asset_selection={EVAL})
    eval_run = auto.instance.create_run_for_job(
        job_def=job, asset_selection=frozenset({EVAL}), run_config=IN_PROCESS, status=dg.DagsterRunStatus.STARTED
    )
    assert _tick(auto, defs) == {}  # the eval runs (for many ticks)
    _execute(auto, defs, _created_document_run(auto, defs))  # written while the eval runs
    assert _tick(auto, defs) == {}  # eval_report in progress: not beside itself
    auto.instance.report_runless_asset_event(dg.AssetMaterialization(EVAL))  # the eval writes its report ...
    auto.instance.report_run_canceled(eval_run)  # ... and its run ends
    assert _tick(auto, defs) == {"eval_report": True}
    assert _tick(auto, defs) == {}
