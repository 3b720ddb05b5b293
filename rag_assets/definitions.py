"""The one Definitions object. Loading validates the config and the provider registry:
a bad config stops the code location with the typed error, not a half-working UI."""

from __future__ import annotations

import os

import dagster as dg

from rag_assets.assets.ingestion import build_ingestion_assets
from rag_assets.assets.evals import build_eval_assets
from rag_assets.assets.graph_quality import graph_quality, graph_quality_job, nightly_graph_quality
from rag_assets.assets.packs_summary import domain_packs
from rag_assets.cleanup import graph_cleanup
from rag_assets.assets.usage_costs import usage_costs
from rag_assets.jobs import ingestion_job
from rag_assets.resources import EngineResource
from rag_assets.sensors import build_document_sensor
from rag_engine.engine import DEFAULT_CONFIG, Engine


def build_definitions(config_path: str | None = None) -> dg.Definitions:
    config_path = config_path or os.environ.get("RAG_CONFIG", DEFAULT_CONFIG)
    engine = Engine.from_path(config_path)  # raises ConfigError / RegistryError subclasses
    assets: list = [domain_packs, usage_costs, graph_quality]
    jobs, sensors = [graph_quality_job, graph_cleanup], []
    for pack in engine.packs.values():
        assets += build_ingestion_assets(engine, pack)
        job = ingestion_job(pack.name)
        jobs.append(job)
        sensors.append(build_document_sensor(pack.name, job))
    graph_keys = [dg.AssetKey([p, step]) for p in engine.packs for step in ("chunk_index", "graph_writes")]
    eval_report, eval_gate = build_eval_assets(graph_keys)
    assets.append(eval_report)
    return dg.Definitions(
        assets=assets,
        asset_checks=[eval_gate],
        jobs=jobs,
        sensors=sensors,
        schedules=[nightly_graph_quality],
        resources={"rag": EngineResource(config_path=config_path)},
    )


defs = build_definitions()
