"""graph_cleanup: remove stale graph paths, only with an approval in the run config bound to the
plan its dry run printed (the engine's one approval rule: ``rag_assets.approval``).

    # 1. dry run: counts what would go and prints the inputs_hash
    ops: {cleanup_stale_paths: {config: {dry_run: true}}}
    # 2. approve exactly that plan
    ops:
      cleanup_stale_paths:
        config: {approved_by: "jane", reason: "superseded GDPR versions after re-ingest",
                 inputs_hash: "<64 hex from the dry run>"}
        # with principals configured, also key_file: <file holding the operator's key>

Without an approval bound to the current plan the run fails before anything is deleted, and the
refusal is in the audit trail (``approval_refused``) like the CLI's; an approval is recorded as
``approval_granted`` with the approver (``local:<name>`` without principals) and the run id.
"""

from typing import Any

import dagster as dg

from rag_assets.approval import RunApproval, run_approval
from rag_assets.resources import EngineResource
from rag_engine.errors import ApprovalError, Forbidden, Unauthenticated
from rag_engine.governance.approvals import GRAPH_CLEANUP, inputs_hash
from rag_engine.governance.audit import audit_trail
from rag_engine.graph.cleanup import cleanup_inputs, run_cleanup


class CleanupConfig(RunApproval):
    dry_run: bool = False


@dg.op(description="Delete dangling edges, stale mentions, superseded chunks and orphan entities.")
def cleanup_stale_paths(context: dg.OpExecutionContext, config: CleanupConfig, rag: EngineResource) -> dict[str, Any]:
    engine = rag.engine()
    packs = sorted(engine.packs)
    inputs = cleanup_inputs(engine.driver, engine.database, packs)
    would, digest = inputs["plan"], inputs_hash(inputs)
    context.log.info("would remove: %s (inputs_hash %s)", would, digest)
    if config.dry_run:
        context.add_output_metadata({"would_remove": dg.MetadataValue.json(would), "inputs_hash": digest})
        return {"dry_run": True, "would_remove": would, "inputs_hash": digest}
    try:
        approval, actor = run_approval(
            engine,
            config,
            action=GRAPH_CLEANUP,
            run_id=context.run_id,
            command="graph_cleanup (Dagster)",
            tags=context.run.tags,
        )
        result = run_cleanup(
            engine.driver,
            engine.database,
            packs,
            approval,
            run_id=context.run_id,
            audit=audit_trail(engine),
            actor=actor,
        )
    except (ApprovalError, Unauthenticated, Forbidden) as exc:
        raise dg.Failure(
            description=f"{type(exc).__name__}: {exc}. Set approved_by, reason and the dry run's inputs_hash "
            "in the op config (and key_file when principals are configured).",
            metadata={"would_remove": dg.MetadataValue.json(would), "inputs_hash": digest},
        ) from None
    context.add_output_metadata(
        {
            "removed": dg.MetadataValue.json(result["removed"]),
            "approved_by": result["approved_by"],
            "reason": result["reason"],
            "inputs_hash": result["inputs_hash"],
        }
    )
    return result


@dg.job(name="graph_cleanup", description="Approved removal of stale graph paths (see module docstring).")
def graph_cleanup() -> None:
    cleanup_stale_paths()
