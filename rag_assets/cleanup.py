"""graph_cleanup: remove stale graph paths, only with an explicit approval in the run config.

    ops:
      cleanup_stale_paths:
        config: {approved_by: "jane@company", reason: "superseded GDPR versions after re-ingest"}

Without approved_by and reason the run fails before anything is deleted. dry_run counts only.
"""

from typing import Any

import dagster as dg

from rag_assets.resources import EngineResource
from rag_engine.graph.cleanup import Approval, plan_cleanup, run_cleanup


class CleanupConfig(dg.Config):
    approved_by: str = ""
    reason: str = ""
    dry_run: bool = False


@dg.op(description="Delete dangling edges, stale mentions, superseded chunks and orphan entities.")
def cleanup_stale_paths(context: dg.OpExecutionContext, config: CleanupConfig, rag: EngineResource) -> dict[str, Any]:
    engine = rag.engine()
    packs = sorted(engine.packs)
    would = plan_cleanup(engine.driver, engine.database, packs)
    context.log.info("would remove: %s", would)
    if config.dry_run:
        return {"dry_run": True, "would_remove": would}
    if not (config.approved_by.strip() and config.reason.strip()):
        raise dg.Failure(
            description="graph cleanup deletes data and needs an approval: set approved_by and "
            "reason in the op config. Nothing was deleted.",
            metadata={"would_remove": dg.MetadataValue.json(would)},
        )
    result = run_cleanup(
        engine.driver,
        engine.database,
        packs,
        Approval(approved_by=config.approved_by, reason=config.reason),
        run_id=context.run_id,
    )
    context.add_output_metadata(
        {
            "removed": dg.MetadataValue.json(result["removed"]),
            "approved_by": result["approved_by"],
            "reason": result["reason"],
        }
    )
    return result


@dg.job(name="graph_cleanup", description="Approved removal of stale graph paths (see module docstring).")
def graph_cleanup() -> None:
    cleanup_stale_paths()
