"""provider_swap_dry_run: the provider replacement dry run (rag_engine.ops.swap) as a Dagster job.

    ops:
      swap_dry_run:
        config: {role: embedding, candidate: text-embedding-3-small}
        # or: {role: generation, candidate_config: config/candidate.yaml}

It only reads: the report (identities, credential variable names, capability losses, pricing
gaps, rollback, re-index / re-extraction consequences, status) becomes the op's output metadata.
"""

from typing import Any

import dagster as dg

from rag_assets.resources import EngineResource


class SwapConfig(dg.Config):
    role: str = "generation"
    """generation | embedding | extraction | local_inference"""
    candidate: str = ""
    """A configured model name to put in place of the role's current model."""
    candidate_config: str = ""
    """Or a whole candidate engine config file (relative to the project root)."""


@dg.op(description="Compare the current provider of a role with a candidate, without changing anything.")
def swap_dry_run(context: dg.OpExecutionContext, config: SwapConfig, rag: EngineResource) -> dict[str, Any]:
    if not (config.candidate or config.candidate_config):
        raise dg.Failure(description="name a candidate: set candidate (a model name) or candidate_config (a file)")
    from rag_engine.ops.swap.dry_run import dry_run

    report = dry_run(
        rag.engine(),
        role=config.role,
        candidate=config.candidate or None,
        candidate_config=config.candidate_config or None,
    )
    data = report.model_dump(mode="json") if hasattr(report, "model_dump") else dict(report)
    status = str(data.get("status", "unknown"))
    (context.log.info if status == "ok" else context.log.warning)("swap dry run %s: %s", config.role, status)
    context.add_output_metadata(
        {
            "status": status,
            "role": config.role,
            "application_code_change_required": str(data.get("application_code_change_required", "unknown")),
            "report": dg.MetadataValue.json(data),
        }
    )
    return data


@dg.job(
    name="provider_swap_dry_run",
    tags={"cost": "free"},
    description="Provider replacement dry run for one role (see module docstring); changes nothing.",
)
def provider_swap_dry_run() -> None:
    swap_dry_run()
