"""Paid work awaiting approval, shown where an operator looks: a WARN check on the asset.

Automation holds paid work above ``automation.max_auto_cost_usd`` (``CostWithinLimit``), but
Dagster renders nothing of a custom condition's figures: the asset's evaluation list says "Not
requested" and the estimate was only in the code server's log. This sensor publishes the state
as the ``approval_status`` check of each pack's ``llm_extraction`` (``SensorResult.asset_events``):
failing at WARN with the partitions waiting, the estimate, the limit, the inputs hash an approval
binds and how to approve; passing when nothing waits. An event is written only when the state
changes (the cursor holds its digest), so the check's history is the history of approvals needed.
The asset's own run reports the check too: "approved by ..." or "within the limit".
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import dagster as dg

from rag_assets.automation import extraction_estimate, paid_inputs, within_limit
from rag_assets.failures import skip_reason
from rag_assets.partitions import document_versions, partitions_name
from rag_assets.resources import EngineResource
from rag_engine.engine import Engine
from rag_engine.governance.approvals import inputs_hash
from rag_engine.ingest.code_versions import code_versions
from rag_engine.ingest.stamps import read_stamps
from rag_engine.packs import DomainPack
from rag_engine.store.connection import probe_store

CHECK = "approval_status"
DESCRIPTION = (
    "WARN while paid extraction awaits an operator's approval (estimate above automation.max_auto_cost_usd): "
    "the partitions, the estimate, the limit, the inputs hash and how to approve."
)


def check_spec(key: dg.AssetKey) -> dg.AssetCheckSpec:
    return dg.AssetCheckSpec(CHECK, asset=key, description=DESCRIPTION)


def waiting_partitions(engine: Engine, pack: DomainPack, partitions: list[str]) -> list[str]:
    """Partitions whose chunks are written at the current rules but whose extraction is not done
    at the current code version: what ``llm_extraction`` would do next."""
    stamps = read_stamps(engine.driver, engine.database, pack.name)
    versions = code_versions(engine, pack)
    return [
        k
        for k in partitions
        if stamps.get(k, {}).get("chunks") == versions["chunks"]
        and stamps.get(k, {}).get("llm_extraction") != versions["llm_extraction"]
    ]


def pack_status(engine: Engine, pack: DomainPack, partitions: list[str]) -> dg.AssetCheckEvaluation:
    key = dg.AssetKey([pack.name, "llm_extraction"])
    waiting = waiting_partitions(engine, pack, partitions)
    if not waiting:
        return dg.AssetCheckEvaluation(
            asset_key=key,
            check_name=CHECK,
            passed=True,
            severity=dg.AssetCheckSeverity.WARN,
            description="No extraction is waiting.",
        )
    estimate = extraction_estimate(engine, pack.name, waiting)
    limit = engine.cfg.automation.max_auto_cost_usd
    if within_limit(engine, estimate):
        return dg.AssetCheckEvaluation(
            asset_key=key,
            check_name=CHECK,
            passed=True,
            severity=dg.AssetCheckSeverity.WARN,
            description=f"{len(waiting)} partition(s) to extract, within the limit (${limit}): automation runs them.",
            metadata={"partitions_waiting": len(waiting), "estimate_cost_usd": estimate["cost_usd"]},
        )
    digest = inputs_hash(paid_inputs(key.to_user_string(), waiting, estimate))
    cost = (
        "unknown (a hosted model without a price)" if estimate["cost_usd"] is None else f"${estimate['cost_usd']:.4f}"
    )
    return dg.AssetCheckEvaluation(
        asset_key=key,
        check_name=CHECK,
        passed=False,
        severity=dg.AssetCheckSeverity.WARN,
        description=(
            f"Awaiting approval: {len(waiting)} partition(s), estimated {cost} for {estimate['calls']} call(s) of "
            f"{estimate['model']} > automation.max_auto_cost_usd ${limit}. Approve by materializing "
            f"{key.to_user_string()} with run config approved_by and reason (inputs_hash {digest[:12]}... binds "
            "this estimate)."
        ),
        metadata={
            "partitions_waiting": len(waiting),
            "first_partition": waiting[0],
            "last_partition": waiting[-1],
            "estimate_cost_usd": estimate["cost_usd"],
            "estimate_calls": estimate["calls"],
            "estimate_input_tokens": estimate["input_tokens"],
            "estimate_output_tokens": estimate["output_tokens"],
            "tokens_from": estimate["tokens_from"],
            "model": str(estimate["model"]),
            "limit_usd": float(limit),
            "inputs_hash": digest,
            "how_to_approve": dg.MetadataValue.md(
                f"Materialize `{key.to_user_string()}` for partitions `{waiting[0]}` ... `{waiting[-1]}` with run "
                f'config:\n\n```yaml\nops:\n  {key.to_python_identifier()}:\n    config:\n      approved_by: "<you>"\n'
                f'      reason: "<why>"\n      inputs_hash: "{digest}"\n```'
            ),
        },
    )


def _digest(events: list[dg.AssetCheckEvaluation]) -> str:
    state: list[Any] = []
    for e in events:
        digest = e.metadata.get("inputs_hash")
        state.append((e.asset_key.to_user_string(), e.passed, e.description, getattr(digest, "value", None)))
    return hashlib.sha256(json.dumps(state, default=str).encode()).hexdigest()


def build_approval_sensor(pack_names: list[str]) -> dg.SensorDefinition:
    @dg.sensor(
        name="paid_work_approval_status",
        minimum_interval_seconds=60,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Publishes each pack's llm_extraction approval_status check: WARN while paid extraction "
        "awaits approval (estimate, limit, inputs hash, how to approve).",
    )
    def _sensor(context: dg.SensorEvaluationContext, rag: EngineResource) -> dg.SensorResult | dg.SkipReason:
        engine = rag.engine()
        events: list[dg.AssetCheckEvaluation] = []
        for name in pack_names:
            pack = engine.packs.get(name)
            if pack is None or not pack.entry.extraction:
                continue
            partitions = list(context.instance.get_dynamic_partitions(partitions_name(document_versions(name))))
            try:  # the document sensors' path: a probe first, a typed error or stopped store as one line
                if not events:
                    probe_store(engine.neo4j_target, engine.env)
                events.append(pack_status(engine, pack, partitions))
            except Exception as exc:
                skipped = skip_reason(f"paid_work_approval_status ({name})", exc)
                if skipped is None:
                    raise
                return skipped
        digest = _digest(events)
        if digest == context.cursor:
            return dg.SkipReason("approval status unchanged")
        return dg.SensorResult(asset_events=events, cursor=digest)

    return _sensor
