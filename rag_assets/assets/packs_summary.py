"""domain_packs: which packs are enabled, by config alone."""


import dagster as dg

from rag_assets.resources import EngineResource
from rag_engine.pack_report import pack_summary


@dg.asset(group_name="platform", kinds={"python"},
          description="Enabled domain packs with their domains and versions.")
def domain_packs(rag: EngineResource) -> dg.MaterializeResult:
    summary = pack_summary(rag.engine())
    return dg.MaterializeResult(metadata={
        "pack_count": summary["pack_count"],
        "domains": dg.MetadataValue.json(summary["domains"]),
        "versions": dg.MetadataValue.json(summary["versions"]),
    })
