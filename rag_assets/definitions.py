"""The one Definitions object, plus project-wide policy.

Loading validates the config and the provider registry: a bad config or registry stops the code
location with the typed error (every pack would be wrong). A pack that fails to load on its own
is left out: its assets are absent, domain_packs fails its ``packs_loaded`` check with the typed
error, and the other packs' assets, sensors, the automation sensor and the nightly schedule run.

What the ``dg`` defs folder holds (``rag_assets/defs``, where ``dg scaffold defs`` writes) is merged
in: ``[tool.dg]`` in pyproject.toml declares this project, and that folder is its ``defs_module``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import dagster as dg

from rag_assets.approval_status import build_approval_sensor
from rag_assets.assets.audit_summary import audit_daily_summary
from rag_assets.assets.evals import build_eval_assets
from rag_assets.assets.graph_quality import graph_quality, graph_quality_job, nightly_graph_quality
from rag_assets.assets.ingestion import build_ingestion_assets
from rag_assets.assets.packs_summary import build_domain_packs
from rag_assets.assets.usage_costs import usage_costs
from rag_assets.automation import automation_sensor
from rag_assets.backfill_costs import backfill_costs_sensor
from rag_assets.cleanup import graph_cleanup
from rag_assets.jobs import ingestion_job
from rag_assets.resources import EngineResource, broken_packs, engine_for
from rag_assets.sensors import build_document_sensor
from rag_assets.swap import provider_swap_dry_run
from rag_engine import DEFAULT_CONFIG
from rag_engine.config import slice_hash
from rag_engine.engine import project_root

if TYPE_CHECKING:  # define_asset_job's return type, which dagster does not export
    from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition


def build_definitions(config_path: str | None = None) -> dg.Definitions:
    config_path = config_path or os.environ.get("RAG_CONFIG", DEFAULT_CONFIG)
    engine = engine_for(config_path)  # raises ConfigError / RegistryError subclasses
    broken = broken_packs(config_path)
    packs_version = slice_hash("packs-v1", {n: p.manifest.version for n, p in engine.packs.items()}, broken)
    assets: list[dg.AssetsDefinition] = [
        build_domain_packs(packs_version),
        usage_costs,
        audit_daily_summary,
        graph_quality,
    ]
    jobs: list[dg.JobDefinition | UnresolvedAssetJobDefinition] = [
        graph_quality_job,
        graph_cleanup,
        provider_swap_dry_run,
    ]
    sensors: list[dg.SensorDefinition] = [automation_sensor()]
    for pack in engine.packs.values():
        assets += build_ingestion_assets(engine, pack, config_path)
        job = ingestion_job(pack.name)
        jobs.append(job)
        sensors.append(build_document_sensor(pack.name, job))
    sensors.append(build_approval_sensor(list(engine.packs)))
    sensors.append(backfill_costs_sensor())
    graph_keys = [dg.AssetKey([p, step]) for p in engine.packs for step in ("chunk_index", "graph_writes")]
    eval_report, eval_gate = build_eval_assets(graph_keys, engine, config_path)
    assets.append(eval_report)
    built = dg.Definitions(
        assets=assets,
        asset_checks=[eval_gate],
        jobs=jobs,
        sensors=sensors,
        schedules=[nightly_graph_quality],
        resources={"rag": EngineResource(config_path=config_path)},
    )
    # the dg defs folder (rag_assets/defs, what `dg scaffold defs` writes; named by the project
    # root's [tool.dg], as `dg` reads it), merged with the built ones
    return dg.Definitions.merge(built, dg.load_from_defs_folder(path_within_project=project_root()))


defs = build_definitions()
