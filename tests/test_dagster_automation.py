"""The rollout rules as automation: change the config, let the automation tick, run what it
requested, and assert which assets ran, in which order, and how many model calls they made.

Each tick is Dagster's own evaluator (``dg.evaluate_automation_conditions``) with the cursor of
the previous tick, as the automation sensor does; the requested assets of the throwaway pack
are then executed in one run (Dagster orders them by their dependencies). eval_report is only
asserted as requested: running it would answer the shipped golden sets.
"""

from __future__ import annotations

import logging

import dagster as dg

from rag_assets.definitions import build_definitions

RANGE = ("dagster/asset_partition_range_start", "dagster/asset_partition_range_end")
EVAL = dg.AssetKey("eval_report")


class Automation:
    """One instance, a cursor carried from tick to tick, and a log of (tick, assets run in order)."""

    def __init__(self, pack: str):
        self.pack = pack
        self.instance = dg.DagsterInstance.ephemeral()
        self.cursor = None
        self.parts = f"{pack}__document_versions"

    def selection(self) -> dg.AssetSelection:
        return dg.AssetSelection.key_prefixes([self.pack]) | dg.AssetSelection.assets(EVAL)

    def tick(self, defs: dg.Definitions) -> tuple[list[str], bool]:
        """Evaluate once and execute what was requested for the pack: (steps run in order,
        eval_report requested)."""
        result = dg.evaluate_automation_conditions(
            defs=defs, instance=self.instance, cursor=self.cursor, asset_selection=self.selection()
        )
        self.cursor = result.cursor
        keys = [
            k
            for k in defs.resolve_asset_graph().get_all_asset_keys()
            if k.path[0] == self.pack and result.get_num_requested(k)
        ]
        wants_eval = result.get_num_requested(EVAL) > 0
        if not keys:
            return [], wants_eval
        partitions = sorted({p for k in keys for p in result.get_requested_partitions(k)})
        order = list(self.instance.get_dynamic_partitions(self.parts))
        ordered = [p for p in order if p in partitions]
        job = defs.resolve_implicit_global_asset_job_def().get_subset(asset_selection=set(keys))
        run = job.execute_in_process(
            instance=self.instance,
            resources=None,
            raise_on_error=False,
            tags={RANGE[0]: ordered[0], RANGE[1]: ordered[-1]},
        )
        assert run.success, [e.message for e in run.all_events if e.is_failure]
        steps: list[str] = []
        for event in run.get_asset_materialization_events():
            step = event.asset_key.path[-1]
            if step not in steps:
                steps.append(step)
        return steps, wants_eval

    def document_tick(self, defs: dg.Definitions) -> list[str]:
        """The document sensor's tick: its partitions added, its run executed (steps run in order)."""
        sensor = defs.resolve_sensor_def(f"{self.pack}__new_document_versions")
        result = sensor(dg.build_sensor_context(instance=self.instance, resources={"rag": defs.resources["rag"]}))
        assert isinstance(result, dg.SensorResult), result
        for req in result.dynamic_partitions_requests or []:
            self.instance.add_dynamic_partitions(self.parts, list(req.partition_keys))
        (run_request,) = result.run_requests
        # as the daemon runs it: the sensor's job with the request's own asset selection (None: the
        # whole job, and a run record without an asset selection)
        job = defs.resolve_job_def(f"{self.pack}__ingest")
        run = job.execute_in_process(
            instance=self.instance,
            raise_on_error=False,
            tags=run_request.tags,
            asset_selection=run_request.asset_selection,
        )
        assert run.success, [e.message for e in run.all_events if e.is_failure]
        steps: list[str] = []
        for event in run.get_asset_materialization_events():
            if event.asset_key.path[-1] not in steps:
                steps.append(event.asset_key.path[-1])
        return steps

    def settle(self, defs: dg.Definitions, wants_eval: bool) -> bool:
        """Ticks after a run: nothing of the pack runs again, and eval_report is requested once,
        with the run's assets or on the tick after their materializations (returns whether it was)."""
        steps, later = self.tick(defs)
        assert steps == []
        if wants_eval:
            assert not later
        evals = wants_eval or later
        assert self.tick(defs) == ([], False)
        return evals


def _calls(defs: dg.Definitions) -> int:
    return len(defs.resources["rag"].engine().ledger.records())


def _priced_chat(text: str) -> str:
    """demo-chat (replay) priced like gpt-4o-mini: extraction and evals become paid work."""
    block = (
        "    served_model: fixture-demo-replay\n"
        "    context_limit: 128000\n"
        "    capabilities: [generation, structured_output]\n"
    )
    assert block in text
    return text.replace(block, block + "    pricing_ref: gpt-4o-mini\n")


def _limit(usd: int):
    return lambda text: text.replace("  max_auto_cost_usd: 0 ", f"  max_auto_cost_usd: {usd} ")


def first_tick(auto: Automation, defs: dg.Definitions) -> None:
    """A fresh instance's first tick: nothing of the pack (no partition yet), and eval_report, never
    materialized, once (its gate evaluates without waiting for a change); the next tick nothing."""
    assert auto.tick(defs) == ([], True)
    assert auto.tick(defs) == ([], False)


def _ingest_new_documents(auto: Automation, defs: dg.Definitions) -> list[str]:
    """New document versions flow through: the first tick knows no partition; the document sensor
    adds them and runs the whole chain; automation requests nothing of the pack after it, and the
    eval once."""
    first_tick(auto, defs)
    steps = auto.document_tick(defs)
    _, wants_eval = auto.tick(defs)
    assert auto.settle(defs, wants_eval)
    return steps


def test_rollout_rules_free_changes_flow_through_in_order(variant, unique):
    base = build_definitions(variant("base"))
    auto = Automation(unique)
    steps = _ingest_new_documents(auto, base)
    assert steps == ["source_documents", "chunks", "references", "chunk_index", "llm_extraction", "graph_writes"] or (
        steps[:2] == ["source_documents", "chunks"] and steps[-1] == "graph_writes" and len(steps) == 6
    )

    # traversal policy: a graph rebuild, then the eval; no model call at all
    traversal = build_definitions(
        variant("traversal", edit=lambda s: s.replace('policy_version: "1"', 'policy_version: "2"'))
    )
    before = _calls(traversal)
    steps, wants_eval = auto.tick(traversal)
    assert steps == ["graph_writes"]
    assert auto.settle(traversal, wants_eval)
    assert _calls(traversal) == before

    # pack rules (manifest version): the stale assets, then every dependent, in dependency order;
    # the demo extraction model is a local replay (free), so it runs by itself too
    bumped = build_definitions(
        variant(
            "bumped", manifest_version="1.0.1", edit=lambda s: s.replace('policy_version: "1"', 'policy_version: "2"')
        )
    )
    steps, wants_eval = auto.tick(bumped)
    assert steps[0] == "chunks" and steps[-1] == "graph_writes"
    assert set(steps) == {"chunks", "references", "chunk_index", "llm_extraction", "graph_writes"}
    assert auto.settle(bumped, wants_eval)


def test_paid_work_waits_for_approval_above_the_cost_limit(variant, unique, caplog):
    priced = build_definitions(variant("priced", edit=_priced_chat))
    auto = Automation(unique)
    with caplog.at_level(logging.WARNING):
        steps = _ingest_new_documents_paid(auto, priced)
    # the condition logs the estimate behind "awaiting approval" on the evaluation's logger (the
    # automation sensor's tick logs in the UI): the figures extraction_estimate gives, and the limit
    from rag_assets.automation import extraction_estimate

    engine = priced.resources["rag"].engine()
    estimate = extraction_estimate(engine, unique, list(auto.instance.get_dynamic_partitions(auto.parts)))
    waiting = {r.getMessage() for r in caplog.records if r.name.endswith(".CostWithinLimit")}
    assert waiting == {
        f"{unique}/llm_extraction awaiting approval: estimated cost ${estimate['cost_usd']:.4f} for 3 calls of "
        f"demo-chat ({estimate['input_tokens']} input + {estimate['output_tokens']} output tokens, "
        f"{estimate['tokens_from']}) > automation.max_auto_cost_usd $0.0; materialize it with approved_by and "
        "reason to approve"
    }, waiting
    assert estimate["cost_usd"] > 0 and estimate["tokens_from"].startswith("no ledger history")
    # new documents: free steps run; extraction (priced) waits, and so does the graph built on it
    assert steps == ["source_documents", "chunks", "references", "chunk_index"] or set(steps) == {
        "source_documents",
        "chunks",
        "references",
        "chunk_index",
    }
    assert auto.tick(priced) == ([], False)  # still awaiting approval: nothing runs, no eval

    # the operator raises the limit (or materializes llm_extraction): the paid step runs, then the graph
    approved = build_definitions(variant("approved", edit=lambda s: _limit(1000)(_priced_chat(s))))
    steps, wants_eval = auto.tick(approved)
    assert steps == ["llm_extraction", "graph_writes"]
    assert auto.settle(approved, wants_eval)


def _ingest_new_documents_paid(auto: Automation, defs: dg.Definitions) -> list[str]:
    first_tick(auto, defs)
    steps = auto.document_tick(defs)  # the sensor's run leaves the priced extraction out
    steps_after, wants_eval = auto.tick(defs)
    assert steps_after == [] and not wants_eval  # extraction awaits approval, the graph and eval wait for it
    assert auto.tick(defs) == ([], False)
    return steps


def test_materializing_paid_work_above_the_limit_needs_an_approval(variant, unique):
    """The operator's approval of paid work is the one approval path: a run above the limit without
    approved_by/reason fails before any model call; with them it runs; both are audit records."""
    from rag_engine.governance.audit import audit_trail

    priced = build_definitions(variant("priced-approval", edit=_priced_chat))
    auto = Automation(unique)
    _ingest_new_documents_paid(auto, priced)  # free steps ran; extraction awaits approval
    key = dg.AssetKey([unique, "llm_extraction"])
    parts = list(auto.instance.get_dynamic_partitions(auto.parts))
    job = priced.resolve_implicit_global_asset_job_def().get_subset(asset_selection={key})
    tags = {RANGE[0]: parts[0], RANGE[1]: parts[-1]}
    engine = priced.resources["rag"].engine()
    trail = audit_trail(engine)

    def mine(event: str) -> list:
        return [r for r in trail.records(event=event) if r.payload.get("action") == "paid_automation"]

    refused_before, calls_before = len(mine("approval_refused")), _calls(priced)
    run = job.execute_in_process(instance=auto.instance, raise_on_error=False, tags=tags)
    assert not run.success
    failure = next(e for e in run.all_events if e.is_step_failure).event_specific_data
    # one line an operator can act on, with the hash to approve and the estimate behind it
    assert failure.user_failure_data.description.startswith("llm_extraction: awaiting approval: paid_automation")
    meta = {k: v.value for k, v in failure.user_failure_data.metadata.items()}
    assert meta["error_type"] == "ApprovalRequired" and len(meta["inputs_hash"]) == 64
    assert meta["estimate_calls"] == 3 and meta["estimate_cost_usd"] > 0
    assert _calls(priced) == calls_before  # refused before any model call
    refused = mine("approval_refused")[refused_before:]
    assert len(refused) == 1 and refused[0].payload["refused"].startswith("ApprovalRequired")

    config = {"approved_by": "jane", "reason": "new policy documents", "inputs_hash": meta["inputs_hash"]}
    run = job.execute_in_process(
        instance=auto.instance,
        raise_on_error=False,
        tags=tags,
        run_config={"ops": {f"{unique}__llm_extraction": {"config": config}}},
    )
    assert run.success, [e.message for e in run.all_events if e.is_failure]
    assert _calls(priced) > calls_before
    granted = mine("approval_granted")[-1]
    # recorded like the CLI's: a typed name marked unauthenticated, the run id kept (#38 item 8)
    assert granted.actor == "local:jane" and granted.payload["inputs_hash"] == meta["inputs_hash"]
    assert granted.payload["run_id"] == run.run_id


def _approval_status(defs: dg.Definitions, auto: Automation, cursor: str | None = None):
    sensor = defs.resolve_sensor_def("paid_work_approval_status")
    ctx = dg.build_sensor_context(instance=auto.instance, resources={"rag": defs.resources["rag"]}, cursor=cursor)
    return sensor(ctx)


def test_paid_work_awaiting_approval_is_a_warn_check_on_the_asset(variant, unique):
    """What the operator sees in the UI: the llm_extraction asset's approval_status check fails at
    WARN with the partitions, estimate, limit and inputs hash while automation holds the work, the
    approved run clears it, and the sensor writes an event only when the state changes."""
    from rag_assets.automation import extraction_estimate, paid_inputs
    from rag_engine.governance.approvals import inputs_hash

    priced = build_definitions(variant("priced-status", edit=_priced_chat))
    auto = Automation(unique)
    _ingest_new_documents_paid(auto, priced)
    result = _approval_status(priced, auto)
    mine = [e for e in result.asset_events if e.asset_key == dg.AssetKey([unique, "llm_extraction"])]
    (waiting,) = mine
    parts = list(auto.instance.get_dynamic_partitions(auto.parts))
    estimate = extraction_estimate(priced.resources["rag"].engine(), unique, parts)
    assert not waiting.passed and waiting.severity == dg.AssetCheckSeverity.WARN
    assert waiting.description.startswith(f"Awaiting approval: {len(parts)} partition(s), estimated $")
    meta = {k: v.value for k, v in waiting.metadata.items()}
    assert meta["partitions_waiting"] == len(parts) and meta["estimate_calls"] == estimate["calls"]
    assert meta["inputs_hash"] == inputs_hash(paid_inputs(f"{unique}/llm_extraction", parts, estimate))
    assert meta["limit_usd"] == 0.0
    for event in result.asset_events:  # what the daemon does with a sensor's asset events
        auto.instance.report_runless_asset_event(event)
    assert isinstance(_approval_status(priced, auto, result.cursor), dg.SkipReason)  # unchanged: no new event

    # the operator approves (with the hash the check showed): the run clears the check
    key = dg.AssetKey([unique, "llm_extraction"])
    job = priced.resolve_implicit_global_asset_job_def().get_subset(asset_selection={key})
    config = {"approved_by": "jane", "reason": "new policy documents", "inputs_hash": meta["inputs_hash"]}
    run = job.execute_in_process(
        instance=auto.instance,
        raise_on_error=False,
        tags={RANGE[0]: parts[0], RANGE[1]: parts[-1]},
        run_config={"ops": {f"{unique}__llm_extraction": {"config": config}}},
    )
    assert run.success, [e.message for e in run.all_events if e.is_failure]
    (cleared,) = [c for c in run.get_asset_check_evaluations() if c.check_name == "approval_status"]
    assert cleared.passed and cleared.description == "Approved by jane: new policy documents"


PLATFORM = [dg.AssetKey(k) for k in ("domain_packs", "usage_costs", "graph_quality", "audit_daily_summary")]


def test_platform_assets_run_once_on_a_fresh_instance(variant):
    """No upstream change and no cron tick yet: a fresh instance still materializes each platform
    asset once (domain_packs with its packs_loaded check), then leaves them to their triggers."""
    from datetime import UTC, datetime, timedelta

    defs = build_definitions(variant("platform"))
    instance = dg.DagsterInstance.ephemeral()
    # ticks at xx:30 an hour ago, a minute apart: no cron of theirs (hourly, 00:15, 03:00) passes between
    at = datetime.now(UTC).replace(minute=30, second=0, microsecond=0) - timedelta(hours=1)
    selection = dg.AssetSelection.assets(*PLATFORM)
    first = dg.evaluate_automation_conditions(
        defs=defs, instance=instance, asset_selection=selection, evaluation_time=at
    )
    assert {k.to_user_string(): first.get_num_requested(k) for k in PLATFORM} == {
        "domain_packs": 1,
        "usage_costs": 1,
        "graph_quality": 1,
        "audit_daily_summary": 1,
    }
    job = defs.resolve_implicit_global_asset_job_def().get_subset(asset_selection=set(PLATFORM))
    run = job.execute_in_process(instance=instance, raise_on_error=False)  # a blocking graph check may fail
    assert {e.asset_key for e in run.get_asset_materialization_events()} == set(PLATFORM)
    checks = {
        e.asset_check_evaluation_data.check_name: e.asset_check_evaluation_data.passed
        for e in run.all_events
        if e.event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION
    }
    assert checks["packs_loaded"] is True

    cursor = first.cursor
    for minutes in (1, 2):
        later = dg.evaluate_automation_conditions(
            defs=defs,
            instance=instance,
            asset_selection=selection,
            cursor=cursor,
            evaluation_time=at + timedelta(minutes=minutes),
        )
        cursor = later.cursor
        assert later.total_requested == 0, {k.to_user_string(): later.get_num_requested(k) for k in PLATFORM}


def test_rerun_of_cached_extraction_needs_no_approval_under_a_priced_model(variant, unique, tmp_path):
    """A rules change re-runs extraction; every answer is in the extraction cache, so the priced
    model makes no call, costs nothing and is not held for approval (max_auto_cost_usd 0)."""
    from tests.support.packs import extraction_cassette

    cassette = tmp_path / "cassette.jsonl"

    def replay(text: str) -> str:
        return text.replace("cassette: evals/cassettes/demo.jsonl", f"cassette: {cassette}")

    base = build_definitions(variant("base", edit=replay))
    engine = base.resources["rag"].engine()
    extraction_cassette(engine, engine.pack(unique), cassette)
    auto = Automation(unique)
    _ingest_new_documents(auto, base)  # the free replay extracts every chunk once: all cached

    def extraction_calls() -> int:
        return sum(1 for r in engine.ledger.records() if r.purpose == "graph_extraction")

    before = extraction_calls()
    bumped = build_definitions(
        variant("bumped-priced", manifest_version="1.0.1", edit=lambda s: _priced_chat(replay(s)))
    )
    steps, wants_eval = auto.tick(bumped)
    assert set(steps) == {"chunks", "references", "chunk_index", "llm_extraction", "graph_writes"}
    assert extraction_calls() == before  # every chunk answered from the cache
    assert auto.settle(bumped, wants_eval)  # and the eval, extractive, is free too


def test_a_cancelled_new_version_run_is_not_picked_up_by_automation(variant, unique):
    """The sensor's run of new versions stopped after chunks (an operator cancelled it): the
    chunks it wrote are updated deps of references/chunk_index, yet automation does not run those
    free steps on the never-written partitions; the operator decides."""
    base = build_definitions(variant("base"))
    auto = Automation(unique)
    first_tick(auto, base)  # automation was running before the new versions came
    sensor = base.resolve_sensor_def(f"{unique}__new_document_versions")
    result = sensor(dg.build_sensor_context(instance=auto.instance, resources={"rag": base.resources["rag"]}))
    assert isinstance(result, dg.SensorResult), result
    for req in result.dynamic_partitions_requests or []:
        auto.instance.add_dynamic_partitions(auto.parts, list(req.partition_keys))
    (run_request,) = result.run_requests
    cut = {dg.AssetKey([unique, "source_documents"]), dg.AssetKey([unique, "chunks"])}
    job = base.resolve_implicit_global_asset_job_def().get_subset(asset_selection=cut)
    run = job.execute_in_process(instance=auto.instance, raise_on_error=False, tags=run_request.tags)
    assert run.success
    # the free steps (the embedding work of the ADGM run) stay untouched; the extraction
    # under the cost limit is still eligible (paid_step may run on never-written partitions)
    steps, _ = auto.tick(base)
    assert not {"references", "chunk_index"} & set(steps), steps


def test_only_the_demo_packs_document_sensors_run_by_default(monkeypatch):
    """``make dev`` after ``make demo``: the demo packs' sensors run, any other pack's starts stopped."""
    monkeypatch.delenv("DEMO_PACKS", raising=False)
    defs = build_definitions()
    status = {s.name: s.default_status.value for s in defs.sensors if s.name.endswith("__new_document_versions")}
    assert status == {
        "adgm_rulebooks__new_document_versions": "STOPPED",
        "company_x_kb__new_document_versions": "RUNNING",
        "legal_regulatory__new_document_versions": "RUNNING",
    }


def test_the_new_version_run_names_every_step_it_writes(variant, unique):
    """The document sensor's run names its assets: automation's ``executed_with_root_target``
    reads the run's asset selection, so a run without one (the whole job) made the steps it wrote
    look like updated deps of the steps after them, and automation ran ``graph_writes`` of the new
    version again after the sensor's run had written it (seen in the UI walk: a second run on the
    new partition). Before the fix the request had no asset selection."""
    base = build_definitions(variant("base"))
    auto = Automation(unique)
    sensor = base.resolve_sensor_def(f"{unique}__new_document_versions")
    result = sensor(dg.build_sensor_context(instance=auto.instance, resources={"rag": base.resources["rag"]}))
    assert isinstance(result, dg.SensorResult), result
    (run_request,) = result.run_requests
    pack_keys = {k for k in base.resolve_asset_graph().get_all_asset_keys() if k.path[0] == unique}
    assert set(run_request.asset_selection or ()) == pack_keys
